"""Issue 34: a renamed install confines its renamed account, on the real kube-apiserver.

The ``openshift`` overlay is rendered as a user renames it (a namespace of the test's own,
with a kustomize ``namePrefix``, a ``nameSuffix`` or both, and the renamed-namespace
transformer listed, as docs/install.md says) and applied with kubectl. The agent's pod is made
from the renamed DaemonSet's template on a Node (the renamed pod policy admits it and refuses
it with the host's PID namespace), and its token is a real one bound to that pod. The renamed
account must then be refused, by the renamed policies themselves, the writes the shipped
account is refused: another Node's hold, a budget for another Node's build, an Event about
another Node. With the policies matching ``endsWith(':drain-guard')`` a ``namePrefix`` left
them all allowed (RBAC grants the verbs; the policies are what confine them).
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard_sim.harness.controlplane import ControlPlane
from tests.controlplane.helpers import api_client, bound_kubeconfig, unique
from tests.controlplane.nodes import create_worker, shared_namespace, until
from tests.controlplane.test_rights import (
    CRDS,
    Installed,
    applied,
    create_pool,
    hold_other_node,
    kubectl,
    other_nodes_budget,
    other_nodes_event,
    policies_in_force,
)
from tests.deploy.tools import DAEMONSET_DIR, Obj, relative, render_dir, user_kustomization
from tests.helpers import MCO_NS

FIXUPS = DAEMONSET_DIR / "transformers" / "renamed-namespace"
RENAMES = ["prefix", "suffix", "prefix-and-suffix"]


def _pod(daemonset: Obj, uid: str, node: str) -> dict[str, Any]:
    """The pod the renamed DaemonSet's controller would make on ``node``."""
    template = copy.deepcopy(daemonset["spec"]["template"])
    owner = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "name": daemonset["metadata"]["name"],
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return {
        "metadata": {
            "name": unique("agent"),
            "labels": template["metadata"]["labels"],
            "ownerReferences": [owner],
        },
        "spec": {**template["spec"], "nodeName": node},
    }


@pytest.fixture(params=RENAMES)
async def renamed(
    request: pytest.FixtureRequest, control_plane: ControlPlane, tmp_path: Path
) -> AsyncIterator[tuple[Installed, str, str]]:
    """The renamed install, applied, with the agent's pod and its bound token; and the
    rename's prefix and suffix."""
    tag = unique("r")
    prefix = f"{tag}-" if "prefix" in request.param else ""
    suffix = f"-{tag}" if "suffix" in request.param else ""
    namespace = f"{tag}-ns"
    mine = tmp_path / "mine"
    fields: dict[str, Any] = {"namespace": namespace, "transformers": [relative(FIXUPS, mine)]}
    if prefix:
        fields["namePrefix"] = prefix
    if suffix:
        fields["nameSuffix"] = suffix
    objects = applied(render_dir(user_kustomization(mine, "openshift", **fields)))
    manifest = tmp_path / "renamed.yaml"
    manifest.write_text(yaml.safe_dump_all(objects))
    (daemonset,) = (o for o in objects if o["kind"] == "DaemonSet")
    account = daemonset["spec"]["template"]["spec"]["serviceAccountName"]
    assert account == f"{prefix}drain-guard{suffix}"
    plane = control_plane
    async with api_client(plane.admin_kubeconfig) as admin:
        core: Any = client.CoreV1Api(admin)  # dict bodies, as rendered
        await shared_namespace(admin, MCO_NS)
        kubectl(plane, "apply", "--server-side", "-f", str(CRDS))
        kubectl(plane, "wait", "--for=condition=Established", "-f", str(CRDS))
        kubectl(plane, "apply", "--server-side", "--force-conflicts", "-f", str(manifest))
        try:
            await shared_namespace(admin, namespace)
            node, other = await create_worker(admin), await create_worker(admin)
            pool = await create_pool(plane, admin)
            uid = (
                await client.AppsV1Api(admin).read_namespaced_daemon_set(
                    daemonset["metadata"]["name"], namespace
                )
            ).metadata.uid
            body = _pod(daemonset, uid, node)
            # The renamed pod policy refuses the renamed account's pod with the host's PIDs,
            # once the API server has loaded it (in the background: under load a create right
            # after the apply was admitted). Asked as a dry run until it is refused.
            hostile = copy.deepcopy(body)
            hostile["spec"]["hostPID"] = True

            async def hostile_refused() -> str | None:
                try:
                    await core.create_namespaced_pod(namespace, hostile, dry_run="All")
                except ApiException as error:
                    return str(error.body)
                return None

            refusal = await until(hostile_refused)
            assert f"{prefix}drain-guard-pod-confinement{suffix}" in refusal
            pod = await core.create_namespaced_pod(namespace, body)
            kubeconfig = await bound_kubeconfig(
                admin,
                plane,
                tmp_path / "agent",
                namespace,
                account,
                (pod.metadata.name, pod.metadata.uid),
            )
            async with api_client(kubeconfig) as agent:
                yield (
                    Installed("openshift", plane, admin, agent, kubeconfig, node, other, "", pool),
                    prefix,
                    suffix,
                )
        finally:
            kubectl(plane, "delete", "--ignore-not-found", "--wait=false", "-f", str(manifest))


async def test_the_renamed_account_is_confined_by_the_renamed_policies(
    renamed: tuple[Installed, str, str],
) -> None:
    setup, prefix, suffix = renamed
    await policies_in_force(setup)
    answers = {
        "node": await hold_other_node(setup),
        "budget": await other_nodes_budget(setup),
        "event": await other_nodes_event(setup),
    }
    assert answers == {
        kind: f"denied: {prefix}drain-guard-{kind}-confinement{suffix}" for kind in answers
    }
