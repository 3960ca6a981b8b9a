"""A hypothesis state machine over one node's annotations: the MCD, the MCC, pods, operators
and the agent's decisions interleave at random; the design's invariants hold after each step.

The agent is ``decide()`` with its patch applied by ``jsonpatch`` (a failing ``test`` is a
lost compare-and-swap: nothing is written and the agent decides again later). The agent may
also decide on a stale view (the watch lagging behind), and restart (its pods not yet
synced). The MCC can finish a drain it began before a hold (the race a real MCC can lose).
The invariants are checked here, from the annotations, not by asking ``decide()``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import jsonpatch
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from drain_guard.core.pods import Pod
from drain_guard.decision.decide import (
    NothingHeldError,
    decide,
    force_release,
)
from drain_guard.guards import (
    BootedImage,
    NodeView,
)
from drain_guard.protocol import (
    DESIRED_DRAIN,
    DESIRED_IMAGE,
    DG_PREFIX,
    HELD_DRAIN,
    HELD_SINCE,
    HOLD_REQUEST,
    LAST_APPLIED_DRAIN,
    Outcome,
    format_rfc3339,
)
from tests.helpers import agent_guards

MAX_HOLD = timedelta(minutes=45)
START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
REPO = "image-registry.openshift-image-registry.svc:5000/openshift-machine-config-operator/ocb"
BOOTED = "sha256:" + "1" * 64
OTHER = "sha256:" + "2" * 64
IMAGES = (f"{REPO}@{BOOTED}", f"{REPO}@{OTHER}", f"{REPO}:latest", "")
GUARDS = agent_guards()
BUILD_POD = Pod(
    "openshift-machine-config-operator",
    "build-rendered-worker-x-build",
    "Running",
    {"openshift.io/build.name": "build-rendered-worker-x"},
)
HOLD = "hold-"


def _config(n: int) -> str:
    return f"rendered-worker-{n:04d}"


class NodeMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.rv = 1
        start = f"uncordon-{_config(0)}"
        self.ann: dict[str, str] = {DESIRED_DRAIN: start, LAST_APPLIED_DRAIN: start}
        self.now = START
        self.pods: tuple[Pod, ...] = ()
        self.synced = True
        self.mcd_latest = start
        self.config = 0
        self.mcc_drained: set[str] = set()  # requests the MCC completed with a drain
        self.stale: tuple[dict[str, str], str] | None = None  # an old view the watch may give

    # -- helpers --------------------------------------------------------------------------

    def write(self, values: dict[str, str | None]) -> None:
        self.stale = (dict(self.ann), str(self.rv))
        for key, value in values.items():
            if value is None:
                self.ann.pop(key, None)
            else:
                self.ann[key] = value
        self.rv += 1

    def view(self, ann: dict[str, str], rv: str) -> NodeView:
        return NodeView(
            name="worker-0",
            annotations=ann,
            pods=self.pods if self.synced else None,
            booted=BootedImage(BOOTED, f"{REPO}@{BOOTED}", "ostree"),
            now=self.now,
            resource_version=rv,
        )

    def apply(self, patch: Any) -> bool:
        """Apply the agent's patch as the API server would; False when a ``test`` fails."""
        doc = {"metadata": {"annotations": dict(self.ann), "resourceVersion": str(self.rv)}}
        try:
            result = jsonpatch.apply_patch(doc, list(patch))
        except jsonpatch.JsonPatchTestFailed:
            return False
        before = dict(self.ann)
        after: dict[str, str] = result["metadata"]["annotations"]
        self.check_agent_write(before, after)
        self.ann = after
        self.rv += 1
        return True

    def check_agent_write(self, before: dict[str, str], after: dict[str, str]) -> None:
        changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
        # Invariant 3: only desiredDrain and its own keys (never an operator's hold-request).
        assert all(k == DESIRED_DRAIN or k.startswith(DG_PREFIX) for k in changed), changed
        assert HOLD_REQUEST not in changed
        old, new = before.get(DESIRED_DRAIN), after.get(DESIRED_DRAIN)
        if old == new:
            return
        assert new is not None
        if new.startswith(HOLD):
            # A hold: exactly drain-X → hold-drain-X, the original kept in held-drain.
            assert old == new.removeprefix(HOLD), (old, new)
            assert old.startswith("drain-"), old
            assert after[HELD_DRAIN] == old
        else:
            # A release: exactly hold-X → X.
            assert old == HOLD + new, (old, new)
            assert before.get(HELD_DRAIN) == new, (before, new)
        # Invariant 1, with the one exception: the MCC really drained for X (race lost).
        if new == after.get(LAST_APPLIED_DRAIN):
            assert old == HOLD + new, (old, new)
            assert new in self.mcc_drained, (new, self.mcc_drained)

    # -- the MCD --------------------------------------------------------------------------

    @rule(react=st.booleans())
    def mcd_requests_a_drain(self, react: bool) -> None:
        self.config += 1
        value = f"drain-{_config(self.config)}"
        if self.ann.get(LAST_APPLIED_DRAIN) != value:
            self.write({DESIRED_DRAIN: value})
            self.mcd_latest = value
        self.react(react)

    @precondition(lambda self: self.mcd_latest.startswith("drain-"))
    @rule(react=st.booleans())
    def mcd_restarts_and_requests_again(self, react: bool) -> None:
        if self.ann.get(LAST_APPLIED_DRAIN) != self.mcd_latest:
            self.write({DESIRED_DRAIN: self.mcd_latest})
        self.react(react)

    @precondition(
        lambda self: (
            self.ann.get(DESIRED_DRAIN) == self.ann.get(LAST_APPLIED_DRAIN)
            and self.mcd_latest.startswith("drain-")
        )
    )
    @rule(react=st.booleans())
    def mcd_rebooted_and_uncordons(self, react: bool) -> None:
        value = "uncordon-" + self.mcd_latest.removeprefix("drain-")
        self.write({DESIRED_DRAIN: value})
        self.mcd_latest = value
        self.react(react)

    # -- the MCC --------------------------------------------------------------------------

    @rule(react=st.booleans())
    def mcc_syncs(self, react: bool) -> None:
        desired = self.ann.get(DESIRED_DRAIN, "")
        verb = desired.split("-")[0]
        if desired == self.ann.get(LAST_APPLIED_DRAIN):
            pass
        elif verb == "drain":
            self.mcc_drained.add(desired)
            self.write({LAST_APPLIED_DRAIN: desired})
        elif verb == "uncordon":
            self.write({LAST_APPLIED_DRAIN: desired})
        # hold (or any other verb): "non-recognized drain verb", nothing done
        self.react(react)

    @rule(hold_lands_first=st.booleans(), react=st.booleans())
    def mcc_drains_while_the_agent_reacts(self, hold_lands_first: bool, react: bool) -> None:
        """The MCC read drain-X and began; the agent's hold may land meanwhile. The MCC does
        not stop an attempt in flight: it writes lastAppliedDrain=X all the same."""
        desired = self.ann.get(DESIRED_DRAIN, "")
        if desired.startswith("drain-") and desired != self.ann.get(LAST_APPLIED_DRAIN):
            if hold_lands_first:
                self.agent_decides()
            self.mcc_drained.add(desired)
            self.write({LAST_APPLIED_DRAIN: desired})
        self.react(react)

    # -- the world ------------------------------------------------------------------------

    @rule(
        present=st.booleans(),
        phase=st.sampled_from(["Pending", "Running", "Succeeded"]),
        react=st.booleans(),
    )
    def build_pod(self, present: bool, phase: str, react: bool) -> None:
        pod = Pod(BUILD_POD.namespace, BUILD_POD.name, phase, BUILD_POD.labels)
        self.pods = (pod,) if present else ()
        self.react(react)

    @rule(image=st.sampled_from(IMAGES), react=st.booleans())
    def desired_image(self, image: str, react: bool) -> None:
        self.write({DESIRED_IMAGE: image or None})
        self.react(react)

    @rule(minutes=st.integers(min_value=0, max_value=50), react=st.booleans())
    def time_passes(self, minutes: int, react: bool) -> None:
        self.now += timedelta(minutes=minutes)
        self.react(react)

    @rule(minutes=st.integers(min_value=-5, max_value=60), drop=st.booleans(), react=st.booleans())
    def operator_hold_request(self, minutes: int, drop: bool, react: bool) -> None:
        until = format_rfc3339(self.now + timedelta(minutes=minutes))
        self.write({HOLD_REQUEST: None if drop else f"{until};chaos"})
        self.react(react)

    @rule()
    def operator_releases(self) -> None:
        try:
            release = force_release(self.ann, str(self.rv), Outcome.MANUAL)
        except NothingHeldError:
            return
        doc = {"metadata": {"annotations": dict(self.ann), "resourceVersion": str(self.rv)}}
        self.ann = jsonpatch.apply_patch(doc, list(release.patch))["metadata"]["annotations"]
        self.rv += 1

    # -- the agent ------------------------------------------------------------------------

    def react(self, react: bool) -> None:
        """The agent's watch delivers the change and it decides (or it is busy elsewhere)."""
        if react:
            self.agent_decides()

    @rule(synced=st.booleans())
    def agent_restarts(self, synced: bool) -> None:
        """A new agent process; its pod watch has listed (or not yet)."""
        self.synced = synced

    @rule()
    def agent_pod_watch_syncs(self) -> None:
        self.synced = True

    @rule()
    def agent_decides(self) -> None:
        decision = decide(self.view(dict(self.ann), str(self.rv)), GUARDS, MAX_HOLD)
        outcome = getattr(decision, "outcome", None)
        event(f"decision: {type(decision).__name__}" + (f" ({outcome})" if outcome else ""))
        if decision.patch:
            assert self.apply(decision.patch), f"a fresh decision's patch failed: {decision}"
            # Deciding again on what it wrote changes nothing more (a fixpoint).
            again = decide(self.view(dict(self.ann), str(self.rv)), GUARDS, MAX_HOLD)
            assert not again.patch or type(again) is not type(decision), (decision, again)
        # Invariant 5: after a decision no hold in force is older than max-hold.
        desired = self.ann.get(DESIRED_DRAIN, "")
        if desired.startswith(HOLD) and self.ann.get(HELD_DRAIN) == desired.removeprefix(HOLD):
            since = datetime.fromisoformat(self.ann[HELD_SINCE].replace("Z", "+00:00"))
            assert self.now - since < MAX_HOLD, (since, self.now, decision)

    @precondition(lambda self: self.stale is not None)
    @rule()
    def agent_decides_on_a_stale_view(self) -> None:
        assert self.stale is not None
        ann, rv = self.stale
        decision = decide(self.view(ann, rv), GUARDS, MAX_HOLD)
        if decision.patch:
            self.apply(decision.patch)  # may fail its test: a lost compare-and-swap

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def nothing_is_lost(self) -> None:
        """Invariant 2: the MCD's latest request is in desiredDrain or held in held-drain."""
        desired = self.ann.get(DESIRED_DRAIN)
        held = desired == HOLD + self.mcd_latest and self.ann.get(HELD_DRAIN) == self.mcd_latest
        assert desired == self.mcd_latest or held, (self.mcd_latest, self.ann)

    @invariant()
    def never_an_uncordon_held(self) -> None:
        assert not self.ann.get(DESIRED_DRAIN, "").startswith(HOLD + "uncordon-")


NodeMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=50, deadline=None)
TestNodeMachine = NodeMachine.TestCase
