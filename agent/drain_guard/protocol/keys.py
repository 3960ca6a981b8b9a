"""The protocol's words (pure): the annotation keys, the MCD's drain requests, the reasons and
outcomes of holds, the pool a node's rollout is in; ``truncate_utf8`` for what is written."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

MCO_PREFIX = "machineconfiguration.openshift.io/"
DESIRED_DRAIN = MCO_PREFIX + "desiredDrain"
LAST_APPLIED_DRAIN = MCO_PREFIX + "lastAppliedDrain"
DESIRED_CONFIG = MCO_PREFIX + "desiredConfig"
CURRENT_CONFIG = MCO_PREFIX + "currentConfig"
DESIRED_IMAGE = MCO_PREFIX + "desiredImage"
CURRENT_IMAGE = MCO_PREFIX + "currentImage"
STATE = MCO_PREFIX + "state"
REASON = MCO_PREFIX + "reason"

DG_PREFIX = "drain-guard.io/"
HELD_DRAIN = DG_PREFIX + "held-drain"
HOLD_REASONS = DG_PREFIX + "hold-reasons"
HELD_SINCE = DG_PREFIX + "held-since"
HOLD_DETAIL = DG_PREFIX + "hold-detail"
#: When the hold ends at the latest (``held-since`` plus the holding agent's ``--max-hold``),
#: so that a reader needs no agent's setting; absent from an older agent's record.
HOLD_EXPIRES = DG_PREFIX + "hold-expires"
#: The hold record: written together by a hold, removed together by a release.
OWNED_KEYS: tuple[str, ...] = (HELD_DRAIN, HOLD_REASONS, HELD_SINCE, HOLD_DETAIL, HOLD_EXPIRES)
#: The request a release let through because the hold expired, was released by an operator
#: or was invalid: the agent does not hold that same request again (a hold must end, and an
#: operator's release must stick). Removed once ``desiredDrain`` moves on.
RELEASED = DG_PREFIX + "released"
#: Who released it by hand: the API server's name for the caller of ``drain-guard release``
#: (a SelfSubjectReview), written in the patch that writes ``released``. Only the releaser
#: writes it (on 4.17+ admission checks it is their own name); the agent only removes it.
RELEASED_BY = DG_PREFIX + "released-by"
#: The released marker: written together, removed together.
RELEASED_KEYS: tuple[str, ...] = (RELEASED, RELEASED_BY)
#: The longest ``released-by`` read (a ServiceAccount's name is up to 339 bytes).
MAX_RELEASED_BY_BYTES = 512
#: Written by operators: ``<RFC 3339 expiry>[;<reason text>]`` (see ``drain_guard.guards``).
HOLD_REQUEST = DG_PREFIX + "hold-request"
#: A Node label set by operators: while present (any value, say why in it), drains of the
#: node are held (within max-hold). A label, not an annotation, so that ``oc get nodes -l``
#: lists the blocked nodes; the agent only reads it.
BLOCK_DRAINS_LABEL = DG_PREFIX + "block-drains"

HOLD_PREFIX = "hold-"
MAX_DETAIL_BYTES = 1024

JsonPatchOp = dict[str, str]


class Verb(StrEnum):
    """The MCC's reading of ``desiredDrain``: the text before the first ``-``."""

    DRAIN = "drain"
    UNCORDON = "uncordon"
    HOLD = "hold"
    UNKNOWN = "unknown"
    #: No request: the annotation is absent or empty.
    NONE = "none"


@dataclass(frozen=True)
class DrainRequest:
    """A ``desiredDrain`` value; ``target`` is the text after the verb's ``-``."""

    raw: str
    verb: Verb
    target: str


def parse_drain_request(raw: str | None) -> DrainRequest:
    """Split a ``desiredDrain`` value the way the MCC does (``strings.Split(v, "-")[0]``)."""
    if not raw:
        return DrainRequest("", Verb.NONE, "")
    head, _, target = raw.partition("-")
    try:
        verb = Verb(head)
    except ValueError:
        verb = Verb.UNKNOWN
    if verb is Verb.NONE:
        verb = Verb.UNKNOWN
    return DrainRequest(raw, verb, target)


