"""Start-up checks of what would otherwise misbehave silently.

- ``--daemonset`` must name a DaemonSet that exists and owns this pod: the SIGTERM path reads
  it to tell an uninstall (release holds) from a rolling update (keep them), so a wrong name
  would release every hold on every restart. The agent refuses to start (exit 2, one line).
- ``--deployment`` (the central shield's) must name a Deployment that exists, for the same
  reason: a wrong name would remove every budget on every restart.
- ``--node-name`` must name a Node: the agent keeps running (a node may register after its
  agent starts) but says so in its log, not only in ``/readyz``.
- The agent must be confined to its own Node: a server-side dry-run write to another Node
  (authorization and admission run, nothing is stored) must be denied, and so must a dry-run
  TokenRequest for another service account (``default/default``): an identity that may mint
  tokens for other accounts (a node's may, for its pods') can become them. Checked at start,
  again whenever the client takes up other credentials (they may be another identity's), and
  every ``--confinement-check-interval`` (an hour: a role granted later, an admission policy
  or webhook removed, is seen within it; more often would double the agent's requests at
  rest). The Node written to is listed once and written to again while it exists. The
  result is the metric ``drain_guard_confined`` and ``confinement`` in ``/status``.

Transient API failures (transport, 429, 5xx) are retried with backoff; nothing else is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from drain_guard.config.values import WorkloadRef
from drain_guard.kube.call import KubeError
from drain_guard.kube.client import Kube
from drain_guard.kube.retry import Backoff, Outage
from drain_guard.runtime.agent_metrics import Metrics

log = logging.getLogger(__name__)
T = TypeVar("T")

#: The annotation the confinement probe writes, in dry run only: it names the prober.
PROBE_ANNOTATION = "drain-guard.io/confinement-probe"
#: Where Nodes cannot be listed, the probe targets ``<node>-<this>``, a name not the agent's.
PROBE_SUFFIX = "confinement-probe"


class StartupError(Exception):
    """A setting that names the wrong thing; the message is one line for the operator."""


def _transient(exc: KubeError) -> bool:
    return exc.status == 0 or exc.status == 429 or exc.status >= 500


async def _answered(what: str, call: Callable[[], Awaitable[T]]) -> T:
    """``call()`` until the API server answers it (transient failures are retried)."""
    backoff = Backoff()
    outage = Outage(what, log)  # each failure counts in drain_guard_api_errors_total
    while True:
        try:
            answer = await call()
        except KubeError as exc:
            if not _transient(exc):
                raise
            delay = backoff.next_delay(exc.retry_after if exc.status == 429 else None)
            outage.failed("API call", exc, delay)
            await asyncio.sleep(delay)
        else:
            outage.ended()
            return answer


async def check_daemonset(kube: Kube, ref: WorkloadRef, pod_name: str) -> None:
    """Raise :class:`StartupError` unless DaemonSet ``ref`` exists and controls this pod."""
    what = f"checking --daemonset {ref}"
    try:
        daemonset = await _answered(what, lambda: kube.get_daemonset(ref.namespace, ref.name))
        pod = await _answered(what, lambda: kube.get_pod(ref.namespace, pod_name))
    except KubeError as exc:
        raise StartupError(f"--daemonset {ref}: cannot read it ({exc})") from None
    if daemonset is None:
        raise StartupError(
            f"--daemonset {ref}: no such DaemonSet; it must name this agent's own DaemonSet"
            " (a kustomize namePrefix or namespace changes it), or every SIGTERM would look"
            " like an uninstall and release the hold"
        )
    if pod is None:
        raise StartupError(
            f"--pod-name {pod_name}: no such pod in namespace {ref.namespace}"
            " (the DaemonSet's namespace)"
        )
    uid = (daemonset.get("metadata") or {}).get("uid")
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    controller = next((o for o in owners if o.get("controller")), None)
    if controller is None or (controller.get("kind"), controller.get("uid")) != ("DaemonSet", uid):
        owner = (
            "nothing"
            if controller is None
            else f"{controller.get('kind')} {controller.get('name')}"
        )
        raise StartupError(
            f"--daemonset {ref}: pod {ref.namespace}/{pod_name} is controlled by {owner}, not"
            " by this DaemonSet; on SIGTERM the agent would judge the wrong DaemonSet"
        )
    log.info("DaemonSet %s owns this pod (%s)", ref, pod_name)


async def check_deployment(kube: Kube, ref: WorkloadRef) -> None:
    """Raise :class:`StartupError` unless Deployment ``ref`` (the central shield's) exists."""
    try:
        deployment = await _answered(
            f"checking --deployment {ref}", lambda: kube.get_deployment(ref.namespace, ref.name)
        )
    except KubeError as exc:
        raise StartupError(f"--deployment {ref}: cannot read it ({exc})") from None
    if deployment is None:
        raise StartupError(
            f"--deployment {ref}: no such Deployment; it must name the shield's own Deployment"
            " (a kustomize namePrefix or namespace changes it), or every SIGTERM would look"
            " like an uninstall and remove the budgets"
        )


async def check_node(kube: Kube, name: str) -> None:
    """Log an unknown ``--node-name`` at once; the agent keeps running (waits for the Node)."""
    try:
        node = await _answered("checking --node-name", lambda: kube.get_node(name))
    except KubeError as exc:
        log.warning("cannot check that node %s exists: %s", name, exc)
        return
    if node is None:
        log.error(
            "node %s not found: --node-name (NODE_NAME) names no Node; nothing is held until"
            " it appears",
            name,
        )


@dataclass(frozen=True)
class Confinement:
    """Whether a write to another Node was denied (None: could not be tested), and how."""

    confined: bool | None
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"confined": self.confined, "detail": self.detail}


