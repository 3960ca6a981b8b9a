"""``--node-kubeconfig``: the self-check with Node writes made as the node. No install mode
uses it any more (OpenShift 4.15/4.16: the admission webhook, tests/integration/
test_webhook.py; systemd: the node proxy, tests/integration/test_node_proxy.py).

The simulator authorizes the node identity by the Node authorizer's rules and NodeRestriction
(``drain_guard_sim.nodeauth``).
"""

from __future__ import annotations

from pathlib import Path

from drain_guard_sim.apiserver import SimApiServer
from tests.helpers import (
    NODE,
    StartAgent,
    confinement,
)

NODE_USER = f"system:node:{NODE}"
OTHER = "worker-1"


async def test_a_service_account_that_may_patch_nodes_is_reported_in_node_identity_mode(
    api: SimApiServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    """Node writes go with the node's identity, but the account kept nodes patch (an old role
    left behind): an attacker in the pod could use its token on every Node. Reported as not
    confined."""
    api.create("nodes", {"metadata": {"name": OTHER}})
    api.add_node_user(NODE)
    kubeconfig = api.kubeconfig(NODE_USER, tmp_path / "kubelet-kubeconfig")
    agent = await start_agent("--node-kubeconfig", str(kubeconfig))
    doc = await confinement(agent)
    assert doc["confined"] is False, doc
    assert f"the service account may write Node {OTHER} too" in doc["detail"]
