"""Generated writes of an agent on its own Node's annotations, for the tests that hold the
three confinement checkers to one answer (drain_guard.confine.rules): the CEL policy on a real
API server (tests/controlplane/test_confinement_agreement.py), the 4.15 webhook and the
systemd node proxy (tests/unit/test_confinement_rules.py).

Each case is the Node's annotations before and after the write, and the JSON Patch an agent
sends for it: tests of what it read (``desiredDrain``, ``lastAppliedDrain``, ``held-drain``,
as the agent's own patches test them), then each changed key set or removed. The cases are
random from a seed, biased toward the protocol's own steps so that both answers come often.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from drain_guard import protocol
from drain_guard.confine.rules import AGENT_KEYS

#: A foreign key every case keeps as it is: the annotations object always exists, so that a
#: patch can add to it.
KEEP = "example.com/keep"
FOREIGN = "example.com/other"
OTHER_DG = protocol.DG_PREFIX + "other"
DRAINS = ("drain-a", "drain-b", "hold-drain-a", "hold-drain-b", "uncordon-a", "hold-uncordon-a")
#: Every key a case may hold or change (and the only ones its before-state sets or clears).
KEYS = (
    protocol.DESIRED_DRAIN,
    protocol.LAST_APPLIED_DRAIN,
    protocol.HOLD_REQUEST,
    OTHER_DG,
    FOREIGN,
    *sorted(AGENT_KEYS),
)
#: Values: short, the longest allowed, a byte too long, and 600 two-byte characters (1200
#: bytes: too long in bytes, not in characters).
VALUES = ("v", "drain-a", "x" * 1024, "x" * 1025, "é" * 600, "é" * 512)
#: A valid hold request (the cluster's hold-request policy refuses others from anyone).
HOLD_REQUEST = "2099-01-01T00:00:00Z;maintenance"
SINCE = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

JsonPatch = list[dict[str, Any]]


@dataclass(frozen=True)
class NodeWrite:
    """An agent's write: the annotations before and after it (``KEEP`` in both)."""

    before: dict[str, str]
    after: dict[str, str]

    def patch(self) -> JsonPatch:
        """The JSON Patch an agent sends for it: its tests, then each changed key."""
        ops: JsonPatch = [
            {"op": "test", "path": protocol.annotation_path(key), "value": self.before[key]}
            for key in (protocol.DESIRED_DRAIN, protocol.LAST_APPLIED_DRAIN, protocol.HELD_DRAIN)
            if key in self.before
        ]
        changed = [k for k in KEYS if self.before.get(k) != self.after.get(k)]
        for key in changed:
            path = protocol.annotation_path(key)
            if key in self.after:
                ops.append({"op": "add", "path": path, "value": self.after[key]})
            else:
                ops.append({"op": "remove", "path": path})
        return ops

    def objects(self, node: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The Node before and after, as an admission request carries them."""
        return (
            {"metadata": {"name": node, "annotations": dict(self.before)}},
            {"metadata": {"name": node, "annotations": dict(self.after)}},
        )


def _value(rng: random.Random, key: str) -> str:
    if key == protocol.HOLD_REQUEST:
        return rng.choice((HOLD_REQUEST, "2099-06-01T00:00:00Z;longer"))
    if key in (protocol.DESIRED_DRAIN, protocol.LAST_APPLIED_DRAIN, protocol.HELD_DRAIN):
        return rng.choice(DRAINS)
    return rng.choice(VALUES)


def _before(rng: random.Random, released_by: str) -> dict[str, str]:
    before = {KEEP: "1"}
    if rng.random() < 0.9:
        before[protocol.DESIRED_DRAIN] = rng.choice(DRAINS)
    if rng.random() < 0.7:
        before[protocol.LAST_APPLIED_DRAIN] = rng.choice(("drain-a", "uncordon-a"))
    for key in (*sorted(AGENT_KEYS), protocol.HOLD_REQUEST, OTHER_DG, FOREIGN):
        if rng.random() < 0.25:
            before[key] = released_by if key == protocol.RELEASED_BY else _value(rng, key)
    if protocol.RELEASED_BY in before:
        before[protocol.RELEASED] = before.get(protocol.RELEASED, "drain-a")
    return before


def _mutate(rng: random.Random, after: dict[str, str]) -> None:
    drain = after.get(protocol.DESIRED_DRAIN, "")
    step = rng.choice(("hold", "hold", "release", "drain", "key", "key", "remove"))
    if step == "hold" and drain.startswith("drain-"):
        after[protocol.DESIRED_DRAIN] = protocol.HOLD_PREFIX + drain
        if rng.random() < 0.8:
            after[protocol.HELD_DRAIN] = drain
    elif step == "release" and drain.startswith(protocol.HOLD_PREFIX):
        after[protocol.DESIRED_DRAIN] = drain.removeprefix(protocol.HOLD_PREFIX)
    elif step == "drain" and drain:
        after[protocol.DESIRED_DRAIN] = rng.choice(DRAINS)
    elif step == "remove":
        present = [k for k in KEYS if k in after]
        if present:
            del after[rng.choice(present)]
    else:
        key = rng.choice([k for k in KEYS if k != protocol.DESIRED_DRAIN])
        after[key] = _value(rng, key)


def _protocol_writes(released_by: str) -> list[NodeWrite]:
    """The agent's own writes (a hold, its update, a release, a clean-up): allowed."""
    base = {KEEP: "1", protocol.LAST_APPLIED_DRAIN: "uncordon-a"}
    requested = {**base, protocol.DESIRED_DRAIN: "drain-a"}
    expires = SINCE + timedelta(minutes=45)
    ops = protocol.hold_patch(
        "drain-a", "uncordon-a", "1", [protocol.Reason.BUILD_POD], SINCE, "é" * 700, expires=expires
    )
    held = _applied(requested, ops)
    present = [k for k in protocol.OWNED_KEYS if k in held]
    released = _applied(held, protocol.release_patch("drain-a", "uncordon-a", "1", present))
    marked = {**requested, protocol.RELEASED: "drain-b", protocol.RELEASED_BY: released_by}
    cleaned = _applied(
        marked,
        protocol.cleanup_patch(
            "drain-a", marked, [protocol.RELEASED, protocol.RELEASED_BY], mark_released=None
        ),
    )
    return [
        NodeWrite(requested, held),
        NodeWrite(held, released),
        NodeWrite(marked, cleaned),
    ]


def _applied(annotations: dict[str, str], ops: list[protocol.JsonPatchOp]) -> dict[str, str]:
    """``annotations`` after the annotation writes of ``ops`` (their tests are the agent's)."""
    after = dict(annotations)
    prefix = "/metadata/annotations/"
    for op in ops:
        if not op["path"].startswith(prefix) or op["op"] == "test":
            continue
        key = op["path"][len(prefix) :].replace("~1", "/").replace("~0", "~")
        if op["op"] == "remove":
            del after[key]
        else:
            after[key] = op["value"]
    return after


def node_writes(seed: int, count: int, released_by: str = "kube:admin") -> list[NodeWrite]:
    """``count`` random writes from ``seed``, after the agent's own; ``released_by`` is the
    one name the cluster lets be written in ``released-by`` (its writer's)."""
    rng = random.Random(seed)
    cases = _protocol_writes(released_by)
    while len(cases) < count:
        before = _before(rng, released_by)
        after = dict(before)
        for _ in range(rng.randint(1, 3)):
            _mutate(rng, after)
        if after != before:
            cases.append(NodeWrite(before, after))
    return cases
