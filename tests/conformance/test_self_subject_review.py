"""``SelfSubjectReview`` (``kubectl auth whoami``): who the API server takes the caller for,
which ``drain-guard release`` records in ``drain-guard.io/released-by``. Any authenticated
user may ask (the ``system:basic-user`` ClusterRole); nothing is stored."""

from __future__ import annotations

from pathlib import Path

from tests.conformance.client import Client
from tests.conformance.servers import Server

PATH = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
REVIEW = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}


async def test_a_user_learns_the_name_the_server_knows_it_by(
    server: Server, ns: str, tmp_path: Path
) -> None:
    user = f"{ns}-alice"
    kubeconfig = server.user_kubeconfig(user, [f"{ns}-ops"], tmp_path / "kc")
    async with Client(kubeconfig) as alice:
        answer = await alice.post(PATH, REVIEW)
    assert answer.status == 201, answer.body
    assert answer.body["kind"] == "SelfSubjectReview"
    info = answer.body["status"]["userInfo"]
    assert info["username"] == user
    assert {f"{ns}-ops", "system:authenticated"} <= set(info["groups"])


async def test_a_token_user_is_authenticated_too(server: Server, admin: Client) -> None:
    answer = await admin.post(PATH, REVIEW)
    assert answer.status == 201, answer.body
    assert "system:authenticated" in answer.body["status"]["userInfo"]["groups"]