NOT_CHECKED = Confinement(None, "not checked yet")
#: The account whose token the check asks for: one every cluster has.
TOKEN_PROBE = ("default", "default")


async def check_token_request(kube: Kube) -> Confinement:
    """Dry-run a TokenRequest for another service account; expect 403. Authorization comes
    before the account is looked up, so a 404 means it was allowed too."""
    namespace, account = TOKEN_PROBE
    what = "confinement self-check"
    try:
        await _answered(what, lambda: kube.dry_run_token_request(namespace, account))
    except KubeError as exc:
        if exc.status == 403:
            return Confinement(True, f"a dry-run TokenRequest for {namespace}/{account} was denied")
        if exc.status != 404:
            return Confinement(None, f"the dry-run TokenRequest failed: {exc}")
    return Confinement(
        False,
        f"a dry-run TokenRequest for service account {namespace}/{account} was allowed: this"
        " agent can act as other service accounts (docs/install.md, Every identity and every"
        " right)",
    )


def combined(node: Confinement, token: Confinement) -> Confinement:
    """Confined only if both checks say so; not confined if either says not."""
    if node.confined is False or token.confined is False:
        confined: bool | None = False
    elif node.confined and token.confined:
        confined = True
    else:
        confined = None
    return Confinement(confined, f"{node.detail}; {token.detail}")


async def check_confinement(
    kube: Kube, node_name: str, probed: str | None = None
) -> tuple[Confinement, str | None]:
    """Dry-run a write to another Node with the credentials Node writes use; expect 403. With
    the node's own credentials, dry-run it with the agent's own account as well: 403 again.

    ``probed`` is the Node the last check wrote to: written to again without listing, unless
    it is gone (404). Returns the result and the Node written to, for the next check."""
    what = "confinement self-check"
    other = probed
    if other is None:
        try:
            other = await _answered(what, lambda: kube.other_node(node_name))
        except KubeError as exc:
            if exc.status != 403:
                return Confinement(
                    None, f"cannot list Nodes to pick one to test against: {exc}"
                ), None
            # Through the systemd install's node proxy on Kubernetes 1.32+, the node identity
            # reads its own Node only (AuthorizeNodeWithSelectors): probe a name that is not it.
            other = f"{node_name}-{PROBE_SUFFIX}"
    if other is None:
        return Confinement(None, "no other Node to test against (a single-node cluster)"), None
    target = other
    probe = {"metadata": {"annotations": {PROBE_ANNOTATION: node_name}}}
    try:
        await _answered(what, lambda: kube.dry_run_patch_node(target, probe))
    except KubeError as exc:
        if exc.status == 404 and probed is not None:  # gone since: pick another
            return await check_confinement(kube, node_name)
        if exc.status != 403:
            return Confinement(None, f"the dry-run write to Node {target} failed: {exc}"), None
        denied = f"a dry-run write to Node {target} was denied: {exc.reason}"
    else:
        return Confinement(
            False,
            f"a dry-run write to Node {target} was allowed: this agent can write every Node"
            " (docs/install.md, Confinement)",
        ), target
    return Confinement(True, denied), target


async def report_confinement(
    kube: Kube,
    node_name: str,
    metrics: Metrics,
    record: Callable[[Confinement], None],
    interval: float,
) -> None:
    """Run the confinement checks at start, again when the client has taken up other
    credentials (``kube.renewed``) or ``interval`` has passed, and report each result:
    ``record`` (for /status) and the metric always, the log line when it changes."""
    last: Confinement | None = None
    probed: str | None = None
    while True:
        node, probed = await check_confinement(kube, node_name, probed)
        result = combined(node, await check_token_request(kube))
        record(result)
        metrics.set_confined(result.confined)
        if result != last:
            fields = {"confined": result.confined}
            if result.confined:
                log.info("confinement self-check: %s", result.detail, extra={"fields": fields})
            else:
                log.warning("confinement self-check: %s", result.detail, extra={"fields": fields})
        last = result
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(interval):
                await kube.renewed.wait()
        kube.renewed.clear()
