"""``drain-guard preflight``: which install fits a cluster, and the installed confinement proven
on it, with the admin's own credentials.

It reads the cluster's versions (``/version``, OpenShift's ClusterVersion, MCO's API) and says
which overlay of ``daemonset/overlays`` fits. Then it impersonates the agent's service account
with the claims the kubelet's bound token carries for the agent's pod on a node (user, groups,
and the ``authentication.kubernetes.io/node-name``, ``pod-name`` and ``pod-uid`` extras), makes
the requests of docs/rights.md's rows for that install, every write with ``dryRun=All``, and
prints one line a row: the request, the table's answer, the API server's, and OK or SURPRISE.
A row it cannot make without changing the cluster (a release needs a held drain) is reported
as not tried, with why. Nothing is written.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import re
import sys
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from drain_guard import protocol
from drain_guard.commands.base import connect
from drain_guard.confine.permissions import EVENTS_NAMESPACE, MCO_NAMESPACES
from drain_guard.confine.rights import ALLOWED, RBAC, expected, fitting_overlay
from drain_guard.core.exitcodes import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from drain_guard.core.pods import DEFAULT_SCOPE, NODE_KEY, Pod, is_build_pod, node_label_value
from drain_guard.core.selectors import default_build_pod_selectors
from drain_guard.decision.decide import stale_keys
from drain_guard.settings.agent import default_max_hold
from drain_guard.shield.plan import Role, Want

if TYPE_CHECKING:
    from drain_guard.kube.call import KubeError
    from drain_guard.kube.client import Kube
    from drain_guard.kube.credentials import ApiClient

PROG = "drain-guard preflight"
#: The table, as the package ships it (a copy of docs/rights.md, checked equal by a test), so
#: that an installed drain-guard (the image, a pip install) finds it with no checkout.
DEFAULT_RIGHTS = Path(str(files("drain_guard").joinpath("rights.md")))
MCO_GROUP = "machineconfiguration.openshift.io"
#: OpenShift 4.15's on-cluster layering: a pool opted in by this label (before MachineOSConfig).
LAYERING_LABEL = "machineconfiguration.openshift.io/layering-enabled"
#: The node-name and pod claims of a pod-bound service account token (Kubernetes 1.30+).
NODE_NAME_CLAIM = "authentication.kubernetes.io/node-name"
POD_NAME_CLAIM = "authentication.kubernetes.io/pod-name"
POD_UID_CLAIM = "authentication.kubernetes.io/pod-uid"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
POLICY_DENIAL = re.compile(r"ValidatingAdmissionPolicy '([^']+)'")
WEBHOOK_DENIAL = re.compile(r'admission webhook "([^"]+)" denied')
#: A build pod's label the shield's budgets select by (one the budget policy recognises).
BUILD_POD_LABELS = {"machineconfiguration.openshift.io/buildPod": "true"}


@dataclass(frozen=True)
class Fit:
    """What the cluster runs, and the overlay that fits it (None: none does)."""

    kubernetes: str
    openshift: str | None
    mco_resources: frozenset[str]
    layering: str
    build_forms: tuple[str, ...]
    overlay: str | None
    why: str


@dataclass(frozen=True)
class Agent:
    """The identity probed: the agent's account, as its pod on ``node`` holds it."""

    namespace: str
    account: str
    pod: str
    pod_uid: str
    node: str
    other: str | None

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.account}"

    def headers(self, *, bound: bool = True) -> list[tuple[str, str]]:
        """The impersonation headers: the account, its groups, its pod-bound token's claims
        (none but the account and groups when not ``bound``: a TokenRequest's plain token)."""
        groups = ("system:serviceaccounts", f"system:serviceaccounts:{self.namespace}")
        claims = {NODE_NAME_CLAIM: self.node, POD_NAME_CLAIM: self.pod, POD_UID_CLAIM: self.pod_uid}
        extras = claims if bound else {}
        return [
            ("Impersonate-User", self.user),
            *(("Impersonate-Group", g) for g in (*groups, "system:authenticated")),
            *((f"Impersonate-Extra-{quote(k, safe='')}", v) for k, v in extras.items()),
        ]


@dataclass
class Probe:
    """What a request is made with: the admin's client (to read the state a row needs) and
    the impersonating one (to make it)."""

    admin: Kube
    agent: Kube
    unbound: Kube  #: the same account with a token bound to no pod
    who: Agent
    pool: str


