"""Generated Events, budgets and pods of an agent, for the tests that hold the confinement
checkers to one answer beyond the Node (drain_guard.confine.rules): the CEL policies
drain-guard-event-confinement, -budget-confinement and -pod-confinement on a real API server
(tests/controlplane/test_confinement_agreement.py) and the 4.15 webhook
(tests/unit/test_confinement_rules.py).

Each case starts from what the agent (or its DaemonSet) writes, which every checker admits,
and changes none, one or two of its parts at random from a seed, each change one a checker
looks at; every case stays an object the API server's validation accepts, so that only
admission answers. Node names are those of the test's cluster.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from drain_guard import protocol
from drain_guard.confine.rules import EVENT_COMPONENT, EVENT_NAMESPACE, MAX_VALUE_BYTES
from drain_guard.core.pods import MANAGED_BY, MANAGED_BY_KEY, NODE_KEY
from drain_guard.core.selectors import MCO_NAMESPACE

Obj = dict[str, Any]
Change = Callable[[random.Random, Obj, str, str], None]


def _pick(rng: random.Random, changes: dict[str, Change], obj: Obj, node: str, other: str) -> str:
    """Apply none (about a third of the cases), one or two of ``changes``; say which."""
    count = rng.choice((0, 1, 1, 2))
    names = rng.sample(sorted(changes), count)
    for name in names:
        changes[name](rng, obj, node, other)
    return ", ".join(names) or "as written"


# --- Events -------------------------------------------------------------------------------


@dataclass(frozen=True)
class EventWrite:
    """An agent's Event: created, or ``old`` patched into ``event`` (an UPDATE)."""

    what: str
    event: Obj
    old: Obj | None = None

    def merge_patch(self) -> Obj:
        """The JSON merge patch (RFC 7386) from ``old`` to ``event``."""
        assert self.old is not None
        return _merge_patch(self.old, self.event)


def _merge_patch(old: Obj, new: Obj) -> Obj:
    patch: Obj = {key: None for key in old if key not in new}
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(old.get(key), dict):
            inner = _merge_patch(old[key], value)
            if inner:
                patch[key] = inner
        elif old.get(key) != value:
            patch[key] = value
    return patch


def recorded_event(node: str, name: str, pool: str | None = None) -> Obj:
    """An Event as the agent's recorder writes it about its Node (or its ``pool``)."""
    event: Obj = {
        "metadata": {"name": name, "namespace": EVENT_NAMESPACE},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node},
        "reason": "DrainHeld",
        "message": "held",
        "type": "Normal",
        "source": {"component": EVENT_COMPONENT, "host": node},
        "reportingComponent": EVENT_COMPONENT,
        "reportingInstance": f"{EVENT_COMPONENT}-{node}",
    }
    if pool is not None:
        event["involvedObject"] = {
            "apiVersion": protocol.POOL_API_VERSION,
            "kind": protocol.POOL_KIND,
            "name": pool,
        }
        event["reason"] = protocol.POOL_ROLLOUT_HELD
        event["related"] = {"apiVersion": "v1", "kind": "Node", "name": node}
    return event


def _set(path: tuple[str, ...], values: Callable[[str, str], tuple[Any, ...]]) -> Change:
    """A change that sets ``path`` to one of ``values(node, other)`` (None: removes it)."""

    def change(rng: random.Random, obj: Obj, node: str, other: str) -> None:
        *parents, last = path
        for key in parents:
            obj = obj.setdefault(key, {})
        value = rng.choice(values(node, other))
        if value is None:
            obj.pop(last, None)
        else:
            obj[last] = value

    return change


EVENT_CHANGES: dict[str, Change] = {
    "involved kind": _set(("involvedObject", "kind"), lambda n, o: ("Pod", protocol.POOL_KIND)),
    "involved name": _set(("involvedObject", "name"), lambda n, o: (o, "")),
    # Only the Event's own namespace: another is invalid for a cluster-scoped object.
    "involved namespace": _set(("involvedObject", "namespace"), lambda n, o: (EVENT_NAMESPACE,)),
    "pool API": _set(("involvedObject", "apiVersion"), lambda n, o: ("v1", "example.com/v1")),
    "reason": _set(("reason",), lambda n, o: ("Foo", protocol.POOL_ROLLOUT_RELEASED, None)),
    "related": _set(
        ("related",),
        lambda n, o: (
            None,
            {"apiVersion": "v1", "kind": "Node", "name": o},
            {"apiVersion": "v1", "kind": "Pod", "name": n},
            {"apiVersion": "v1", "kind": "Node", "name": n, "fieldPath": "spec"},
        ),
    ),
    "source host": _set(("source", "host"), lambda n, o: (o, None)),
    "source component": _set(("source", "component"), lambda n, o: ("kubelet", None)),
    "reporting component": _set(("reportingComponent",), lambda n, o: ("kubelet", None)),
    "reporting instance": _set(("reportingInstance",), lambda n, o: (f"{EVENT_COMPONENT}-{o}",)),
    "message": _set(
        ("message",),
        lambda n, o: ("x" * MAX_VALUE_BYTES, "x" * (MAX_VALUE_BYTES + 1), "é" * 513, None),
    ),
}


