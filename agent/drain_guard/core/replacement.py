"""Will anything replace a same-image target? (pure: no I/O).

A ``noop-image`` hold saves a drain only if MCO later gives the node a target with a new image:
the daemon waiting on the held request re-reads nothing else, and once the node controller
retargets it the guard clears. When nothing will (a revert to a config built before, a build
that failed or is stuck, a degraded pool), the hold would end only at ``--max-hold`` and the
same drain would follow: a stall that costs the pool. So the guard asks ``foresee`` what MCO's
objects say about the node's pool, read as each version's controllers read them
(docs/protocol.md, "What a noop-image hold waits for"):

- 4.15: the pool's build conditions (``BuildPending``, ``Building``, ``BuildSuccess``,
  ``BuildFailed``), its image annotation, and whether the agent saw the pool degraded at its
  config before any build of it started (``refusal``): 4.15 starts a build only in its
  handler of the pool's move, and refuses it while the pool is degraded;
- 4.16 and later: the MachineOSConfig naming the pool and the MachineOSBuild of that config
  and the pool's rendered config (``machineconfiguration.openshift.io/v1alpha1`` on 4.16, 4.17
  and 4.18 before the on-cluster-layering backport, ``v1`` after: the field names differ, both
  are read), and whether the MachineOSConfig names that build's image (MCO's
  ``MachineOSBuildIsCurrent``).

Every object is read without an exception, whatever its shape (any account that may write
them is not the agent's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from drain_guard.core.imageref import ImageRefError, digest_of
from drain_guard.protocol import DESIRED_CONFIG, DESIRED_IMAGE, parse_rfc3339, pool_of

__all__ = [
    "EXPECTED_WITHIN",
    "POOL_IMAGE",
    "Foresight",
    "McoObjects",
    "Refusal",
    "Replacement",
    "foresee",
    "refusal",
]

JsonObj = Mapping[str, Any]

#: How long a build MCO is about to start, or an image it is about to name, is waited for by
#: default (``--noop-expect-within``): the
#: build controller starts a build in its handler of the pool's new config, and writes a
#: succeeded build's image in the same sync (4.18 before the backport: after its clean-up),
#: seconds in both; past this, what was expected is not coming.
EXPECTED_WITHIN = timedelta(minutes=5)

#: 4.15's pool annotation naming the pool's newest built image.
POOL_IMAGE = "machineconfiguration.openshift.io/newestImageEquivalentConfig"

_DEGRADED = ("Degraded", "NodeDegraded", "RenderDegraded")
_TERMINAL_FAILED = ("Failed", "Interrupted")


class Foresight(StrEnum):
    """What the guard foresees for a same-image target: its value is the ``replacement``
    label of ``drain_guard_image_replacement`` and the ``replacement`` of ``/status``."""

    #: A build in flight for the pool's config, or an image the node does not run named for
    #: it: the node controller will retarget the node; hold (up to --max-hold).
    COMING = "coming"
    #: MCO is about to start a build or name an image (seconds): hold, until ``until``.
    EXPECTED = "expected"
    #: Nothing will replace the target: let the drain go now.
    NONE = "none"
    #: The agent cannot read MCO's objects: a watch not listed yet, hold, bounded by
    #: --max-hold (the list comes in seconds and decides); a watch failing before it listed
    #: (a 403: an admin's fix ends it), or where it reads none at all (the systemd install),
    #: hold until ``until`` (--noop-expect-within), then ``NONE``.
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Replacement:
    """What ``foresee`` says, why (one line for /status, the log and the Event), and for
    ``EXPECTED`` until when it waits."""

    foresight: Foresight
    why: str
    until: datetime | None = None

    @property
    def holds(self) -> bool:
        return self.foresight is not Foresight.NONE


@dataclass(frozen=True)
class Refusal:
    """A config of a 4.15 pool whose build MCO refused: the agent saw the pool at ``config``,
    ``degraded`` (the condition), with no build of it started (``refusal``)."""

    config: str
    degraded: str


@dataclass(frozen=True)
class McoObjects:
    """MCO's objects as the agent's watches last listed them.

    ``pools`` by name; ``builds`` and ``configs`` the MachineOSBuilds and MachineOSConfigs, or
    None where the API does not serve them (4.15). ``unreadable`` says why the agent cannot
    tell (a watch not listed yet, or failing): then nothing else is read. ``failing_since``:
    when that watch began failing before it listed (None: merely not listed yet).
    ``refusals``: what the agent saw of each pool's current config while it was degraded
    (``refusal``).
    """

    pools: Mapping[str, JsonObj]
    builds: Sequence[JsonObj] | None = None
    configs: Sequence[JsonObj] | None = None
    unreadable: str | None = None
    refusals: Mapping[str, Refusal] = field(default_factory=dict)
    failing_since: datetime | None = None


def refusal(kept: Refusal | None, pool: JsonObj) -> Refusal | None:
    """What the agent keeps of a 4.15 pool's refused build, given what it kept and the pool's
    newest version (each one a list or a watch delivers).

    4.15's build controller starts a build only in its handler of the pool's move to a new
    config (``shouldWeDoABuild``: ``isPoolConfigChange``, or a pool with no image yet) and
    refuses it while the pool is degraded (``canPoolBuild``: ``IsAnyDegraded``); nothing
    builds that config later, repaired or not, and nothing in the pool keeps the refusal. A
    version that is degraded, names a config no build of which started (still ``BuildSuccess``
    of an earlier build, none pending or running, the pool's status on another config) and
    has an image shows one: either the move came while degraded, or the pool degraded in the
    seconds between a move and its build's ``BuildPending``, which then shows. Dropped when
    the pool names another config (a new move, a new decision)."""
    config = _spec_config(pool)
    if config is None:
        return None
    if kept is not None and kept.config != config:
        kept = None
    degraded = next((c for c in _DEGRADED if _condition(pool, c)), None)
    unbuilt = (
        _condition(pool, "BuildSuccess")
        and not any(_condition(pool, c) for c in ("BuildPending", "Building"))
        and config != _status_config(pool)
        and _digest(_annotations(pool).get(POOL_IMAGE)) is not None
    )
    if degraded is not None and unbuilt:
        return Refusal(config, degraded)
    return kept


def foresee(
    annotations: Mapping[str, str],
    mco: McoObjects | None,
    now: datetime,
    waiting_since: datetime,
    expected_within: timedelta = EXPECTED_WITHIN,
) -> Replacement:
    """Whether MCO will replace the node's same-image target (``annotations``: the Node's);
    ``waiting_since``: when the hold began (now if none), from which ``EXPECTED`` counts, for
    at most ``expected_within``."""
    if mco is None:
        why = "the agent reads none of MCO's pools and builds here"
        return _unread(why, now, waiting_since + expected_within)
    if mco.unreadable is not None:
        if mco.failing_since is None:
            return Replacement(Foresight.UNKNOWN, mco.unreadable)
        # Counted from the failure too: a read that fails for a moment (an agent restarted
        # during a hold, the API server restarting) has the whole wait to come back.
        start = max(waiting_since, mco.failing_since)
        return _unread(mco.unreadable, now, start + expected_within)
    name = pool_of(annotations)
    if name is None:
        return Replacement(Foresight.UNKNOWN, "the node's pool is not known from its configs")
    pool = mco.pools.get(name)
    if pool is None:
        # The node's config names a pool MCO does not have (deleted, or not MCO's names):
        # nothing to foresee from; held as without the objects.
        return Replacement(
            Foresight.UNKNOWN, f"no MachineConfigPool {name}, which the node's config names"
        )
    degraded = [c for c in _DEGRADED if _condition(pool, c)]
    if degraded:
        why = f"pool {name} is {degraded[0]}: no MCO version starts a build for a degraded pool"
        return Replacement(Foresight.NONE, why)
    desired = _digest(annotations.get(DESIRED_IMAGE))
    config = _spec_config(pool)
    expected_until = waiting_since + expected_within
    machine_os_config = _config_of(name, mco.configs)
    if machine_os_config is not None:
        return _from_build(
            name,
            config,
            machine_os_config,
            mco.builds or (),
            annotations,
            now,
            expected_until,
            expected_within,
        )
    if mco.builds is not None and not _has_build_conditions(pool):
        return Replacement(
            Foresight.NONE, f"no MachineOSConfig names pool {name}: nothing builds for it"
        )
    refused = mco.refusals.get(name)
    return _from_pool(name, pool, config, refused, annotations, desired, now, expected_until)


def _unread(why: str, now: datetime, until: datetime) -> Replacement:
    """The agent reads none of MCO's objects here (the systemd install: the node's identity
    reads no pool; or discovery failed at start) and never will in this process, or a watch of
    them keeps failing before it listed (a 403: the ClusterRole lacks its row, which only an
    admin's fix brings back): a short wait for what MCO may be about to do (4.18 before the
    backport names the build's image seconds after the target), then the drain goes. Never a
    hold that only --max-hold would end: on a revert to a config built before (4.16/4.17) that
    would be 45 minutes a node, one node after another, for no drain saved."""
    if now < until:
        return Replacement(Foresight.UNKNOWN, f"{why}: waiting for a new image", until)
    return Replacement(Foresight.NONE, f"{why}, and no new image came within its wait")


def _from_pool(
    name: str,
    pool: JsonObj,
    config: str | None,
    refused: Refusal | None,
    annotations: Mapping[str, str],
    desired: str | None,
    now: datetime,
    expected_until: datetime,
) -> Replacement:
    """4.15: the pool's build conditions, and the refusal of its build the agent saw."""
    if _condition(pool, "BuildFailed"):
        why = f"pool {name}'s build failed: MCO builds nothing more until the pool is reset"
        return Replacement(Foresight.NONE, why)
    if _condition(pool, "BuildPending") or _condition(pool, "Building"):
        node_config = annotations.get(DESIRED_CONFIG)
        if node_config != config:
            # 4.15 completes a build by looking up the build of the pool's newer config, which
            # it never started: the pool stays Building for good (OCPBUGS-18344).
            why = (
                f"pool {name} builds while its config moved on to {config} (the node's is"
                f" {node_config}): 4.15 finishes no such build"
            )
            return Replacement(Foresight.NONE, why)
        return Replacement(Foresight.COMING, f"pool {name} is building {config}")
    image = _digest(_annotations(pool).get(POOL_IMAGE))
    if image is not None and image != desired:
        return Replacement(Foresight.COMING, f"pool {name} names a new image {_short(image)}")
    if config is not None and config != _status_config(pool):
        if refused is not None and refused.config == config:
            # The repair starts no build: the node controller goes on targeting the old image
            # (release-4.15 build_controller.go, updateMachineConfigPool and canPoolBuild).
            why = (
                f"pool {name} was {refused.degraded} at {config} before any build of it:"
                " 4.15 builds a config only when the pool moves to it, and refused it then"
            )
            return Replacement(Foresight.NONE, why)
        if now < expected_until:
            why = f"pool {name} moved to {config}: its build is about to start"
            return Replacement(Foresight.EXPECTED, why, expected_until)
        why = f"pool {name} moved to {config}, and no build of it started in time"
        return Replacement(Foresight.NONE, why)
    behind = _pool_behind(name, config, annotations, now, expected_until)
    if behind is not None:
        return behind
    return Replacement(Foresight.NONE, f"pool {name} has built its config with the booted image")


def _pool_behind(
    name: str,
    config: str | None,
    annotations: Mapping[str, str],
    now: datetime,
    expected_until: datetime,
) -> Replacement | None:
    """The node is targeted with a config the pool, as last read, does not name: the pool's
    watch may not have delivered the pool's move yet (the Node's and the pool's watches are
    separate streams), so a build of the new config may be on its way. Waited for, bounded,
    rather than let go on a view older than the node's (None: the views agree)."""
    node_config = annotations.get(DESIRED_CONFIG)
    if node_config is None or config is None or node_config == config or now >= expected_until:
        return None
    why = (
        f"the node's config {node_config} is not pool {name}'s {config} as last read: waiting"
        " for the pool's move"
    )
    return Replacement(Foresight.EXPECTED, why, expected_until)


def _from_build(
    name: str,
    config: str | None,
    machine_os_config: JsonObj,
    builds: Sequence[JsonObj],
    annotations: Mapping[str, str],
    now: datetime,
    expected_until: datetime,
    expected_within: timedelta,
) -> Replacement:
    """4.16 and later: the MachineOSBuild of the pool's config, and the MachineOSConfig."""
    desired = _digest(annotations.get(DESIRED_IMAGE))
    mosc = str(_get(machine_os_config, "metadata", "name") or "")
    named = _digest(
        _get(machine_os_config, "status", "currentImagePullSpec")
        or _get(machine_os_config, "status", "currentImagePullspec")
    )
    if named is not None and named != desired:
        why = f"MachineOSConfig {mosc} names a new image {_short(named)}"
        return Replacement(Foresight.COMING, why)
    build = next((b for b in builds if _is_build_of(b, mosc, config)), None)
    if build is None:
        if config != annotations.get(DESIRED_CONFIG) and now < expected_until:
            why = f"pool {name} moved to {config}: its MachineOSBuild is about to be created"
            return Replacement(Foresight.EXPECTED, why, expected_until)
        why = f"no MachineOSBuild of {config} for pool {name}, and none is being built"
        return Replacement(Foresight.NONE, why)
    build_name = str(_get(build, "metadata", "name") or "")
    failed = [c for c in _TERMINAL_FAILED if _condition(build, c)]
    if failed:
        why = f"MachineOSBuild {build_name} is {failed[0]}: MCO rolls nothing out after it"
        return Replacement(Foresight.NONE, why)
    if not _condition(build, "Succeeded"):
        return Replacement(Foresight.COMING, f"MachineOSBuild {build_name} is building {config}")
    image = _digest(
        _get(build, "status", "digestedImagePushSpec")
        or _get(build, "status", "finalImagePullspec")
    )
    behind = _pool_behind(name, config, annotations, now, expected_until)
    if behind is not None:
        return behind
    if image is None or image == desired:
        why = f"MachineOSBuild {build_name} of {config} built the image the node runs"
        return Replacement(Foresight.NONE, why)
    succeeded = _transition(build, "Succeeded")
    if succeeded is not None and now < succeeded + expected_within:
        # 4.18 before the backport marks a build succeeded, then names its image.
        why = f"MachineOSBuild {build_name} succeeded; MachineOSConfig {mosc} is about to name it"
        return Replacement(Foresight.EXPECTED, why, succeeded + expected_within)
    # 4.16/4.17 on a revert: the old build is found succeeded, and its image is never named
    # again; the node controller targets the MachineOSConfig's image, the booted one.
    why = (
        f"MachineOSBuild {build_name} of {config} succeeded before, and MachineOSConfig {mosc}"
        " names the image the node runs: nothing will retarget it"
    )
    return Replacement(Foresight.NONE, why)


def _is_build_of(build: JsonObj, mosc: str, config: str | None) -> bool:
    built = _get(build, "spec", "machineConfig", "name") or _get(
        build, "spec", "desiredConfig", "name"
    )
    return bool(_get(build, "spec", "machineOSConfig", "name") == mosc and built == config)


def _config_of(pool: str, configs: Sequence[JsonObj] | None) -> JsonObj | None:
    for config in configs or ():
        if _get(config, "spec", "machineConfigPool", "name") == pool:
            return config
    return None


def _has_build_conditions(pool: JsonObj) -> bool:
    kinds = ("BuildPending", "Building", "BuildSuccess", "BuildFailed")
    return any(_condition_entry(pool, c) is not None for c in kinds)


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _annotations(obj: JsonObj) -> Mapping[str, Any]:
    found = _get(obj, "metadata", "annotations")
    return found if isinstance(found, Mapping) else {}


def _spec_config(pool: JsonObj) -> str | None:
    found = _get(pool, "spec", "configuration", "name")
    return found if isinstance(found, str) else None


def _status_config(pool: JsonObj) -> str | None:
    found = _get(pool, "status", "configuration", "name")
    return found if isinstance(found, str) else None


def _condition_entry(obj: JsonObj, kind: str) -> Mapping[str, Any] | None:
    conditions = _get(obj, "status", "conditions")
    if not isinstance(conditions, list):
        return None
    for entry in conditions:
        if isinstance(entry, Mapping) and entry.get("type") == kind:
            return entry
    return None


def _condition(obj: JsonObj, kind: str) -> bool:
    entry = _condition_entry(obj, kind)
    return entry is not None and entry.get("status") == "True"


def _transition(obj: JsonObj, kind: str) -> datetime | None:
    entry = _condition_entry(obj, kind)
    text = entry.get("lastTransitionTime") if entry is not None else None
    if not isinstance(text, str):
        return None
    try:
        return parse_rfc3339(text)
    except ValueError:
        return None


def _digest(ref: object) -> str | None:
    if not isinstance(ref, str) or not ref:
        return None
    try:
        return digest_of(ref)
    except ImageRefError:
        return None


def _short(digest: str) -> str:
    return digest[: len("sha256:") + 12]