Answer = str | None  # None: not tried (the reason is printed by the row itself)
Request = Callable[[Probe], Awaitable[tuple[Answer, str]]]


def run_preflight(args: argparse.Namespace) -> int:
    """Read the table, then survey and prove (a missing table is a usage error, before any
    request)."""
    rights = Path(args.rights)
    try:
        table = rights.read_text(encoding="utf-8")
    except OSError as exc:
        print(
            f"{PROG}: error: --rights {rights}: {exc.strerror or exc}"
            " (docs/rights.md of the drain-guard release whose overlay you applied)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    return asyncio.run(_preflight(args, rights, table))


async def _preflight(args: argparse.Namespace, rights: Path, table: str) -> int:
    from drain_guard.kube.call import KubeError

    admin = await connect(args.kubeconfig, "preflight")
    if admin is None:
        return EXIT_USAGE
    try:
        fit = await survey(admin)
        print(f"Kubernetes {fit.kubernetes}; OpenShift {fit.openshift or 'not served'}")
        mco = ", ".join(sorted(fit.mco_resources)) or "none"
        print(f"MCO's API ({MCO_GROUP}): {mco}; on-cluster layering: {fit.layering}")
        print(f"build-pod forms served: {', '.join(fit.build_forms) or 'none'}")
        print(f"install that fits: {fit.overlay or 'none'} ({fit.why})")
        install = args.install or fit.overlay
        if install is None:
            return EXIT_FAILURE
        rows = expected(table, install)
        if not rows:
            print(f"{PROG}: error: {rights} has no row for install {install}", file=sys.stderr)
            return EXIT_USAGE
        who = await find_agent(admin, args.namespace, args.service_account, args.node_name)
        if isinstance(who, str):
            print(f"{PROG}: error: {who}", file=sys.stderr)
            return EXIT_FAILURE
        print(f"confinement of {install} as {who.user} on node {who.node} (pod {who.pod}):")
        return await prove(admin, args.kubeconfig, who, rows)
    except KubeError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        await admin.close()


async def survey(kube: Kube) -> Fit:
    """The cluster's versions and MCO's API, and the overlay that fits them."""
    from drain_guard.kube.call import KubeError, call_api

    version = await call_api(_version_api(kube).get_code)
    minor = int(re.sub(r"\D.*", "", str(version.get("minor", "0"))) or 0)
    kubernetes = str(version.get("gitVersion", "?"))
    try:
        cluster = await call_api(
            kube.custom.get_cluster_custom_object,
            "config.openshift.io",
            "v1",
            "clusterversions",
            "version",
        )
        openshift: str | None = str(
            ((cluster.get("status") or {}).get("desired") or {}).get("version", "?")
        )
    except KubeError as exc:
        if exc.status != 404:
            raise
        openshift = None
    resources: set[str] = set()
    for api_version in ("v1", "v1alpha1"):
        try:
            found = await call_api(kube.custom.get_api_resources, MCO_GROUP, api_version)
        except KubeError as exc:
            if exc.status != 404:
                raise
            continue
        resources |= {
            f"{r['name']}.{api_version}"
            for r in found.get("resources") or ()
            if "/" not in r["name"]
        }
    layering = await _layering(kube, resources)
    overlay, why = fitting_overlay(minor, openshift)
    forms = await _build_forms(kube, resources)
    return Fit(kubernetes, openshift, frozenset(resources), layering, forms, overlay, why)


async def _build_forms(kube: Kube, resources: set[str]) -> tuple[str, ...]:
    """The forms a build pod can take here, by the APIs served: an OpenShift Build's pod
    (4.15's on-cluster layering), a MachineOSBuild's Job pod (4.16+); the default build-pod
    selectors match both."""
    from drain_guard.kube.call import KubeError, call_api

    forms = []
    try:
        builds = await call_api(kube.custom.get_api_resources, "build.openshift.io", "v1")
    except KubeError as exc:
        if exc.status != 404:
            raise
        builds = {}
    if any(r.get("name") == "builds" for r in builds.get("resources") or ()):
        forms.append("OpenShift Builds (build.openshift.io)")
    if any(r.startswith("machineosbuilds.") for r in resources):
        forms.append("MachineOSBuild jobs")
    return tuple(forms)


def _version_api(kube: Kube) -> Any:
    from kubernetes_asyncio.client.api.version_api import VersionApi

    return VersionApi(kube.api)


async def _layering(kube: Kube, resources: set[str]) -> str:
    """Whether on-cluster layering is on: a MachineOSConfig (4.16+), or a pool with 4.15's
    layering label."""
    from drain_guard.kube.call import call_api

    for api_version in ("v1", "v1alpha1"):
        if f"machineosconfigs.{api_version}" in resources:
            configs = await call_api(
                kube.custom.list_cluster_custom_object, MCO_GROUP, api_version, "machineosconfigs"
            )
            names = [c["metadata"]["name"] for c in configs.get("items") or ()]
            return f"MachineOSConfig {', '.join(names)}" if names else "off (no MachineOSConfig)"
    if "machineconfigpools.v1" in resources:
        pools = await call_api(
            kube.custom.list_cluster_custom_object,
            MCO_GROUP,
            "v1",
            "machineconfigpools",
            label_selector=LAYERING_LABEL,
        )
        names = [p["metadata"]["name"] for p in pools.get("items") or ()]
        return f"pools labelled {LAYERING_LABEL}: {', '.join(names)}" if names else "off"
    return "no MCO"


async def find_agent(kube: Kube, namespace: str, account: str, node: str | None) -> Agent | str:
    """The agent's pod (on ``node``, else the first found) and another Node, or what is
    missing."""
    from drain_guard.kube.call import call_api

    pods = await call_api(
        kube.core.list_namespaced_pod,
        namespace,
        **({"field_selector": f"spec.nodeName={node}"} if node else {}),
    )
    for pod in pods.get("items") or ():
        spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
        if spec.get("serviceAccountName") == account and spec.get("nodeName"):
            own = str(spec["nodeName"])
            other = await kube.other_node(own)
            return Agent(namespace, account, meta["name"], meta["uid"], own, other)
    where = f" on node {node}" if node else ""
    return f"no pod of service account {namespace}/{account}{where}: is the overlay applied?"


async def prove(admin: Kube, kubeconfig: str | None, who: Agent, rows: Mapping[str, str]) -> int:
    """Make each row's request as ``who``; print the lines; non-zero on any surprise."""
    from drain_guard.kube.credentials import load_api_client

    agent = type(admin)(_impersonate(await load_api_client(kubeconfig), who.headers()))
    unbound = type(admin)(_impersonate(await load_api_client(kubeconfig), who.headers(bound=False)))
    try:
        node = await admin.get_node(who.node)
        pool = protocol.pool_of(node.annotations) if node else None
        probe = Probe(admin, agent, unbound, who, pool or "worker")
        surprises, untried = [], 0
        width = max(len(r) for r in rows)
        for request, answer in rows.items():
            make = REQUESTS.get(request)
            got, note = (
                (None, UNMADE.get(request, "preflight makes no such request"))
                if make is None
                else await make(probe)
            )
            if got is None:
                untried += 1
                verdict = f"not tried: {note}"
            elif got == answer:
                verdict = "OK"
            else:
                verdict = "SURPRISE"
                surprises.append(request)
            print(f"  {request:<{width}}  expected {answer!r}, got {got or '-'!r}: {verdict}")
    finally:
        await agent.close()
        await unbound.close()
    tried = len(rows) - untried
    print(f"{tried} of {len(rows)} rows tried, {len(surprises)} surprises")
    for request in surprises:
        print(f"SURPRISE: {request}")
    return EXIT_FAILURE if surprises else EXIT_OK


def _impersonate(api: ApiClient, headers: list[tuple[str, str]]) -> ApiClient:
    """Send ``headers`` with every request of ``api``: through its REST client, since the
    generated API functions keep one value a header and the groups are several."""
    from multidict import CIMultiDict

    rest: Any = api.rest_client  # the library's, untyped
    request = rest.request

    async def impersonating(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        merged: CIMultiDict[str] = CIMultiDict(kwargs.pop("headers", None) or {})
        for name, value in headers:
            merged.add(name, value)
        return await request(method, url, *args, headers=merged, **kwargs)

    rest.request = impersonating
    return api


async def _answer(call: Awaitable[Any]) -> str:
    """Who answered a request how: allowed, or who denied it (RBAC, a policy, a webhook)."""
    from drain_guard.kube.call import KubeError

    try:
        await call
    except KubeError as exc:
        return _denial(exc)
    return ALLOWED


def _denial(exc: KubeError) -> str:
    policy = POLICY_DENIAL.search(exc.reason)
    if policy:
        return f"denied: {policy.group(1)}"
    webhook = WEBHOOK_DENIAL.search(exc.reason)
    if webhook:
        return f"denied: webhook {webhook.group(1)}"
    if exc.status == 403:
        return RBAC
    if exc.status == 404:  # the authorizer let it through; the object is not there
        return ALLOWED
    return f"error {exc.status}: {exc.reason}"


def _call(fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Awaitable[Any]:
    from drain_guard.kube.call import call_api

    return call_api(fn, *args, **kwargs)


def _made(answer: str) -> tuple[Answer, str]:
    return answer, ""


async def _annotations(probe: Probe, node: str) -> dict[str, str]:
    found = await probe.admin.get_node(node)
    return dict(found.annotations) if found else {}


async def _patch(probe: Probe, node: str, body: Any, content_type: str = MERGE_PATCH) -> str:
    return await _answer(
        _call(probe.agent.core.patch_node, node, body, dry_run="All", _content_type=content_type)
    )


def _pending(annotations: Mapping[str, str]) -> bool:
    """A drain request the MCC has not applied: the one state a hold is made in."""
    desired = annotations.get(protocol.DESIRED_DRAIN, "")
    return desired.startswith("drain-") and desired != annotations.get(protocol.LAST_APPLIED_DRAIN)


def _hold_ops(annotations: Mapping[str, str]) -> list[Any]:
    return list(
        protocol.hold_patch(
            annotations[protocol.DESIRED_DRAIN],
            annotations.get(protocol.LAST_APPLIED_DRAIN),
            "",
            [protocol.Reason.BUILD_POD],
            datetime.now(UTC),
            "drain-guard preflight (dry run)",
            expires=datetime.now(UTC) + default_max_hold(),
        )
    )


async def hold_own_node(probe: Probe) -> tuple[Answer, str]:
    ann = await _annotations(probe, probe.who.node)
    if not _pending(ann):
        return None, f"no drain request pending on {probe.who.node}"
    return _made(await _patch(probe, probe.who.node, _hold_ops(ann), JSON_PATCH))


async def release_own_node(probe: Probe) -> tuple[Answer, str]:
    ann = await _annotations(probe, probe.who.node)
    desired = ann.get(protocol.DESIRED_DRAIN, "")
    if not desired.startswith("hold-drain-"):
        return None, f"no hold on {probe.who.node}"
    present = [k for k in protocol.OWNED_KEYS if k in ann]
    ops = protocol.release_patch(
        desired.removeprefix("hold-"), ann.get(protocol.LAST_APPLIED_DRAIN), "", present
    )
    return _made(await _patch(probe, probe.who.node, list(ops), JSON_PATCH))


async def hold_other_node(probe: Probe) -> tuple[Answer, str]:
    """The hold record alone, which its own Node would take, so only the node-name claim
    refuses it. Not the agent's JSON Patch of that Node's request: its test operations fail
    (422, before admission) whenever that Node's agent or MCO writes it between the read and
    the patch, and admission judges the patched object, whatever the patch's form."""
    other = probe.who.other
    if other is None:
        return None, "no other Node"
    record = {protocol.HELD_DRAIN: "drain-preflight"}
    return _made(await _patch(probe, other, {"metadata": {"annotations": record}}))


async def rewrite_drain(probe: Probe) -> tuple[Answer, str]:
    ann = await _annotations(probe, probe.who.node)
    last = ann.get(protocol.LAST_APPLIED_DRAIN)
    if last is None or ann.get(protocol.DESIRED_DRAIN) == last:
        return None, f"desiredDrain is lastAppliedDrain already on {probe.who.node}"
    body = {"metadata": {"annotations": {protocol.DESIRED_DRAIN: last}}}
    return _made(await _patch(probe, probe.who.node, body))


def _annotate(key: str, value: str) -> Request:
    async def make(probe: Probe) -> tuple[Answer, str]:
        ann = await _annotations(probe, probe.who.node)
        if ann.get(key) == value:
            return None, f"{key} is {value!r} already"
        body = {"metadata": {"annotations": {key: value}}}
        return _made(await _patch(probe, probe.who.node, body))

    return make


async def remove_released_by(probe: Probe) -> tuple[Answer, str]:
    ann = await _annotations(probe, probe.who.node)
    stale = [k for k in stale_keys(ann) if k in protocol.RELEASED_KEYS]
    if protocol.RELEASED_BY not in stale:
        return None, f"no stale released-by marker on {probe.who.node}"
    ops = protocol.cleanup_patch(ann.get(protocol.DESIRED_DRAIN), ann, stale)
    return _made(await _patch(probe, probe.who.node, list(ops), JSON_PATCH))


async def write_released_by(probe: Probe) -> tuple[Answer, str]:
    return await _annotate(protocol.RELEASED_BY, probe.who.user)(probe)


async def cordon(probe: Probe) -> tuple[Answer, str]:
    found = await probe.admin.get_node(probe.who.node)
    cordoned = bool(found and found.unschedulable)
    return _made(await _patch(probe, probe.who.node, {"spec": {"unschedulable": not cordoned}}))


async def taint(probe: Probe) -> tuple[Answer, str]:
    found = await _call(probe.admin.core.read_node, probe.who.node)
    mine = {"key": "drain-guard.io/preflight", "effect": "NoSchedule"}
    taints = [*((found.get("spec") or {}).get("taints") or ()), mine]
    return _made(await _patch(probe, probe.who.node, {"spec": {"taints": taints}}))


async def taint_other(probe: Probe) -> tuple[Answer, str]:
    if probe.who.other is None:
        return None, "no other Node"
    mine = {"key": "drain-guard.io/preflight", "effect": "NoSchedule"}
    return _made(await _patch(probe, probe.who.other, {"spec": {"taints": [mine]}}))


async def hold_unbound(probe: Probe) -> tuple[Answer, str]:
    """Its own Node's hold, as the account with no pod's claims."""
    ann = await _annotations(probe, probe.who.node)
    if not _pending(ann):
        return None, f"no drain request pending on {probe.who.node}"
    patch = probe.unbound.core.patch_node
    ops = _hold_ops(ann)
    return _made(
        await _answer(_call(patch, probe.who.node, ops, dry_run="All", _content_type=JSON_PATCH))
    )


async def label(probe: Probe) -> tuple[Answer, str]:
    body = {"metadata": {"labels": {"drain-guard.io/preflight": "x"}}}
    return _made(await _patch(probe, probe.who.node, body))


async def node_status(probe: Probe) -> tuple[Answer, str]:
    body = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    core = probe.agent.core
    return _made(
        await _answer(
            _call(
                core.patch_node_status,
                probe.who.node,
                body,
                dry_run="All",
                _content_type=MERGE_PATCH,
            )
        )
    )


async def delete_node(probe: Probe) -> tuple[Answer, str]:
    return _made(await _answer(_call(probe.agent.core.delete_node, probe.who.node, dry_run="All")))


async def create_node(probe: Probe) -> tuple[Answer, str]:
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": _unique("node")}}
    return _made(await _answer(_call(probe.agent.core.create_node, body, dry_run="All")))


async def read_own_node(probe: Probe) -> tuple[Answer, str]:
    return _made(await _answer(_call(probe.agent.core.read_node, probe.who.node)))


async def list_own_pods(probe: Probe) -> tuple[Answer, str]:
    selector = f"spec.nodeName={probe.who.node}"
    list_pods = probe.agent.core.list_namespaced_pod
    return _made(await _answer(_call(list_pods, MCO_NAMESPACES[0], field_selector=selector)))


async def list_pods_elsewhere(probe: Probe) -> tuple[Answer, str]:
    return _made(await _answer(_call(probe.agent.core.list_namespaced_pod, "kube-system")))


def _unique(prefix: str) -> str:
    return f"drain-guard-preflight-{prefix}-{uuid.uuid4().hex[:8]}"


async def _build_pod(probe: Probe, node: str) -> Pod:
    """A build pod on ``node`` (the admin's read): one that runs there, which a webhook that
    reads a budget's owner finds (openshift-4.15); else one of the preflight's own (a name,
    uid and label: the admission policies judge a budget by its shape)."""
    found = await _call(
        probe.admin.core.list_namespaced_pod,
        MCO_NAMESPACES[0],
        field_selector=f"spec.nodeName={node}",
    )
    selectors = default_build_pod_selectors()
    for item in found.get("items") or ():
        pod = Pod.from_dict(item)
        if is_build_pod(pod, selectors, DEFAULT_SCOPE):
            return pod
    return Pod(
        MCO_NAMESPACES[0],
        _unique("build"),
        "Running",
        BUILD_POD_LABELS,
        uid=str(uuid.uuid4()),
        node=node,
    )


async def _budget(probe: Probe, node: str, namespace: str = MCO_NAMESPACES[0]) -> dict[str, Any]:
    """A budget as the shield makes one, on a build pod of ``node``, in ``namespace``."""
    pod = await _build_pod(probe, node)
    pod = dataclasses.replace(pod, namespace=namespace)
    return Want(pod, Role.BUILD_POD, _unique("budget")).manifest()


async def _create_budget(probe: Probe, body: dict[str, Any]) -> tuple[Answer, str]:
    create = probe.agent.policy.create_namespaced_pod_disruption_budget
    namespace = body["metadata"]["namespace"]
    return _made(await _answer(_call(create, namespace, body, dry_run="All")))


async def own_budget(probe: Probe) -> tuple[Answer, str]:
    return await _create_budget(probe, await _budget(probe, probe.who.node))


async def other_nodes_budget(probe: Probe) -> tuple[Answer, str]:
    if probe.who.other is None:
        return None, "no other Node"
    return await _create_budget(probe, await _budget(probe, probe.who.other))


async def mco_builder_budget(probe: Probe) -> tuple[Answer, str]:
    """Its own Node's budget, but selecting MCO's machine-os-builder (a pool could stall)."""
    body = await _budget(probe, probe.who.node)
    body["spec"]["selector"] = {"matchLabels": {"k8s-app": "machine-os-builder"}}
    return await _create_budget(probe, body)


async def budget_labelled_for_other(probe: Probe) -> tuple[Answer, str]:
    if probe.who.other is None:
        return None, "no other Node"
    body = await _budget(probe, probe.who.node)
    body["metadata"]["labels"][NODE_KEY] = node_label_value(probe.who.other)
    return await _create_budget(probe, body)


async def budget_elsewhere(probe: Probe) -> tuple[Answer, str]:
    return await _create_budget(probe, await _budget(probe, probe.who.node, EVENTS_NAMESPACE))


async def _existing_budget(probe: Probe, of_own: bool = True) -> str | None:
    """A budget a shield keeps for the agent's own Node, or for any other Node (whichever
    has one: the other Node the preflight writes to may have no build pod), if any (the
    admin's read)."""
    own = node_label_value(probe.who.node)
    found = await _call(
        probe.admin.policy.list_namespaced_pod_disruption_budget,
        MCO_NAMESPACES[0],
        label_selector=f"{NODE_KEY}={own}" if of_own else f"{NODE_KEY},{NODE_KEY}!={own}",
    )
    items = found.get("items") or ()
    return str(items[0]["metadata"]["name"]) if items else None


def _delete_budget(of_own: bool) -> Request:
    async def make(probe: Probe) -> tuple[Answer, str]:
        name = await _existing_budget(probe, of_own)
        if name is None:
            return None, f"no budget kept for {probe.who.node if of_own else 'another Node'}"
        delete = probe.agent.policy.delete_namespaced_pod_disruption_budget
        return _made(await _answer(_call(delete, name, MCO_NAMESPACES[0], dry_run="All")))

    return make


async def change_budget(probe: Probe) -> tuple[Answer, str]:
    """The authorizer answers before the object is looked up: any name will do."""
    name = await _existing_budget(probe) or _unique("budget")
    patch = probe.agent.policy.patch_namespaced_pod_disruption_budget
    body = {"spec": {"minAvailable": 0}}
    return _made(
        await _answer(
            _call(patch, name, MCO_NAMESPACES[0], body, dry_run="All", _content_type=MERGE_PATCH)
        )
    )


def _event(
    node: str, namespace: str = EVENTS_NAMESPACE, component: str = "drain-guard"
) -> dict[str, Any]:
    """An Event about ``node`` as the agent's recorder writes one."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": _unique("event"), "namespace": namespace},
        "involvedObject": {"kind": "Node", "name": node, "apiVersion": "v1"},
        "reason": "DrainHeld",
        "message": "drain-guard preflight (dry run)",
        "type": "Normal",
        "source": {"component": component, "host": node},
        "reportingComponent": component,
        "reportingInstance": f"{component}-{node}",
    }


def _pool_event(
    probe: Probe,
    related: str | None,
    reason: str = protocol.POOL_ROLLOUT_HELD,
    kind: str = protocol.POOL_KIND,
) -> dict[str, Any]:
    body = _event(probe.who.node)
    body["involvedObject"] = {
        "apiVersion": protocol.POOL_API_VERSION,
        "kind": kind,
        "name": probe.pool,
    }
    body["reason"] = reason
    if related:
        body["related"] = {"apiVersion": "v1", "kind": "Node", "name": related}
    return body


def _create_event(build: Callable[[Probe], dict[str, Any] | None]) -> Request:
    async def make(probe: Probe) -> tuple[Answer, str]:
        body = build(probe)
        if body is None:
            return None, "no other Node"
        create = probe.agent.core.create_namespaced_event
        namespace = body["metadata"]["namespace"]
        return _made(await _answer(_call(create, namespace, body, dry_run="All")))

    return make


#: The webhook's account, named after the agent's (openshift-4.15: ``drain-guard-webhook``).
WEBHOOK_ACCOUNT = "{agent}-webhook"


def _token(namespace: str | None, account: str | None) -> Request:
    """A TokenRequest for ``account`` (None: the agent's own; ``{agent}`` in it: the agent's
    name), in ``namespace`` (None: the agent's)."""

    async def make(probe: Probe) -> tuple[Answer, str]:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"audiences": []},
        }
        create = probe.agent.core.create_namespaced_service_account_token
        return _made(
            await _answer(
                _call(
                    create,
                    (account or "{agent}").format(agent=probe.who.account),
                    namespace or probe.who.namespace,
                    body,
                    dry_run="All",
                )
            )
        )

    return make


async def read_pool(probe: Probe) -> tuple[Answer, str]:
    get = probe.agent.custom.get_cluster_custom_object
    return _made(await _answer(_call(get, MCO_GROUP, "v1", "machineconfigpools", probe.pool)))


async def list_pools(probe: Probe) -> tuple[Answer, str]:
    list_all = probe.agent.custom.list_cluster_custom_object
    return _made(await _answer(_call(list_all, MCO_GROUP, "v1", "machineconfigpools")))


async def own_secrets(probe: Probe) -> tuple[Answer, str]:
    return _made(await _answer(_call(probe.agent.core.list_namespaced_secret, probe.who.namespace)))


async def mco_secret(probe: Probe) -> tuple[Answer, str]:
    """The authorizer answers before the Secret is looked up: any name will do."""
    read = probe.agent.core.read_namespaced_secret
    return _made(await _answer(_call(read, _unique("secret"), MCO_NAMESPACES[0])))


async def all_secrets(probe: Probe) -> tuple[Answer, str]:
    return _made(await _answer(_call(probe.agent.core.list_secret_for_all_namespaces)))


async def create_csr(probe: Probe) -> tuple[Answer, str]:
    from kubernetes_asyncio.client.api.certificates_v1_api import CertificatesV1Api

    body = {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": _unique("csr")},
        "spec": {
            "request": "",
            "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
            "usages": ["client auth"],
        },
    }
    create = CertificatesV1Api(probe.agent.api).create_certificate_signing_request
    return _made(await _answer(_call(create, body, dry_run="All")))


async def create_pod(probe: Probe) -> tuple[Answer, str]:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": _unique("pod")},
        "spec": {"nodeName": probe.who.node, "containers": [{"name": "c", "image": "x"}]},
    }
    create = probe.agent.core.create_namespaced_pod
    return _made(await _answer(_call(create, probe.who.namespace, body, dry_run="All")))


async def evict(probe: Probe) -> tuple[Answer, str]:
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": probe.who.pod, "namespace": probe.who.namespace},
    }
    create = probe.agent.core.create_namespaced_pod_eviction
    return _made(
        await _answer(_call(create, probe.who.pod, probe.who.namespace, body, dry_run="All"))
    )