def event_writes(seed: int, count: int, node: str, other: str, pool: str) -> list[EventWrite]:
    """``count`` Events of the agent of ``node`` (``other``: another node; ``pool``: a pool),
    created or updated, each named uniquely from ``seed``."""
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        name = f"{node}.agreement-{seed}-{i}"
        event = recorded_event(node, name, pool if rng.random() < 0.4 else None)
        what = _pick(rng, EVENT_CHANGES, event, node, other)
        if rng.random() < 0.3:  # an update of an Event as written, or of a changed one
            old = recorded_event(node, name, pool if rng.random() < 0.4 else None)
            what_old = _pick(rng, EVENT_CHANGES, old, node, other)
            cases.append(EventWrite(f"update of ({what_old}) into ({what})", event, old))
        else:
            cases.append(EventWrite(f"create ({what})", event))
    return cases


# --- budgets ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BudgetWrite:
    """An agent's budget: created, or deleted as it was stored."""

    what: str
    operation: str  # CREATE or DELETE
    budget: Obj


def shield_budget(node: str, name: str, uid: str) -> Obj:
    """A budget as the shield makes one, on the build pod ``name`` (of uid ``uid``)."""
    labels = {"openshift.io/build.name": name}
    return {
        "metadata": {
            "name": f"drain-guard-build-{name}",
            "namespace": MCO_NAMESPACE,
            "labels": {MANAGED_BY_KEY: MANAGED_BY, NODE_KEY: node},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}],
        },
        "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
    }


def _owners(rng: random.Random, budget: Obj, node: str, other: str) -> None:
    owner = budget["metadata"]["ownerReferences"][0]
    budget["metadata"]["ownerReferences"] = rng.choice(
        (
            [],
            [owner, {**owner, "name": "second", "uid": "uid-second"}],
            [{**owner, "kind": "ReplicaSet", "apiVersion": "apps/v1"}],
            [{**owner, "controller": True}],
            [{**owner, "blockOwnerDeletion": True}],
        )
    )


def _availability(rng: random.Random, budget: Obj, node: str, other: str) -> None:
    spec = budget["spec"]
    del spec["minAvailable"]
    spec.update(rng.choice(({"minAvailable": 2}, {"minAvailable": "100%"}, {"maxUnavailable": 0})))


def _selector(rng: random.Random, budget: Obj, node: str, other: str) -> None:
    match = budget["spec"]["selector"]["matchLabels"]
    choice = rng.randrange(5)
    if choice == 0:
        match["k8s-app"] = "machine-os-builder"
    elif choice == 1:
        match.clear()
        match["batch.kubernetes.io/job-name"] = rng.choice(("build-rendered-x", "other-x"))
    elif choice == 2:
        match.clear()
        match["app"] = "anything"
    elif choice == 3:
        match["machineconfiguration.openshift.io/buildPod"] = "yes"
    else:
        budget["spec"]["selector"]["matchExpressions"] = [{"key": "app", "operator": "Exists"}]


BUDGET_CHANGES: dict[str, Change] = {
    "node label": _set(("metadata", "labels", NODE_KEY), lambda n, o: (o, None)),
    "managed-by": _set(("metadata", "labels", MANAGED_BY_KEY), lambda n, o: ("someone", None)),
    "owners": _owners,
    "availability": _availability,
    "selector": _selector,
}
#: A stored budget's delete is judged by its labels alone.
DELETE_CHANGES = {k: BUDGET_CHANGES[k] for k in ("node label", "managed-by")}


def budget_writes(seed: int, count: int, node: str, other: str) -> list[BudgetWrite]:
    """``count`` budgets of the agent of ``node`` created or deleted, from ``seed``."""
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        budget = shield_budget(node, f"build-{seed}-{i}", f"uid-{seed}-{i}")
        if rng.random() < 0.25:
            what = _pick(rng, DELETE_CHANGES, budget, node, other)
            del budget["metadata"]["ownerReferences"]  # kept: the collector would delete it
            cases.append(BudgetWrite(f"delete ({what})", "DELETE", budget))
        else:
            what = _pick(rng, BUDGET_CHANGES, budget, node, other)
            cases.append(BudgetWrite(f"create ({what})", "CREATE", budget))
    return cases


# --- the agent's pod ----------------------------------------------------------------------