class Reason(StrEnum):
    """Why a drain is held; one per guard."""

    BUILD_POD = "build-pod"
    NOOP_IMAGE = "noop-image"
    MANUAL = "manual"
    ALERT = "alert"
    BLOCKING_POD = "blocking-pod"
    NODE_LABEL = "node-label"
    DISRUPTION_BUDGET = "disruption-budget"


class Outcome(StrEnum):
    """How a hold ended."""

    #: No guard blocks any more.
    SAFE = "safe"
    #: ``max-hold`` reached (or ``held-since`` is in the future, so the age is unknown).
    EXPIRED = "expired"
    #: An operator released it (``drain-guard release``).
    MANUAL = "manual"
    #: The agent's DaemonSet is being deleted.
    UNINSTALL = "uninstall"
    #: The MCD wrote a newer request over the hold.
    SUPERSEDED = "superseded"
    #: The MCC finished draining for this request before the hold took effect.
    RACE_LOST = "race-lost"
    #: The hold record was unreadable; the request is restored rather than held blind.
    INVALID = "invalid"

    @property
    def marks_released(self) -> bool:
        """Whether a release with this outcome records the request in ``released`` (it is
        not held again): an expiry, an invalid record, an operator's release."""
        return self in (Outcome.EXPIRED, Outcome.INVALID, Outcome.MANUAL)


def truncate_utf8(text: str, limit: int = MAX_DETAIL_BYTES) -> str:
    """Cut to ``limit`` UTF-8 bytes on a character boundary, marking a cut with ``…``: the
    API server limits annotations and Event messages in bytes, not characters."""
    data = text.encode()
    if len(data) <= limit:
        return text
    ellipsis = "…".encode()
    return data[: limit - len(ellipsis)].decode(errors="ignore") + "…"


#: MCO names a pool's rendered MachineConfigs ``rendered-<pool>-<hash>``.
_RENDERED = re.compile(r"rendered-(.+)-[0-9a-f]{8,}", re.ASCII)


def pool_of(annotations: Mapping[str, str]) -> str | None:
    """The MachineConfigPool whose rollout the node is in, from the name of the rendered
    config it is asked to run (or runs); None when that name is not MCO's form. Read from the
    Node alone (only the pool's Events need more: its uid, drain_guard.node.events)."""
    for key in (DESIRED_CONFIG, CURRENT_CONFIG):
        found = _RENDERED.fullmatch(annotations.get(key, ""))
        if found:
            return found.group(1)
    return None


#: Events about a pool (drain_guard.node.events): the one kind an agent writes about anything but
#: its own Node; every confinement admits them with these reasons, its Node as ``related``.
POOL_API_VERSION = "machineconfiguration.openshift.io/v1"
POOL_KIND = "MachineConfigPool"
POOL_ROLLOUT_HELD = "PoolRolloutHeld"
POOL_ROLLOUT_RELEASED = "PoolRolloutReleased"
POOL_EVENT_REASONS: tuple[str, ...] = (POOL_ROLLOUT_HELD, POOL_ROLLOUT_RELEASED)
#: Events about the agent's own Node (docs/protocol.md, Events): what every confinement and the
#: node proxy admit there. Here, not in ``drain_guard.node.events``, so that what only names a
#: reason (the preflight, the proxy's rules, the metrics) imports no API client.
DRAIN_HELD = "DrainHeld"
DRAIN_RELEASED = "DrainReleased"
DRAIN_HOLD_EXPIRED = "DrainHoldExpired"
HOLD_REQUEST_INVALID = "HoldRequestInvalid"
NODE_EVENT_REASONS: tuple[str, ...] = (
    DRAIN_HELD,
    DRAIN_RELEASED,
    DRAIN_HOLD_EXPIRED,
    HOLD_REQUEST_INVALID,
)