def _other_event(probe: Probe) -> dict[str, Any] | None:
    return None if probe.who.other is None else _event(probe.who.other)


def _pool_event_for_other(probe: Probe) -> dict[str, Any] | None:
    return None if probe.who.other is None else _pool_event(probe, probe.who.other)


#: docs/rights.md's request column, word for word, and how the preflight makes each.
REQUESTS: dict[str, Request] = {
    "get its own Node": read_own_node,
    "list the pods on its own Node in openshift-machine-config-operator": list_own_pods,
    "list the pods in kube-system": list_pods_elsewhere,
    "hold its own Node's drain (the agent's JSON Patch)": hold_own_node,
    "release its own Node's hold (the agent's JSON Patch)": release_own_node,
    "hold another Node's drain": hold_other_node,
    "set desiredDrain to lastAppliedDrain on its own Node (a fake completion)": rewrite_drain,
    "add another annotation to its own Node": _annotate("example.com/drain-guard-preflight", "x"),
    "write a hold request on its own Node (drain-guard.io/hold-request)": _annotate(
        protocol.HOLD_REQUEST, "2099-01-01T00:00:00Z;drain-guard preflight"
    ),
    "remove drain-guard.io/released-by with the released marker (the agent's cleanup)": (
        remove_released_by
    ),
    "write drain-guard.io/released-by on its own Node (in its own name)": write_released_by,
    "cordon its own Node (spec.unschedulable)": cordon,
    "taint its own Node": taint,
    "label its own Node": label,
    "taint another Node": taint_other,
    "write its own Node's status": node_status,
    "delete its own Node": delete_node,
    "create a Node": create_node,
    "create a budget on its own Node's build pod": own_budget,
    "delete a budget on its own Node's build pod": _delete_budget(of_own=True),
    "create a budget on another Node's build pod": other_nodes_budget,
    "delete a budget on another Node's build pod": _delete_budget(of_own=False),
    "change a budget": change_budget,
    "create a budget in default": budget_elsewhere,
    "create a budget selecting MCO's machine-os-builder": mco_builder_budget,
    "create a budget labelled for another Node": budget_labelled_for_other,
    "create an Event about its own Node in default": _create_event(lambda p: _event(p.who.node)),
    "create an Event about its own Node in default with a message of 1 MiB": _create_event(
        lambda p: _event(p.who.node) | {"message": "x" * (1024 * 1024)}
    ),
    "create an Event about its own Node in default with a message of 4 KiB": _create_event(
        lambda p: _event(p.who.node) | {"message": "x" * (4 * 1024)}
    ),
    "create an Event about another Node in default": _create_event(_other_event),
    "create an Event about its own Node as the kubelet": _create_event(
        lambda p: _event(p.who.node, component="kubelet")
    ),
    "create an Event in its own namespace": _create_event(
        lambda p: _event(p.who.node, p.who.namespace)
    ),
    "create a PoolRolloutHeld Event about a MachineConfigPool related to its own Node": (
        _create_event(lambda p: _pool_event(p, p.who.node))
    ),
    "create a PoolRolloutHeld Event about a MachineConfigPool related to another Node": (
        _create_event(_pool_event_for_other)
    ),
    "create a PoolRolloutHeld Event about a MachineConfigPool related to nothing": (
        _create_event(lambda p: _pool_event(p, None))
    ),
    "create an Event of another reason about a MachineConfigPool": _create_event(
        lambda p: _pool_event(p, p.who.node, reason="Degraded")
    ),
    "create an Event about a MachineConfig": _create_event(
        lambda p: _pool_event(p, p.who.node, kind="MachineConfig")
    ),
    "get a MachineConfigPool": read_pool,
    "list the MachineConfigPools": list_pools,
    "create a token for its own ServiceAccount": _token(None, None),
    "create a token for kube-system's default ServiceAccount": _token("kube-system", "default"),
    "create a token for its namespace's default ServiceAccount": _token(None, "default"),
    "list the Secrets of its own namespace": own_secrets,
    "list every Secret": all_secrets,
    "read a Secret in openshift-machine-config-operator": mco_secret,
    "create a token for the webhook's ServiceAccount": _token(None, WEBHOOK_ACCOUNT),
    "hold its own Node's drain with a token bound to no pod": hold_unbound,
    "create a CertificateSigningRequest": create_csr,
    "create a pod in its own namespace": create_pod,
    "evict its own pod": evict,
}

#: The rows the preflight does not make, and why: it cannot stop the webhook.
UNMADE: dict[str, str] = {
    "update its own Node's hold while the webhook is down": "the webhook would have to be down",
    "release its own Node's hold while the webhook is down": "the webhook would have to be down",
}
