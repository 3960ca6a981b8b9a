"""An independent checker of the invariants of docs/protocol.md over the simulator's full write log.

It judges what the agents *did* (the writes the API server accepted, with the objects before
and after) and never asks the agent's own code (``drain_guard.decide``, ``drain_guard.guards``)
what it should have done: only the annotation names are shared. Each rule is re-derived from
the design:

- ``scope`` (invariant 3): an agent writes only its own Node (and Events about it), and on the
  Node only ``desiredDrain`` and the ``drain-guard.io/`` keys it owns (not ``hold-request``);
- ``applied`` (invariant 1): no agent write leaves ``desiredDrain == lastAppliedDrain``, except
  the race-lost release: restoring ``X`` from ``hold-X`` after the MCC wrote
  ``lastAppliedDrain=X`` with the node cordoned (it really drained for ``X``);
- ``rewrite`` (invariants 2, 3): an agent changes ``desiredDrain`` only from ``drain-X`` to
  ``hold-drain-X`` (recording ``held-drain=drain-X``) or from ``hold-X`` back to exactly ``X``;
- ``lost`` (invariant 2): after every write, the MCD's latest request is in ``desiredDrain``
  or, while held, in ``held-drain``;
- ``overdue`` (invariant 5): no hold outlives ``max-hold`` by more than one reconcile
  interval of time in which its agent was up, synced and unimpaired by faults;
- ``unreleased``: at the end of a settled run no hold is left in force;
- ``evicted``: no build pod is evicted by a drain whose request sat un-held on the node for
  longer than the reaction grace while the node's agent was up, synced and unimpaired and the
  pod was running (a request released by expiry or by an operator is let through on purpose).

"Up, synced and unimpaired" is given by the caller as intervals per node (the chaos harness
derives them from each agent process's lifetime, its first decision log line, and the fault
schedule). Times are ``time.monotonic()`` values of the simulator's process.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from drain_guard_sim.apiserver.writelog import WriteRecord
from drain_guard_sim.harness.checkresult import Checked, CheckerConfig, Violation
from drain_guard_sim.harness.intervals import Interval, intersect, longest, normalise

#: The label the shield puts on its budgets (docs/shield.md), restated, not imported:
#: the checker judges the agent from the outside.
SHIELD_NODE_LABEL = "drain-guard.io/node"

__all__ = ["check"]

JsonObj = dict[str, Any]

MCO = "machineconfiguration.openshift.io/"
DESIRED_DRAIN = MCO + "desiredDrain"
LAST_APPLIED_DRAIN = MCO + "lastAppliedDrain"
DG = "drain-guard.io/"
HELD_DRAIN = DG + "held-drain"
HELD_SINCE = DG + "held-since"
RELEASED = DG + "released"
HOLD_REQUEST = DG + "hold-request"
HOLD = "hold-"
#: Object fields a write may change without the writer having changed them.
_SERVER_FIELDS = ("resourceVersion", "managedFields", "generation")


# --- interval arithmetic ------------------------------------------------------------------


# --- helpers --------------------------------------------------------------------------------


def _ann(obj: JsonObj | None) -> dict[str, str]:
    if not obj:
        return {}
    annotations: dict[str, str] = (obj.get("metadata") or {}).get("annotations") or {}
    return annotations


def _unschedulable(obj: JsonObj | None) -> bool:
    return bool(((obj or {}).get("spec") or {}).get("unschedulable"))


def _without_owned(obj: JsonObj | None, owned: Callable[[str], bool]) -> JsonObj:
    """The object minus server-managed fields and the annotations the writer may change."""
    if obj is None:
        return {}
    copy = dict(obj)
    meta = dict(copy.get("metadata") or {})
    for key in _SERVER_FIELDS:
        meta.pop(key, None)
    meta["annotations"] = {k: v for k, v in _ann(obj).items() if not owned(k)}
    copy["metadata"] = meta
    return copy


def _agent_owns(key: str) -> bool:
    return key == DESIRED_DRAIN or (key.startswith(DG) and key != HOLD_REQUEST)


def _since(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None


def _pod_running(obj: JsonObj | None) -> bool:
    if obj is None:
        return False
    phase = (obj.get("status") or {}).get("phase")
    deleting = (obj.get("metadata") or {}).get("deletionTimestamp")
    return phase not in ("Succeeded", "Failed") and not deleting


# --- the checker ----------------------------------------------------------------------------


@dataclass
class _Node:
    """What the checker tracks per node while replaying the log."""

    state: JsonObj | None = None
    mcd_request: str | None = None
    #: (start, end) of times desiredDrain was a pending, unprotected drain-* request.
    pending: list[Interval] = field(default_factory=list)
    pending_since: float | None = None
    #: The hold in force: (desiredDrain value, held-since).
    hold: tuple[str, datetime | None] | None = None
    #: When lastAppliedDrain changed (a drain or uncordon completed).
    last_applied_changes: list[float] = field(default_factory=list)
    cordons: list[float] = field(default_factory=list)


class _Replay:
    def __init__(self, config: CheckerConfig, offset: float) -> None:
        self.config = config
        self.offset = offset  # monotonic = wall timestamp + offset
        self.nodes: dict[str, _Node] = {}
        self.pods: dict[tuple[str, str], JsonObj | None] = {}
        self.pod_alive: dict[tuple[str, str], list[Interval]] = {}
        self.pod_since: dict[tuple[str, str], float] = {}
        self.result = Checked()
        self.node_log: dict[str, list[WriteRecord]] = {}

    def fail(self, rule: str, node: str, t: float, message: str, rv: int | None = None) -> None:
        self.result.violations.append(Violation(rule, node, t, message, rv))

    def clean(self, node: str) -> list[Interval]:
        return normalise(self.config.clean.get(node, ()))

    # -- per write ---------------------------------------------------------------------------

    def write(self, w: WriteRecord) -> None:
        node_of_agent = self.config.agent_users.get(w.user)
        if node_of_agent is not None:
            self.agent_scope(w, node_of_agent)
        if w.resource == "nodes":
            self.node_write(w, node_of_agent)
            self.node_log.setdefault(w.name, []).append(w)
        elif w.resource == "pods":
            self.pod_write(w)

    def agent_scope(self, w: WriteRecord, node: str) -> None:
        if w.resource == "poddisruptionbudgets":
            # The shield's budgets: created and deleted, labelled with the agent's own node.
            # (The simulated nodes' names are valid label values as they are.)
            labels = (w.obj.get("metadata") or {}).get("labels") or {}
            if w.verb not in ("create", "delete") or labels.get(SHIELD_NODE_LABEL) != node:
                self.fail("scope", node, w.time, f"{w.verb} budget {w.namespace}/{w.name}", w.rv)
            return
        if w.resource == "events":
            # About its own Node, or its pool's Events related to its own Node.
            involved = w.obj.get("involvedObject") or {}
            related = w.obj.get("related") or {}
            own = ("Node", node)
            if (involved.get("kind"), involved.get("name")) != own and (
                involved.get("kind") != "MachineConfigPool"
                or (related.get("kind"), related.get("name")) != own
            ):
                self.fail("scope", node, w.time, f"Event about {involved} from agent", w.rv)
            return
        if (w.resource, w.name) != ("nodes", node):
            self.fail("scope", node, w.time, f"{w.verb} {w.gr} {w.namespace}/{w.name}", w.rv)
            return
        if w.verb not in ("patch", "update") or w.subresource:
            self.fail("scope", node, w.time, f"{w.verb} nodes/{w.subresource}", w.rv)
            return
        if _without_owned(w.before, _agent_owns) != _without_owned(w.after, _agent_owns):
            before, after = _ann(w.before), _ann(w.after)
            keys = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            self.fail(
                "scope",
                node,
                w.time,
                f"changed more than desiredDrain and its own keys (annotations {keys})",
                w.rv,
            )

    def node_write(self, w: WriteRecord, agent_node: str | None) -> None:
        name = w.name
        st = self.nodes.setdefault(name, _Node())
        before, after = _ann(w.before), _ann(w.after)
        d_before, d_after = before.get(DESIRED_DRAIN), after.get(DESIRED_DRAIN)
        la_before, la_after = before.get(LAST_APPLIED_DRAIN), after.get(LAST_APPLIED_DRAIN)
        if w.verb == "create" or st.mcd_request is None:
            st.mcd_request = d_after
        if w.user == self.config.mcd_user and d_after != d_before:
            self.result.requests += 1
            if (
                st.hold is not None
                and d_after is not None
                and d_after != st.hold[0].removeprefix(HOLD)
            ):
                self.result.supersedes += 1
        if w.user == self.config.mcd_user and DESIRED_DRAIN in after:
            st.mcd_request = d_after
        if la_after != la_before:
            st.last_applied_changes.append(w.time)
        if (
            w.user == self.config.mcc_user
            and not _unschedulable(w.before)
            and _unschedulable(w.after)
        ):
            st.cordons.append(w.time)
        if agent_node is not None and agent_node == name and d_after != d_before:
            self.agent_rewrite(w, name, d_before, d_after, before, after)
        # Invariant 2 after every write, whoever wrote it.
        request = st.mcd_request
        if w.after is not None and request is not None:
            held_ok = d_after == HOLD + request and after.get(HELD_DRAIN) == request
            if d_after != request and not held_ok:
                self.fail(
                    "lost",
                    name,
                    w.time,
                    f"the MCD's request {request!r} is neither in desiredDrain ({d_after!r}) nor "
                    f"held (held-drain {after.get(HELD_DRAIN)!r}); written by {w.user}",
                    w.rv,
                )
        self.track_pending(st, w, after)
        self.track_hold(st, w, name, after)
        st.state = w.after

    def agent_rewrite(
        self,
        w: WriteRecord,
        node: str,
        d_before: str | None,
        d_after: str | None,
        before: Mapping[str, str],
        after: Mapping[str, str],
    ) -> None:
        la_after = after.get(LAST_APPLIED_DRAIN)
        race_lost = d_before == HOLD + (d_after or "\0") and self.race_lost(node, d_after)
        if d_after is not None and d_after == la_after and not race_lost:
            self.fail(
                "applied",
                node,
                w.time,
                f"wrote desiredDrain {d_after!r} equal to lastAppliedDrain without the MCC "
                "having drained for it (only a race-lost release may)",
                w.rv,
            )
        if d_after is not None and d_after.startswith(HOLD):
            original = d_after.removeprefix(HOLD)
            if d_before != original or not original.startswith("drain-"):
                self.fail("rewrite", node, w.time, f"{d_before!r} → {d_after!r}", w.rv)
            elif after.get(HELD_DRAIN) != original:
                self.fail(
                    "rewrite",
                    node,
                    w.time,
                    f"held {original!r} but held-drain is {after.get(HELD_DRAIN)!r}",
                    w.rv,
                )
            elif original == la_after:
                self.fail("applied", node, w.time, f"held {original!r}, already applied", w.rv)
            else:
                self.result.holds += 1
            return
        if d_before is None or d_before != HOLD + (d_after or "\0"):
            self.fail("rewrite", node, w.time, f"{d_before!r} → {d_after!r}", w.rv)
            return
        if before.get(HELD_DRAIN) != d_after:
            self.fail(
                "rewrite",
                node,
                w.time,
                f"restored {d_after!r} but held-drain was {before.get(HELD_DRAIN)!r}",
                w.rv,
            )
            return
        self.result.releases += 1
        if d_after == la_after and self.race_lost(node, d_after):
            self.result.race_lost_releases += 1

    def race_lost(self, node: str, value: str | None) -> bool:
        """The MCC wrote lastAppliedDrain=value, with the node cordoned, before this write."""
        for prev in reversed(self.node_log.get(node, [])):
            pa, pb = _ann(prev.after), _ann(prev.before)
            if pa.get(LAST_APPLIED_DRAIN) != pb.get(LAST_APPLIED_DRAIN):
                return (
                    prev.user == self.config.mcc_user
                    and pa.get(LAST_APPLIED_DRAIN) == value
                    and _unschedulable(prev.after)
                )
        return False

    def track_pending(self, st: _Node, w: WriteRecord, after: Mapping[str, str]) -> None:
        """Intervals in which a drain request sits on the node un-held and not released."""
        desired = after.get(DESIRED_DRAIN, "")
        pending = (
            desired.startswith("drain-")
            and desired != after.get(LAST_APPLIED_DRAIN)
            and after.get(RELEASED) != desired
        )
        if pending and st.pending_since is None:
            st.pending_since = w.time
        elif not pending and st.pending_since is not None:
            st.pending.append((st.pending_since, w.time))
            st.pending_since = None

    def track_hold(self, st: _Node, w: WriteRecord, node: str, after: Mapping[str, str]) -> None:
        desired = after.get(DESIRED_DRAIN, "")
        in_force = desired.startswith(HOLD) and after.get(HELD_DRAIN) == desired.removeprefix(HOLD)
        current = (desired, _since(after.get(HELD_SINCE))) if in_force else None
        if st.hold is not None and current != st.hold:
            self.hold_ended(node, st.hold, w.time)
            st.hold = None
        if current is not None and st.hold is None:
            st.hold = current

    def hold_ended(
        self, node: str, hold: tuple[str, datetime | None], end: float, *, final: bool = False
    ) -> None:
        value, since = hold
        if since is None:
            return  # an unreadable held-since: the agent releases it as invalid at once
        expiry = since.timestamp() + self.offset + self.config.max_hold
        late = intersect([(expiry, max(expiry, end))], self.clean(node))
        if longest(late) > self.config.reconcile_interval:
            self.fail(
                "overdue",
                node,
                end,
                f"hold {value} (held-since {since.isoformat()}) outlived max-hold "
                f"{self.config.max_hold:g}s by {end - expiry:.2f}s, "
                f"{longest(late):.2f}s of it with its agent up and synced",
            )
        if final and self.config.settled:
            self.fail("unreleased", node, end, f"hold {value} still in force at the end")

    def pod_write(self, w: WriteRecord) -> None:
        key = (w.namespace, w.name)
        obj = w.after if w.verb not in ("delete",) else None
        if w.subresource == "eviction":
            obj = None
        if w.verb == "create" and not w.subresource:
            self.pods[key] = w.after
        elif obj is not None:
            self.pods[key] = obj
        alive_now = obj is not None and _pod_running(obj)
        since = self.pod_since.get(key)
        if alive_now and since is None:
            self.pod_since[key] = w.time
        elif not alive_now and since is not None:
            self.pod_alive.setdefault(key, []).append((since, w.time))
            del self.pod_since[key]
        pod = w.before or w.after
        if (
            pod is not None
            and w.user == self.config.mcc_user
            and (w.subresource == "eviction" or w.verb == "delete")
            and self.config.is_build_pod(pod)
        ):
            self.result.build_pod_evictions += 1
            self.eviction(w, pod)

    def eviction(self, w: WriteRecord, pod: JsonObj) -> None:
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        st = self.nodes.get(node)
        if st is None:
            return
        cordon = max((t for t in st.cordons if t <= w.time), default=w.time)
        # This drain's episode: since the previous drain or uncordon completed.
        begun = max((t for t in st.last_applied_changes if t <= cordon), default=float("-inf"))
        window = [(begun, cordon)]
        pending = list(st.pending)
        if st.pending_since is not None:
            pending.append((st.pending_since, w.time))
        key = (w.namespace, w.name)
        alive = list(self.pod_alive.get(key, []))
        alive.append((self.pod_since.get(key, w.time), w.time))
        unheld = intersect(intersect(window, normalise(pending)), normalise(alive))
        exposed = intersect(unheld, self.clean(node))
        if longest(exposed) < self.config.grace:
            why = "agent down or impaired"
            if longest(unheld) < self.config.grace:
                why = "held, released on purpose, or raced"
            self.result.evictions_excused[why] += 1
        else:
            self.fail(
                "evicted",
                node,
                w.time,
                f"build pod {w.namespace}/{w.name} evicted after its node's drain request sat "
                f"un-held for {longest(exposed):.2f}s with the agent up and synced "
                f"(grace {self.config.grace:g}s)",
                w.rv,
            )


def check(writes: Sequence[WriteRecord], config: CheckerConfig) -> Checked:
    """Replay the write log in order and return every violation found, with figures."""
    offset = 0.0
    if writes:
        offset = writes[0].time - writes[0].wall.timestamp()
    replay = _Replay(config, offset)
    for w in sorted(writes, key=lambda r: r.rv):
        replay.write(w)
    for name, st in replay.nodes.items():
        if st.hold is not None:
            replay.hold_ended(name, st.hold, config.end, final=True)
    replay.result.violations.sort(key=lambda v: v.t)
    return replay.result
