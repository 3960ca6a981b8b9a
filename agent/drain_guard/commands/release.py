"""``drain-guard release``: release a held drain now (outcome manual), withdraw a hold
request, or remove stale drain-guard keys."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from drain_guard import protocol
from drain_guard.commands.base import connect
from drain_guard.core.exitcodes import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from drain_guard.decision.decide import NothingHeldError, force_release, stale_keys
from drain_guard.settings.commands import ReleaseCommand
from drain_guard.status.holdrequest import printable

if TYPE_CHECKING:
    from drain_guard.kube.client import Kube


def releasable(annotations: Mapping[str, str]) -> bool:
    """What ``release --all`` acts on: a drain-guard hold, a hold request, or stale
    drain-guard keys."""
    try:
        force_release(annotations, "", protocol.Outcome.MANUAL)
    except NothingHeldError:
        return bool(stale_keys(annotations)) or protocol.HOLD_REQUEST in annotations
    return True


async def run_release(args: ReleaseCommand) -> int:
    from drain_guard.kube.call import KubeError

    kube = await connect(args.kubeconfig, "release")
    if kube is None:
        return EXIT_USAGE
    try:
        if args.node_name is None:
            nodes = [n for n in await kube.list_nodes() if releasable(n.annotations)]
            if not nodes:
                print("nothing to release: no node has a hold or stale keys")
                return EXIT_OK
            who = Releaser(kube)
            results = [await release_node(kube, n.name, who) for n in nodes]
            return EXIT_OK if all(results) else EXIT_FAILURE
        released = await release_node(kube, args.node_name, Releaser(kube))
        return EXIT_OK if released else EXIT_FAILURE
    except KubeError as exc:
        print(f"drain-guard release: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        await kube.close()


RELEASE_ATTEMPTS = 5
#: The admission policy that checks ``released-by`` (daemonset/base/released-by-policy.yaml).
RELEASED_BY_POLICY = "drain-guard-released-by"


class Releaser:
    """Who releases: the API server's name for the caller (a SelfSubjectReview), recorded in
    ``drain-guard.io/released-by``. Asked once, when the first hold is released (withdrawing a
    hold request or removing stale keys records no one)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._asked = False
        self._name: str | None = None

    async def name(self) -> str | None:
        """The name; None, said in one line, when it cannot be learnt or recorded: the
        release goes ahead without it (a hold must never wait for its record)."""
        if not self._asked:
            self._asked = True
            self._name = await self._ask()
        return self._name

    def refused(self, exc: Exception) -> None:
        """Admission refused the name (it is not the writer's own, as the API server sees
        the write): said in one line, and the releases go on without it."""
        self._name = None
        self._warn(f"admission refused {protocol.RELEASED_BY} ({exc})")

    def _warn(self, why: str) -> None:
        print(
            f"drain-guard release: warning: {why}; releasing without {protocol.RELEASED_BY}",
            file=sys.stderr,
        )

    async def _ask(self) -> str | None:
        from drain_guard.kube.call import KubeError

        try:
            name = await self.kube.user_name()
        except KubeError as exc:
            why = f"the API server did not say who you are (SelfSubjectReview: {exc})"
        else:
            try:
                return protocol.check_released_by(name)
            except protocol.ProtocolError as exc:
                why = f"your user name {printable(repr(name[:80]))} cannot be recorded: {exc}"
        self._warn(why)
        return None


async def release_node(kube: Kube, name: str, who: Releaser) -> bool:
    """Release ``name``'s hold by compare-and-swap, re-reading on conflict; True on success.

    The patch also records the request in ``drain-guard.io/released``: the agent does not
    hold that request again, and counts the release as ``manual``; and who released it
    (``who``) in ``drain-guard.io/released-by``.
    """
    from drain_guard.kube.call import KubeError
    from drain_guard.kube.client import Applied

    for _ in range(RELEASE_ATTEMPTS):
        node = await kube.get_node(name)
        if node is None:
            print(f"drain-guard release: error: node {name} not found", file=sys.stderr)
            return False
        # A hold request would hold the next drain request: release withdraws it too.
        request = node.annotations.get(protocol.HOLD_REQUEST)
        withdraw = [] if request is None else _withdraw_ops(request)
        held = protocol.parse_drain_request(node.annotations.get(protocol.DESIRED_DRAIN))
        by = await who.name() if held.verb is protocol.Verb.HOLD else None
        try:
            release = force_release(
                node.annotations, node.resource_version, protocol.Outcome.MANUAL, by
            )
        except NothingHeldError as exc:
            stale = stale_keys(node.annotations)
            if not stale and request is None:
                print(f"drain-guard release: error: node {name}: {exc}", file=sys.stderr)
                return False
            desired = node.annotations.get(protocol.DESIRED_DRAIN)
            cleanup = protocol.cleanup_patch(desired, node.annotations, stale) if stale else []
            patch = [*cleanup, *withdraw]
            if isinstance(await kube.patch_node_json(name, patch), Applied):
                if stale:
                    print(f"node {name}: nothing held; removed stale {', '.join(stale)}")
                if request is not None:
                    print(f"node {name}: withdrew the hold request {printable(repr(request))}")
                return True
            continue
        except protocol.ProtocolError as exc:
            print(f"drain-guard release: error: node {name}: {exc}", file=sys.stderr)
            return False
        try:
            result = await kube.patch_node_json(name, [*release.patch, *withdraw])
        except KubeError as exc:
            if by is None or exc.status != 403 or RELEASED_BY_POLICY not in exc.reason:
                raise
            who.refused(exc)  # the record, not the release, was refused: release without it
            continue
        if isinstance(result, Applied):
            as_who = "" if by is None else f", released by {printable(by)}"
            print(f"node {name}: released {release.original} (outcome manual{as_who})")
            if release.record is not None and protocol.Reason.BUILD_POD in release.record.reasons:
                print(
                    f"node {name}: note: it was held for a build pod; if the build still runs,"
                    " the drain starts now and waits at its PodDisruptionBudget (the shield)"
                    " until the build ends"
                )
            if request is not None:
                print(f"node {name}: withdrew the hold request {printable(repr(request))}")
            return True
    print(f"drain-guard release: error: node {name} kept changing; try again", file=sys.stderr)
    return False


def _withdraw_ops(request: str) -> list[dict[str, str]]:
    """JSON Patch removing the hold request ``request``, only if it is still that one."""
    path = protocol.annotation_path(protocol.HOLD_REQUEST)
    return [{"op": "test", "path": path, "value": request}, {"op": "remove", "path": path}]
