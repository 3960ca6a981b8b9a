"""What the agent shows at ``/status`` and in ``drain-guard status``: the answer to
"why is my drain held?".

Pure: an ``AgentStatus`` snapshot, built from the controller's decision by
``drain_guard.status.snapshot.decided()`` with ``generated_at``, the time it was taken, given, so
nothing here reads a clock; the server renders it. The operator's hold request and what ends a
hold are in ``drain_guard.status.holdrequest``. ``docs/status.md`` explains each field.

API::

    status.to_json() -> dict[str, Any]      # JSON-ready, camelCase keys, RFC 3339 UTC times
    AgentStatus.from_json(data)             # the inverse (the CLI reads /status over HTTP)
    status.to_text() -> str                 # a few lines for humans (curl ...?format=text)

``decision`` is one of ``DECISIONS``: ``idle`` (no drain request to act on), ``hold`` (a hold
was just written), ``holding`` (a drain is held), ``update-hold`` (the reasons of a hold
changed), ``release`` (the hold was just released), ``wait`` (a guard cannot decide yet, so a
drain request is not let through), ``pass`` (a drain request went through: no guard blocks),
``starting`` (before the first decision).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from drain_guard.core.durations import format_duration
from drain_guard.core.watchstatus import WatchStatus
from drain_guard.protocol import (
    format_rfc3339,
    format_rfc3339_or_none,
    parse_rfc3339_or_none,
)
from drain_guard.shield.plan import ShieldStatus
from drain_guard.status.hold import (
    HoldReasonStatus,
    HoldView,
    reason_lines,
    reasons_from_json,
    reasons_json,
)
from drain_guard.status.holdrequest import HoldRequestStatus, printable
from drain_guard.status.parts import (
    AlertsStatus,
    BootedImageStatus,
    InvalidInputStatus,
    ObservedStatus,
    PodStatus,
    ReleaseFailingStatus,
    WouldHoldStatus,
    required_time,
)

DECISIONS: tuple[str, ...] = (
    "starting",
    "idle",
    "pass",
    "wait",
    "hold",
    "holding",
    "update-hold",
    "release",
)


@dataclass(frozen=True)
class AgentStatus:
    """A snapshot of one agent's view and decision."""

    node: str
    decision: str
    explanation: str
    version: str
    started_at: datetime
    generated_at: datetime
    desired_drain: str | None = None
    last_applied_drain: str | None = None
    held_request: str | None = None
    hold_reasons: tuple[HoldReasonStatus, ...] = ()
    since: datetime | None = None
    expires_at: datetime | None = None
    build_pods: tuple[PodStatus, ...] | None = None  # None: the pod watch has not synced
    desired_image: str | None = None
    desired_digest: str | None = None
    #: For a desired image that is the booted one: whether MCO will replace the target
    #: (``replacement.Foresight``'s value) and why; None when the guard did not ask (no drain
    #: waits, or the images differ).
    replacement: str | None = None
    replacement_why: str | None = None
    booted: BootedImageStatus = field(default_factory=BootedImageStatus)
    #: By resource (node, pod) and by each guard's named object (``ObjectRef.watch_name``).
    watches: dict[str, WatchStatus] = field(default_factory=dict)
    last_api_contact: datetime | None = None
    shield: ShieldStatus | None = None  # None when the shield is off
    # The namespaces whose pods may hold a drain ("*": every one), and the namespace the
    # node's pod watch covers ("*": every one).
    build_pod_namespaces: tuple[str, ...] = ()
    pod_watch_namespace: str = ""
    #: --blocking-pod-namespace, and those of them watched on their own (not by the pod watch).
    blocking_pod_namespaces: tuple[str, ...] = ()
    blocking_watch_namespaces: tuple[str, ...] = ()
    observe_only: bool = False  # --observe-only: the decision is reported, never written
    # The start-up confinement self-check (drain_guard.runtime.selfcheck.Confinement.to_json()).
    confinement: dict[str, Any] | None = None
    alerts: AlertsStatus | None = None  # None when alert gating is off
    invalid_inputs: tuple[InvalidInputStatus, ...] = ()
    # The operator's hold request on the Node, read now; what will release the hold.
    hold_request: HoldRequestStatus | None = None
    releases_when: tuple[str, ...] = ()
    max_hold: timedelta | None = None
    last_would_hold: WouldHoldStatus | None = None  # --observe-only: its latest would-be hold
    observed: ObservedStatus | None = None  # --observe-only: what it saw since it started
    pool: str | None = None  # the MachineConfigPool whose rollout the node is in (pool_of)
    #: Who released the drain request in desiredDrain by hand (drain-guard.io/released-by).
    released_by: str | None = None
    #: A release decided and not written yet (its writes fail); None when none is pending.
    release_failing: ReleaseFailingStatus | None = None

    def __post_init__(self) -> None:
        if self.decision not in DECISIONS:
            raise ValueError(f"unknown decision {self.decision!r}")
        times = {
            name: getattr(self, name)
            for name in ("started_at", "generated_at", "since", "expires_at", "last_api_contact")
        }
        times.update({f"{r} failing_since": w.failing_since for r, w in self.watches.items()})
        for name, value in times.items():
            if value is not None and value.tzinfo is None:
                raise ValueError(f"{name} must be timezone-aware")

    @property
    def time_left(self) -> timedelta | None:
        """Time until the hold expires (never negative), or None without a hold."""
        if self.expires_at is None:
            return None
        return max(timedelta(0), self.expires_at - self.generated_at)

    def hold_view(self) -> HoldView | None:
        """The hold in force as ``drain-guard status`` shows it too (None without one)."""
        if self.held_request is None:
            return None
        return HoldView(
            node=self.node,
            held_request=self.held_request,
            since=self.since,
            expires_at=self.expires_at,
            reasons=self.hold_reasons,
            releases_when=self.releases_when,
            pool=self.pool,
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON document served at ``/status`` (keys are stable; see docs/status.md)."""
        left = self.time_left
        return {
            "node": self.node,
            "decision": self.decision,
            "explanation": self.explanation,
            "desiredDrain": self.desired_drain,
            "lastAppliedDrain": self.last_applied_drain,
            "heldRequest": self.held_request,
            "holdReasons": reasons_json(self.hold_reasons),
            "since": format_rfc3339_or_none(self.since),
            "expiresAt": format_rfc3339_or_none(self.expires_at),
            "timeLeftSeconds": None if left is None else int(left.total_seconds()),
            "buildPods": None
            if self.build_pods is None
            else [
                {"namespace": p.namespace, "name": p.name, "phase": p.phase}
                for p in self.build_pods
            ],
            "image": {
                "desired": self.desired_image,
                "desiredDigest": self.desired_digest,
                "replacement": self.replacement,
                "replacementWhy": self.replacement_why,
                "bootedDigest": self.booted.digest,
                "bootedReference": self.booted.reference,
                "bootedSource": self.booted.source,
                "bootedError": self.booted.error,
                "bootedErrorSince": format_rfc3339_or_none(self.booted.error_since),
            },
            "watches": {r: w.to_json() for r, w in sorted(self.watches.items())},
            "lastApiContact": format_rfc3339_or_none(self.last_api_contact),
            "shield": None if self.shield is None else self.shield.to_json(),
            "scope": {
                "buildPodNamespaces": list(self.build_pod_namespaces),
                "podWatchNamespace": self.pod_watch_namespace,
                "blockingPodNamespaces": list(self.blocking_pod_namespaces),
                "blockingWatchNamespaces": list(self.blocking_watch_namespaces),
            },
            "observeOnly": self.observe_only,
            "confinement": self.confinement,
            "alerts": None if self.alerts is None else self.alerts.to_json(),
            "invalidInputs": [
                {"kind": i.kind, "what": i.what, "why": i.why} for i in self.invalid_inputs
            ],
            "holdRequest": None
            if self.hold_request is None
            else self.hold_request.to_json(self.expires_at),
            "releasesWhen": list(self.releases_when),
            "maxHoldSeconds": None if self.max_hold is None else self.max_hold.total_seconds(),
            "lastWouldHold": None
            if self.last_would_hold is None
            else self.last_would_hold.to_json(),
            "observed": None if self.observed is None else self.observed.to_json(),
            "pool": self.pool,
            "releasedBy": self.released_by,
            "releaseFailing": None
            if self.release_failing is None
            else self.release_failing.to_json(),
            "version": self.version,
            "startedAt": format_rfc3339_or_none(self.started_at),
            "generatedAt": format_rfc3339_or_none(self.generated_at),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AgentStatus:
        """Rebuild a snapshot from ``to_json()`` output; raises KeyError/ValueError if malformed."""
        image = data["image"]
        pods = data["buildPods"]
        return cls(
            node=data["node"],
            decision=data["decision"],
            explanation=data["explanation"],
            desired_drain=data["desiredDrain"],
            last_applied_drain=data["lastAppliedDrain"],
            held_request=data["heldRequest"],
            hold_reasons=reasons_from_json(data["holdReasons"]),
            since=parse_rfc3339_or_none(data["since"]),
            expires_at=parse_rfc3339_or_none(data["expiresAt"]),
            build_pods=None
            if pods is None
            else tuple(PodStatus(p["namespace"], p["name"], p["phase"]) for p in pods),
            desired_image=image["desired"],
            desired_digest=image["desiredDigest"],
            replacement=image.get("replacement"),
            replacement_why=image.get("replacementWhy"),
            booted=BootedImageStatus(
                digest=image["bootedDigest"],
                reference=image["bootedReference"],
                source=image["bootedSource"],
                error=image["bootedError"],
                error_since=parse_rfc3339_or_none(image.get("bootedErrorSince")),
            ),
            watches={str(r): WatchStatus.from_json(w) for r, w in data["watches"].items()},
            last_api_contact=parse_rfc3339_or_none(data["lastApiContact"]),
            shield=None if data.get("shield") is None else ShieldStatus.from_json(data["shield"]),
            build_pod_namespaces=tuple(data["scope"]["buildPodNamespaces"]),
            pod_watch_namespace=data["scope"]["podWatchNamespace"],
            blocking_pod_namespaces=tuple(data["scope"].get("blockingPodNamespaces", ())),
            blocking_watch_namespaces=tuple(data["scope"].get("blockingWatchNamespaces", ())),
            observe_only=bool(data.get("observeOnly", False)),
            confinement=data.get("confinement"),
            alerts=None if data.get("alerts") is None else AlertsStatus.from_json(data["alerts"]),
            invalid_inputs=tuple(
                InvalidInputStatus(i["kind"], i["what"], i["why"])
                for i in data.get("invalidInputs", ())
            ),
            hold_request=None
            if data.get("holdRequest") is None
            else HoldRequestStatus.from_json(data["holdRequest"]),
            releases_when=tuple(data.get("releasesWhen", ())),
            max_hold=None
            if data.get("maxHoldSeconds") is None
            else timedelta(seconds=data["maxHoldSeconds"]),
            last_would_hold=None
            if data.get("lastWouldHold") is None
            else WouldHoldStatus.from_json(data["lastWouldHold"]),
            observed=None
            if data.get("observed") is None
            else ObservedStatus.from_json(data["observed"]),
            pool=data.get("pool"),
            released_by=data.get("releasedBy"),
            release_failing=None
            if data.get("releaseFailing") is None
            else ReleaseFailingStatus.from_json(data["releaseFailing"]),
            version=data["version"],
            started_at=required_time(data["startedAt"]),
            generated_at=required_time(data["generatedAt"]),
        )

    def to_text(self) -> str:
        """A short human view: the decision first, then the hold, pods, images, health."""
        now = self.generated_at
        mode = " (observe-only: writes nothing)" if self.observe_only else ""
        lines = [f"node {self.node}{mode}: {self.decision} - {printable(self.explanation)}"]
        hold = self.hold_view()
        if hold is not None:
            lines += hold.text_lines(now)
        else:
            if self.desired_drain is not None:
                lines.append(f"  desiredDrain:  {printable(self.desired_drain)}")
            lines += reason_lines(self.hold_reasons, self.releases_when)
        if self.release_failing is not None:
            lines.append(f"  RELEASE FAILING: {self.release_failing.text(now)}")
        if self.hold_request is not None:
            request = self.hold_request.to_text(now, self.expires_at, self.max_hold)
            lines.append(f"  hold request:  {request}")
        if self.last_would_hold is not None:
            would = self.last_would_hold
            lines.append(
                f"  would hold:    {printable(would.request)} at {format_rfc3339(would.at)}"
                f" ({format_duration(now - would.at)} ago) for {', '.join(would.reasons)}:"
                f" {printable(would.detail)}"
            )
        if self.observed is not None:
            lines.append(f"  observed:      {self.observed.text(self.started_at)}")
        if self.build_pods is None:
            lines.append("  build pods:    unknown (pod watch not synced)")
        elif not self.build_pods:
            lines.append("  build pods:    none")
        else:
            pods = ", ".join(f"{p.namespace}/{p.name} ({p.phase})" for p in self.build_pods)
            lines.append(f"  build pods:    {pods}")
        lines.append(
            f"  scope:         build pods of {', '.join(self.build_pod_namespaces)}"
            f" (pod watch: {self.pod_watch_namespace})"
        )
        if self.blocking_pod_namespaces:
            watched = ", ".join(self.blocking_watch_namespaces) or "none"
            lines.append(
                f"  blocking pods: of {', '.join(self.blocking_pod_namespaces)}"
                f" (watched on their own: {watched})"
            )
        if self.desired_image is not None or self.desired_digest is not None:
            lines.append(
                f"  desired image: {printable(self.desired_digest or self.desired_image or '')}"
            )
        if self.replacement is not None:
            lines.append(f"  replacement:   {self.replacement} ({self.replacement_why})")
        if self.booted.digest is not None:
            lines.append(f"  booted image:  {self.booted.digest} (from {self.booted.source})")
        elif self.booted.error is not None:
            since = self.booted.error_since
            when = "" if since is None else f" (since {format_rfc3339(since)}, read again)"
            lines.append(f"  booted image:  unknown{when}: {self.booted.error}")
        for bad in self.invalid_inputs:
            lines.append(f"  invalid input: {printable(bad.what)} ignored: {printable(bad.why)}")
        if self.shield is not None:
            lines += [f"  {line}" for line in self.shield.text_lines()]
        if self.confinement is not None:
            confined = {True: "yes", False: "NO", None: "unknown"}[self.confinement["confined"]]
            lines.append(f"  confined:      {confined}: {self.confinement['detail']}")
        if self.alerts is not None:
            lines.append(f"  alerts:        {printable(self.alerts.text())}")
        watches = ", ".join(f"{r} {w.to_text(now)}" for r, w in sorted(self.watches.items()))
        contact = (
            "never"
            if self.last_api_contact is None
            else f"{format_duration(now - self.last_api_contact)} ago"
        )
        lines.append(f"  watches:       {watches or 'none'}; last API contact {contact}")
        lines.append(
            f"  agent:         {self.version}, up {format_duration(now - self.started_at)}"
        )
        return "\n".join(lines) + "\n"
