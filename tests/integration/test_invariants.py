"""The design's invariants, checked over the simulator's whole write log of a busy scenario.

One agent lives through most of what can happen to a node: a build-pod hold released when
the build ends, a no-op image hold superseded by the real update, an uncordon, an expiry, a
drain the MCC finished before the hold landed (race lost), an operator's release, a 410
re-list. Then every write the agent made is checked against invariants 1, 2 and 3, and every
request it sent against ``drain_guard.confine.permissions``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from drain_guard import protocol
from drain_guard.confine import permissions
from drain_guard.core import pods
from drain_guard_sim.apiserver.server import SimApiServer
from drain_guard_sim.apiserver.writelog import WriteRecord
from drain_guard_sim.harness.agentproc import AgentProcess
from tests.helpers import (
    AGENT_USER,
    IMAGE_A,
    IMAGE_B,
    MCO_NS,
    NODE,
    StartAgent,
    add_build_pod,
    add_own_daemonset,
    agent_writes,
    mcd_request,
    namespace_of,
    run_cli,
    wait_annotation,
)

MCC = "system:serviceaccount:openshift-machine-config-operator:machine-config-controller"


#: Long enough for step 4's ``release`` process to start on a loaded machine and find the hold
#: (at 3 s the hold could expire first); step 6 waits for it once.
MAX_HOLD = "15s"


def _config(n: int) -> str:
    return f"rendered-worker-{n:032d}"


def _ann(obj: dict[str, Any] | None) -> dict[str, str]:
    if obj is None:
        return {}
    annotations: dict[str, str] = obj.get("metadata", {}).get("annotations") or {}
    return annotations


async def _held(api: SimApiServer, value: str) -> None:
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + value)


async def _restored(api: SimApiServer, value: str) -> None:
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == value)


def _mcc_applies(api: SimApiServer, value: str) -> None:
    api.patch(
        "nodes",
        NODE,
        {"metadata": {"annotations": {protocol.LAST_APPLIED_DRAIN: value}}},
        user=MCC,
    )


async def _scenario(api: SimApiServer, agent: AgentProcess, tmp_path: Path) -> None:
    # 1. A build pod: held, released when the build ends; the MCC then drains.
    add_build_pod(api)
    drain1 = f"drain-{_config(1)}"
    mcd_request(api, drain1, **{protocol.DESIRED_IMAGE: IMAGE_B})
    await _held(api, drain1)
    pod = api.get("pods", "build-pod", MCO_NS)
    pod["status"]["phase"] = "Succeeded"
    api.update("pods", pod, MCO_NS, subresource="status")
    await _restored(api, drain1)
    _mcc_applies(api, drain1)
    mcd_request(api, f"uncordon-{_config(1)}")
    _mcc_applies(api, f"uncordon-{_config(1)}")

    # 2. A layered update to the booted image: held; superseded by the real update.
    drain2 = f"drain-{_config(2)}"
    mcd_request(api, drain2, **{protocol.DESIRED_IMAGE: IMAGE_A})
    await _held(api, drain2)
    drain3 = f"drain-{_config(3)}"
    mcd_request(api, drain3, **{protocol.DESIRED_IMAGE: IMAGE_B})
    await agent.wait_log(lambda r: r.get("request") == drain3 and r.get("outcome") == "pass")
    _mcc_applies(api, drain3)

    # 3. A drain the MCC finished although it was held (it started before the hold).
    add_build_pod(api, "build-pod-2")
    drain4 = f"drain-{_config(4)}"
    mcd_request(api, drain4)
    await _held(api, drain4)
    _mcc_applies(api, drain4)
    await agent.wait_log(lambda r: r.get("outcome") == "release:race-lost")

    # 4. An operator's release, then a 410 re-list, then an expiry of a newer request.
    drain5 = f"drain-{_config(5)}"
    mcd_request(api, drain5)
    await _held(api, drain5)
    kubeconfig = str(api.kubeconfig("kube:admin", tmp_path / "admin"))
    code, _, err = await run_cli("release", "--node-name", NODE, "--kubeconfig", kubeconfig)
    assert (code, err) == (0, "")
    await agent.wait_log(
        lambda r: r.get("message") == "hold ended" and r.get("outcome") == "manual"
    )
    _mcc_applies(api, drain5)
    api.create("namespaces", {"metadata": {"name": "bump"}})
    api.compact()
    api.cut_watches()
    drain6 = f"drain-{_config(6)}"
    mcd_request(api, drain6)
    await _held(api, drain6)
    await agent.wait_log(lambda r: r.get("outcome") == "release:expired")


def _drain_changes(writes: list[WriteRecord]) -> Iterator[tuple[WriteRecord, str | None, str]]:
    for w in writes:
        before = _ann(w.before).get(protocol.DESIRED_DRAIN)
        after = _ann(w.after).get(protocol.DESIRED_DRAIN)
        if w.resource == "nodes" and after is not None and after != before:
            yield w, before, after


async def test_invariants_over_the_write_log(
    api: SimApiServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    agent = await start_agent("--max-hold", MAX_HOLD)
    await _scenario(api, agent, tmp_path)
    writes = agent_writes(api)
    changes = list(_drain_changes(writes))
    # holds of 1, 2, 4, 5, 6; releases of 1 (safe), 4 (race lost), 6 (expired)
    assert len(changes) == 8

    for w, before, after in changes:
        before_ann, after_ann = _ann(w.before), _ann(w.after)
        last_applied = after_ann.get(protocol.LAST_APPLIED_DRAIN)
        # Invariant 1: never desiredDrain == lastAppliedDrain, except restoring a request the
        # MCC had really finished draining (race lost), which is what the MCD waits for.
        if after == last_applied:
            assert before == protocol.HOLD_PREFIX + after, w
            assert before_ann.get(protocol.LAST_APPLIED_DRAIN) == after, w
        # Invariant 2: a hold keeps the request in held-drain; a release restores it exactly.
        if after.startswith(protocol.HOLD_PREFIX):
            assert before == after.removeprefix(protocol.HOLD_PREFIX), w
            assert after_ann[protocol.HELD_DRAIN] == before, w
            # Invariant 3: never an uncordon.
            assert not before.startswith("uncordon-"), w
        else:
            assert before == protocol.HOLD_PREFIX + after, w

    # Invariant 3: only its own Node (and Events about it or related to it on its pool, and
    # the shield's budgets on the build pods of its node, labelled with its node, where build
    # pods run).
    for w in writes:
        if w.resource == "poddisruptionbudgets":
            labels = w.obj["metadata"].get("labels") or {}
            assert labels.get(pods.MANAGED_BY_KEY) == pods.MANAGED_BY, w
            assert labels.get(pods.NODE_KEY) == NODE, w
            assert w.namespace in permissions.MCO_NAMESPACES, w
            continue
        assert (w.resource, w.name) == ("nodes", NODE) or w.resource == "events", w
        if w.resource == "events":
            involved = w.obj["involvedObject"]
            if involved["kind"] == protocol.POOL_KIND:
                assert w.obj["related"]["name"] == NODE, w
            else:
                assert (involved["kind"], involved["name"]) == ("Node", NODE), w


async def test_every_request_the_agent_sent_is_permitted(
    api: SimApiServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    agent = await start_agent("--max-hold", MAX_HOLD, *add_own_daemonset(api))
    await _scenario(api, agent, tmp_path)
    api.delete("daemonsets", "drain-guard", "drain-guard")
    assert await agent.stop() == 0  # reads the DaemonSet (absent: uninstall, releases)
    sent = {
        (verb, resource, namespace_of(path))
        for _t, user, verb, resource, path, _status in api.request_log
        if user == AGENT_USER
    }
    assert ("get", "daemonsets.apps", "drain-guard") in sent
    assert ("patch", "nodes", None) in sent
    # The pod watch reads only where build pods run, never every namespace's pods; the
    # start-up check reads the agent's own pod.
    assert {(v, n) for v, r, n in sent if r == "pods"} == {
        ("list", MCO_NS),
        ("watch", MCO_NS),
        ("get", "drain-guard"),
    }
    # Discovery (which version serves MCO's pools and builds) is no resource request: every
    # authenticated user may make it (system:discovery), and the agent makes only that one.
    discovery = {path for _t, user, _v, resource, path, _s in api.request_log if not resource}
    assert discovery <= {
        "/apis/machineconfiguration.openshift.io/v1",
        "/apis/machineconfiguration.openshift.io/v1alpha1",
    }, discovery
    sent -= {("get", "", None)}
    # The noop-image guard's reads of MCO's objects: listed and watched.
    assert {(v, r) for v, r, _n in sent if r.endswith("openshift.io")} >= {
        ("list", "machineconfigpools.machineconfiguration.openshift.io"),
        ("watch", "machineconfigpools.machineconfiguration.openshift.io"),
    }
    probes = {(p.resource, v) for p in permissions.REFUSED_PROBES for v in p.verbs}
    for verb, resource, namespace in sent:
        plural, _, group = resource.partition(".")
        if (plural, verb) in probes:
            continue  # asked expecting a refusal: tests/deploy checks no role grants it
        assert "/" not in plural, (
            f"subresource {resource} is not in drain_guard.confine.permissions"
        )
        assert permissions.allowed(group, plural, verb, namespace), (verb, resource, namespace)


async def test_nothing_is_decided_before_the_pods_are_known(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    """Invariant 7: with the pod list failing, the agent neither holds nor lets anything go
    on a guess; /readyz says why; once the pods are known, it decides."""
    add_build_pod(api)
    drain = f"drain-{_config(1)}"
    rv = mcd_request(api, drain, **{protocol.DESIRED_IMAGE: IMAGE_B})
    fault = api.faults.error(500, user=AGENT_USER, verb="list", resource="pods")
    agent = await start_agent(ready=False)
    await agent.wait_log(lambda r: r.get("port") is not None)  # the harness reads it
    await agent.wait_log(lambda r: r.get("message") == "node watch synced")
    await agent.wait_log(lambda r: "API unreachable since" in str(r.get("message", "")))
    status, body = await agent.http("/readyz")
    assert (status, body.strip()) == (503, "pod watch not listed yet")
    assert not any(r.get("message") == "decision" for r in agent.records)
    assert agent_writes(api, since=rv, resource="nodes") == []

    api.faults.remove(fault)
    await _held(api, drain)
    status, _ = await agent.http("/readyz")
    assert status == 200
