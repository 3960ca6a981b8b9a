"""The disruption-budget guard on the real control plane, with the agent's own token: the named
budget read through the component daemonset/components/disruption-budgets (docs/install.md's
kustomization, rendered and applied as kubectl does), by name and nothing else; its status
written by the real disruption controller; a drain held while the budget allows no disruption
and released once it allows one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from drain_guard import protocol
from drain_guard.confine.rights import ALLOWED, RBAC
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.harness.agentproc import AgentProcess
from tests.controlplane.helpers import own_namespace, unique
from tests.controlplane.nodes import DRAIN_B, mcd_request, until, wait_annotation
from tests.controlplane.test_rights import (
    AGENT_NS,
    Installed,
    answer,
    installed,
    kubectl,
)
from tests.deploy.tools import documented_kustomization, render_dir
from tests.helpers import IMAGE_A, IMAGE_B, reap, spawn

__all__ = ["installed"]  # the fixture, with the overlay's RBAC and the agent pod's token

QUORUM = {"app": "quorum"}


async def watch_status(policy: client.PolicyV1Api, namespace: str, selector: str) -> int:
    """The HTTP status of a watch of the budgets ``selector`` selects (closed at once: a 200
    is a watch the API server started)."""
    resp: Any = await policy.list_namespaced_pod_disruption_budget(
        namespace, field_selector=selector, watch=True, _preload_content=False
    )
    resp.release()
    return int(resp.status)


async def ready_pod(admin: client.ApiClient, namespace: str, node: str) -> None:
    """A Ready pod the budget covers (no kubelet: its status is set here, as one would)."""
    core = client.CoreV1Api(admin)
    name = unique("quorum")
    pod: Any = {
        "metadata": {"name": name, "labels": QUORUM},
        "spec": {"nodeName": node, "containers": [{"name": "db", "image": "db"}]},
    }
    await core.create_namespaced_pod(namespace, pod)
    status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    await core.patch_namespaced_pod_status(name, namespace, {"status": status})


async def budget(admin: client.ApiClient, namespace: str, name: str, min_available: int) -> None:
    body: Any = {
        "metadata": {"name": name},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": QUORUM}},
    }
    await client.PolicyV1Api(admin).create_namespaced_pod_disruption_budget(namespace, body)


async def allows(
    admin: client.ApiClient, namespace: str, name: str, allowed: int, healthy: int = 1
) -> None:
    """Until the disruption controller says the budget (as it now is) allows ``allowed``,
    counting ``healthy`` Ready pods. A controller that has not seen the pods yet (its pod
    informer behind: after an API server restart it reconnects after a backoff that grows
    with the outage) counts none, and then allows no disruption whatever ``minAvailable``
    says: "allows 0" alone is no proof that the budget is what the test made it."""
    policy = client.PolicyV1Api(admin)

    async def check() -> bool:
        pdb = await policy.read_namespaced_pod_disruption_budget(name, namespace)
        status = pdb.status
        return bool(
            status is not None
            and status.observed_generation == pdb.metadata.generation
            and status.expected_pods == healthy
            and status.current_healthy == healthy
            and status.disruptions_allowed == allowed
        )

    await until(check)


async def quorum_budget(installed: Installed, tmp_path: Path) -> tuple[str, Path]:
    """A namespace with the component's Role for its budget ``quorum`` (docs/install.md's
    kustomization, applied as kubectl does; its manifest returned, to revoke it), one Ready
    pod on another node and ``quorum`` wanting it: the disruption controller allows no
    disruption."""
    admin = installed.admin
    db = await own_namespace(admin, "db")
    directory = documented_kustomization("Disruption budgets", tmp_path / "roles", db)
    kustomization = directory / "kustomization.yaml"
    kustomization.write_text(kustomization.read_text().replace("[NAME]", "[quorum]"))
    manifest = tmp_path / "roles.yaml"
    manifest.write_text(yaml.safe_dump_all(render_dir(directory)))
    kubectl(installed.plane, "apply", "-f", str(manifest))
    await ready_pod(admin, db, installed.other)
    await budget(admin, db, "quorum", 1)
    await allows(admin, db, "quorum", 0)  # the pod counted, and wanted
    return db, manifest


@pytest.mark.parametrize("installed", ["openshift"], indirect=True)
async def test_a_budget_that_allows_no_disruption_holds_the_drain_read_by_name_alone(
    installed: Installed, tmp_path: Path
) -> None:
    admin, node = installed.admin, installed.node
    db, _ = await quorum_budget(installed, tmp_path)
    elsewhere = await own_namespace(admin, "elsewhere")
    await budget(admin, db, "other", 0)
    await budget(admin, elsewhere, "quorum", 0)

    # The agent's own token: the named budget, listed and watched by name; nothing else.
    policy = client.PolicyV1Api(installed.agent)
    named = "metadata.name=quorum"
    assert (
        await answer(policy.list_namespaced_pod_disruption_budget(db, field_selector=named))
        == ALLOWED
    )
    assert await watch_status(policy, db, named) == 200
    assert await answer(policy.list_namespaced_pod_disruption_budget(db)) == RBAC
    other = "metadata.name=other"
    assert (
        await answer(policy.list_namespaced_pod_disruption_budget(db, field_selector=other)) == RBAC
    )
    assert await watch_status(policy, db, other) == 403
    assert await answer(policy.read_namespaced_pod_disruption_budget("quorum", db)) == RBAC
    assert (
        await answer(policy.list_namespaced_pod_disruption_budget(elsewhere, field_selector=named))
        == RBAC
    )
    assert await answer(client.CoreV1Api(installed.agent).list_namespaced_pod(db)) == RBAC

    started: list[AgentProcess] = []
    try:
        await spawn(
            node,
            installed.kubeconfig,
            HostFS(tmp_path / "host", IMAGE_A),
            "--daemonset",
            f"{AGENT_NS}/drain-guard",
            "--pod-name",
            installed.pod,
            "--disruption-budget",
            f"{db}/quorum",
            started=started,
        )
        await mcd_request(admin, node, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
        held = await wait_annotation(
            admin, node, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B
        )
        assert held[protocol.HOLD_REASONS] == "disruption-budget"
        assert held[protocol.HOLD_DETAIL] == (
            f"disruption-budget: budget {db}/quorum allows no disruption"
        )
        # The budget relaxed: the disruption controller allows one; the hold ends.
        body = {"spec": {"minAvailable": 0}}
        await client.PolicyV1Api(admin).patch_namespaced_pod_disruption_budget("quorum", db, body)
        await allows(admin, db, "quorum", 1)  # the controller's reaction, then the agent's
        await wait_annotation(admin, node, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_B)
    finally:
        await reap(started)


@pytest.mark.parametrize("installed", ["openshift"], indirect=True)
async def test_a_budget_the_agent_can_no_longer_read_is_reported_and_keeps_the_hold(
    installed: Installed, tmp_path: Path
) -> None:
    """The budget's Role revoked while the agent holds on it: its next watch is refused (403,
    retried); /status's watches name that watch, failing since then, /readyz is 503 with it
    once it fails for longer than --api-stale-after, and the guard keeps deciding on the
    budget it last saw (docs/protocol.md): the hold stays. Role restored: ready again."""
    admin, node = installed.admin, installed.node
    db, manifest = await quorum_budget(installed, tmp_path)
    watch = f"poddisruptionbudget {db}/quorum"
    started: list[AgentProcess] = []
    try:
        agent = await spawn(
            node,
            installed.kubeconfig,
            HostFS(tmp_path / "host", IMAGE_A),
            "--daemonset",
            f"{AGENT_NS}/drain-guard",
            "--pod-name",
            installed.pod,
            "--disruption-budget",
            f"{db}/quorum",
            # Renewed every 5 s, so that the revoked Role shows at once (a running watch
            # outlives its Role).
            "--watch-timeout",
            "5s",
            "--api-stale-after",
            "10s",
            started=started,
        )
        await mcd_request(admin, node, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
        held = await wait_annotation(
            admin, node, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B
        )
        assert held[protocol.HOLD_REASONS] == "disruption-budget"

        async def watch_state() -> dict[str, Any]:
            code, body = await agent.http("/status")
            assert code == 200
            state: dict[str, Any] = json.loads(body)["watches"][watch]
            return state

        assert (await watch_state())["watching"] is True
        kubectl(installed.plane, "delete", "-f", str(manifest))

        async def failing() -> dict[str, Any] | None:
            state = await watch_state()
            return state if state["failingSince"] is not None else None

        state = await until(failing)
        assert state["listed"] is True
        assert state["watching"] is False
        assert "403" in state["error"]

        async def unready() -> str | None:
            code, body = await agent.http("/readyz")
            return body if code == 503 and watch in body else None

        why = await until(unready)
        assert f"{watch} watch failing since {state['failingSince']}" in why
        # Deciding on the budget last seen: the hold stands, for the same reason.
        annotations = (await client.CoreV1Api(admin).read_node(node)).metadata.annotations
        assert annotations[protocol.DESIRED_DRAIN] == "hold-" + DRAIN_B
        assert annotations[protocol.HOLD_DETAIL] == held[protocol.HOLD_DETAIL]

        kubectl(installed.plane, "apply", "-f", str(manifest))

        async def ready() -> bool:
            code, _ = await agent.http("/readyz")
            return code == 200

        await until(ready)
        assert (await watch_state())["failingSince"] is None
    finally:
        await reap(started)