@dataclass(frozen=True)
class PodWrite:
    """A pod that runs as the agents' account, as its creator sends it."""

    what: str
    pod: Obj


def _containers(pod: Obj) -> list[Obj]:
    spec = pod["spec"]
    return [*spec["containers"], *spec.get("initContainers", [])]


def _in_a_container(change: Callable[[random.Random, Obj], None]) -> Change:
    def apply(rng: random.Random, pod: Obj, node: str, other: str) -> None:
        change(rng, rng.choice(_containers(pod)))

    return apply


def _security(container: Obj) -> Obj:
    security: Obj = container.setdefault("securityContext", {})
    return security


def _privileged(rng: random.Random, container: Obj) -> None:
    _security(container).update(privileged=True, allowPrivilegeEscalation=True)


def _escalation(rng: random.Random, container: Obj) -> None:
    security = _security(container)
    if rng.random() < 0.5:
        security.pop("allowPrivilegeEscalation", None)
    else:
        security["allowPrivilegeEscalation"] = True


def _capabilities(rng: random.Random, container: Obj) -> None:
    capabilities = _security(container).setdefault("capabilities", {})
    if rng.random() < 0.5:
        capabilities["add"] = ["NET_RAW"]
    else:
        capabilities["drop"] = ["NET_RAW"]


def _user(rng: random.Random, container: Obj) -> None:
    _security(container)[rng.choice(("runAsUser", "runAsGroup"))] = rng.choice((0, 1000))


def _seccomp(rng: random.Random, container: Obj) -> None:
    _security(container)["seccompProfile"] = {"type": "Unconfined"}


def _container_selinux(rng: random.Random, container: Obj) -> None:
    _security(container)["seLinuxOptions"] = {"type": "spc_t"}


def _host_port(rng: random.Random, container: Obj) -> None:
    container["ports"] = [{"containerPort": 9797, "hostPort": 9797}]


def _host_mount(rng: random.Random, pod: Obj, node: str, other: str) -> None:
    volumes = pod["spec"].setdefault("volumes", [])
    host = [v for v in volumes if "hostPath" in v]
    if host and rng.random() < 0.6:
        volume = host[0]
        for container in _containers(pod):
            for mount in container.get("volumeMounts", []):
                if mount["name"] == volume["name"]:
                    change = rng.choice(({"readOnly": False}, {"subPath": "deploy"}))
                    mount.update(change)
                    return
        volume["hostPath"] = rng.choice(
            ({"path": "/etc", "type": "Directory"}, {"path": "/sysroot/ostree"})
        )
    else:
        volumes.append({"name": "extra", "hostPath": {"path": "/var/lib", "type": "Directory"}})


def _volume_kind(rng: random.Random, pod: Obj, node: str, other: str) -> None:
    volumes = pod["spec"].setdefault("volumes", [])
    volumes.append(
        rng.choice(
            (
                {"name": "nfs", "nfs": {"server": "10.0.0.9", "path": "/x"}},
                {"name": "scratch", "emptyDir": {}},
            )
        )
    )


POD_CHANGES: dict[str, Change] = {
    "host network": _set(("spec", "hostNetwork"), lambda n, o: (True,)),
    "host PID": _set(("spec", "hostPID"), lambda n, o: (True,)),
    "fsGroup": _set(("spec", "securityContext", "fsGroup"), lambda n, o: (0, 65532)),
    "supplemental groups": _set(
        ("spec", "securityContext", "supplementalGroups"), lambda n, o: ([0], [65532])
    ),
    "pod SELinux": _set(
        ("spec", "securityContext", "seLinuxOptions"),
        lambda n, o: ({"type": "spc_t"}, {"level": "s0:c1,c2"}),
    ),
    "sysctls": _set(
        ("spec", "securityContext", "sysctls"),
        lambda n, o: ([{"name": "kernel.shm_rmid_forced", "value": "1"}],),
    ),
    "privileged": _in_a_container(_privileged),
    "escalation": _in_a_container(_escalation),
    "capabilities": _in_a_container(_capabilities),
    "user": _in_a_container(_user),
    "seccomp": _in_a_container(_seccomp),
    "container SELinux": _in_a_container(_container_selinux),
    "host port": _in_a_container(_host_port),
    "host mount": _host_mount,
    "volume kind": _volume_kind,
}


def pod_writes(seed: int, count: int, namespace: str, spec: Obj) -> list[PodWrite]:
    """``count`` pods in ``namespace`` from the DaemonSet's pod ``spec``, from ``seed``."""
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        metadata = {"name": f"agreement-{seed}-{i}", "namespace": namespace}
        pod = {"metadata": metadata, "spec": copy.deepcopy(spec)}
        what = _pick(rng, POD_CHANGES, pod, "", "")
        cases.append(PodWrite(what, pod))
    return cases
