"""``drain-guard run | shield | webhook | node-proxy | copy-booted-origin | status | hold | release
| demo``.

``run`` is the agent; ``shield`` the central shield (docs/shield.md), where the agents may
keep no budgets; ``webhook`` the admission webhook that confines the agents on OpenShift
4.15/4.16 (drain_guard.webhook); ``node-proxy`` holds the node's credential for a systemd agent
and passes on only that agent's requests about its own Node (drain_guard.nodeproxy).
``status``, ``hold`` and ``release`` are operator tools that talk to the API with the caller's
own credentials (``--kubeconfig`` / ``KUBECONFIG`` / in-cluster), so RBAC decides who may hold
or release. ``demo`` is imported lazily: the agent never loads the simulator.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from drain_guard import __version__, guards, protocol
from drain_guard.config.agent import add_run_arguments, default_max_hold, settings_from
from drain_guard.config.shield import add_shield_arguments, shield_settings_from
from drain_guard.config.values import SettingsError, parse_duration
from drain_guard.config.webhook import add_webhook_arguments
from drain_guard.decide import NothingHeldError, force_release, stale_keys
from drain_guard.health import format_duration
from drain_guard.holdrequest import (
    HoldRequestStatus,
    printable,
    releases_when,
    split_hold_detail,
    stalled,
)
from drain_guard.status import AgentStatus

if TYPE_CHECKING:
    from drain_guard.kube.client import Kube
    from drain_guard.nodes import NodeObj

# The API client (aiohttp, kubernetes_asyncio) is imported by the commands that talk to the
# API, when they run.

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
DEFAULT_ENDPOINT = "http://127.0.0.1:9797"
ENDPOINT_TIMEOUT = 2.0
#: ``drain-guard node-proxy``'s defaults: the systemd unit's socket, the kubelet's kubeconfig.
NODE_PROXY_SOCKET = "/run/drain-guard-node-proxy/api.sock"
KUBELET_KUBECONFIG = "/var/lib/kubelet/kubeconfig"


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line on stderr (exit 2), no usage dump.

    The agent's log is what an operator sees of a bad manifest; one line reads best there.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A negative duration (--max-hold -5m) is a value, refused as such, not a missing one.
        self._negative_number_matcher = re.compile(r"^-\d[\w.]*$")

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="drain-guard",
        description="Hold OpenShift MCO drain requests while a drain would be harmful or useless.",
    )
    parser.add_argument("--version", action="version", version=f"drain-guard {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    run = sub.add_parser("run", help="run the agent for one node")
    add_run_arguments(run)

    shield = sub.add_parser(
        "shield", help="keep the build pods' PodDisruptionBudgets of every node (central shield)"
    )
    add_shield_arguments(shield)

    proxy = sub.add_parser(
        "node-proxy",
        help="serve a local agent its own Node's requests with the node's credential (systemd)",
    )
    _add_node_proxy_arguments(proxy)

    origin = sub.add_parser(
        "copy-booted-origin",
        help="copy the booted deployment's origin file alone, for an agent that sees no more",
    )
    origin.add_argument("--host-root", required=True, help="where the host's / is mounted")
    origin.add_argument(
        "--cmdline-file",
        default="/proc/cmdline",
        help="the kernel command line (default: %(default)s)",
    )
    origin.add_argument(
        "--to", required=True, help="the directory to copy into (the agent's --host-root)"
    )

    webhook = sub.add_parser(
        "webhook",
        help="serve the admission webhook that confines drain-guard (OpenShift 4.15/4.16)",
    )
    add_webhook_arguments(webhook)

    status = sub.add_parser("status", help="show a node's hold state")
    _add_client_arguments(status)
    status.add_argument(
        "--node-name", help="node to show (default: NODE_NAME, else every node with a hold)"
    )
    status.add_argument("-o", "--output", choices=("text", "json"), default="text")
    status.add_argument(
        "--endpoint",
        help=f"the agent's HTTP endpoint to include (default: try {DEFAULT_ENDPOINT})",
    )
    _add_max_hold_argument(status)

    hold = sub.add_parser(
        "hold",
        help="hold the drains of a node for a while (writes drain-guard.io/hold-request;"
        " release withdraws it)",
    )
    _add_client_arguments(hold)
    hold.add_argument("--node-name", required=True, help="node whose drains to hold")
    hold.add_argument(
        "--for", dest="duration", type=_duration, required=True, help="how long, e.g. 30m, 2h"
    )
    hold.add_argument(
        "--reason", required=True, help="why, one line (shown in drain-guard status and Events)"
    )
    _add_max_hold_argument(hold)

    release = sub.add_parser(
        "release",
        help="release a held drain now (outcome manual), or remove stale drain-guard keys",
    )
    _add_client_arguments(release)
    target = release.add_mutually_exclusive_group(required=True)
    target.add_argument("--node-name", help="node whose hold to release")
    target.add_argument("--all", action="store_true", help="release every node's hold")

    # Listed for --help only: main() hands ``demo ...`` to the demo's own parser, so that
    # building this parser, as ``run`` does, never imports the simulator.
    sub.add_parser("demo", help="run the seed scenario in a simulated cluster (see demo --help)")
    return parser


def _add_max_hold_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-hold",
        type=_duration,
        default=os.environ.get("DRAIN_GUARD_MAX_HOLD") or default_max_hold(),
        help="the agents' --max-hold, to say when a hold ends (default: DRAIN_GUARD_MAX_HOLD,"
        " as in the agent's pod, else the agent's default)",
    )


def _duration(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except SettingsError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_node_proxy_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME"),
        help="the Node whose agent this serves (default: NODE_NAME)",
    )
    parser.add_argument(
        "--kubeconfig",
        default=KUBELET_KUBECONFIG,
        help=f"the node's own kubeconfig, system:node:NAME (default: {KUBELET_KUBECONFIG})",
    )
    parser.add_argument(
        "--socket",
        default=NODE_PROXY_SOCKET,
        help=f"the Unix socket to serve the agent on (default: {NODE_PROXY_SOCKET})",
    )
    parser.add_argument(
        "--agent-user",
        default="drain-guard",
        help="the one user (name or UID) whose requests are served (default: drain-guard)",
    )


def _add_client_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        default=os.environ.get("KUBECONFIG"),
        help="kubeconfig file (default: KUBECONFIG, else in-cluster, else ~/.kube/config)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["demo"]:
        return _demo(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "run":
        try:
            settings = settings_from(args, os.environ)
        except SettingsError as exc:
            print(f"drain-guard run: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if not os.path.isdir(settings.host_root):
            print(
                f"drain-guard run: error: --host-root {settings.host_root}: no such directory"
                " (where the host's / is mounted)",
                file=sys.stderr,
            )
            return EXIT_USAGE
        from drain_guard.runner import run_agent  # lazily: status/release need none of it

        return run_agent(settings)
    if args.command == "shield":
        try:
            shield_settings = shield_settings_from(args, os.environ)
        except SettingsError as exc:
            print(f"drain-guard shield: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        from drain_guard.central import run_shield

        return run_shield(shield_settings)
    if args.command == "webhook":
        from drain_guard import webhook

        return webhook.main(args)
    if args.command == "node-proxy":
        from drain_guard.nodeproxy import main as nodeproxy_main

        return nodeproxy_main(args)
    if args.command == "copy-booted-origin":
        return _copy_booted_origin(args)
    if args.command == "status":
        return asyncio.run(_status(args))
    if args.command == "hold":
        return asyncio.run(_hold(args))
    assert args.command == "release", args.command  # "demo" never reaches the parser
    return asyncio.run(_release(args))


def _copy_booted_origin(args: argparse.Namespace) -> int:
    """One line either way, and exit 0 even when the host's booted image cannot be read: the
    agent then reads the same failure from the empty copy and its no-op guard abstains (a
    failed init container would keep the agent, and its build-pod guard, from starting)."""
    from pathlib import Path

    from drain_guard.host import HostError, copy_booted_origin

    prog = "drain-guard copy-booted-origin"
    target = Path(args.to)
    if not target.is_dir():
        print(f"{prog}: error: --to {target} is not a directory", file=sys.stderr)
        return EXIT_USAGE
    try:
        copied = copy_booted_origin(Path(args.host_root), Path(args.cmdline_file), target)
    except HostError as exc:
        print(f"{prog}: nothing copied, the booted image is unknown: {exc}", file=sys.stderr)
        return EXIT_OK
    except OSError as exc:
        print(f"{prog}: nothing copied: {exc.strerror or exc}: {exc.filename}", file=sys.stderr)
        return EXIT_OK
    print(f"{prog}: copied {copied} to {target}")
    return EXIT_OK


def _demo(argv: Sequence[str]) -> int:
    """Hand over to the simulator's own command: a process boundary, so the agent never
    imports the simulator (a separate distribution, absent from the image)."""
    if importlib.util.find_spec("drain_guard_sim") is None:
        print(
            "drain-guard demo: error: the simulated cluster is not installed"
            " (pip install ./simulator from a drain-guard checkout, or run make demo)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    # The demo's agents hold as long as the agent's default, scaled like every MCO duration:
    # passed in (before the user's flags, which win), so there is no second copy of it.
    max_hold = f"{default_max_hold().total_seconds():g}"
    demo = [sys.executable, "-m", "drain_guard_sim", "demo", "--agent-max-hold", max_hold]
    os.execv(sys.executable, [*demo, *argv])


# --- status -----------------------------------------------------------------------------


def node_state(
    node: NodeObj, now: datetime | None = None, max_hold: timedelta | None = None
) -> dict[str, Any]:
    """What ``status`` shows of one Node, from its annotations alone, at ``now``; a hold ends
    by its ``held-since`` plus ``max_hold`` (the agents' ``--max-hold``).

    "Held" means exactly what ``release`` can release (:func:`force_release`), so the
    two commands never disagree; a ``hold-`` value drain-guard did not write is "foreign".
    """
    now = now or datetime.now(UTC)
    max_hold = max_hold or default_max_hold()
    ann = node.annotations
    text = ann.get(protocol.HOLD_REQUEST)
    request = None if text is None else HoldRequestStatus.read(text, now)
    state: dict[str, Any] = {
        "node": node.name,
        "desiredDrain": ann.get(protocol.DESIRED_DRAIN),
        "lastAppliedDrain": ann.get(protocol.LAST_APPLIED_DRAIN),
        "unschedulable": node.unschedulable,
        "held": False,
        "holdRequest": None if request is None else request.to_json(),
        "staleKeys": list(stale_keys(ann)),
        "pool": protocol.pool_of(ann),
        "now": protocol.format_rfc3339(now),
        "maxHoldSeconds": max_hold.total_seconds(),
    }
    try:
        release = force_release(ann, node.resource_version, protocol.Outcome.MANUAL)
    except NothingHeldError as exc:
        if protocol.parse_drain_request(state["desiredDrain"]).verb is protocol.Verb.HOLD:
            state["foreign"] = str(exc)
        return state
    state.update(held=True, heldDrain=release.original)
    try:
        record = protocol.read_hold(ann)
    except protocol.MalformedHold as exc:
        state["error"] = f"malformed hold annotations: {exc}"
        return state
    if record is not None:
        ends_by = record.since + max_hold
        details = split_hold_detail(record.detail)
        reasons = [(str(r), details.get(str(r), "")) for r in record.reasons]
        state.update(
            reasons=[str(r) for r in record.reasons],
            heldSince=protocol.format_rfc3339(record.since),
            endsBy=protocol.format_rfc3339(ends_by),
            detail=record.detail,
            releasesWhen=list(releases_when(reasons, request)),
        )
        if request is not None:
            state["holdRequest"] = request.to_json(ends_by)
    return state


async def _fetch_endpoint(url: str) -> dict[str, Any]:
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=ENDPOINT_TIMEOUT)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(url.rstrip("/") + "/status") as resp,
    ):
        resp.raise_for_status()
        body: dict[str, Any] = await resp.json()
        return body


async def _status(args: argparse.Namespace) -> int:
    from drain_guard.kube.call import KubeError

    node_name = args.node_name or os.environ.get("NODE_NAME")
    kube = await _connect(args.kubeconfig, "status")
    if kube is None:
        return EXIT_USAGE
    try:
        if node_name:
            node = await kube.get_node(node_name)
            if node is None:
                print(f"drain-guard status: error: node {node_name} not found", file=sys.stderr)
                return EXIT_FAILURE
            nodes = [node]
        else:
            nodes = [n for n in await kube.list_nodes() if _listed(n)]
    except KubeError as exc:
        print(f"drain-guard status: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        await kube.close()
    now = datetime.now(UTC)
    states = [node_state(n, now, args.max_hold) for n in nodes]
    if node_name:
        await _add_endpoint(states[0], args.endpoint)
    if args.output == "json":
        print(json.dumps(states[0] if node_name else states, indent=2, sort_keys=True))
    else:
        if not states:
            print("no node has a hold, a hold request, a foreign hold value or stale keys")
        for state in states:
            print(render_text(state))
    return EXIT_OK


async def _add_endpoint(state: dict[str, Any], endpoint: str | None) -> None:
    """Add the agent's own /status when it answers (always tried with ``--endpoint``)."""
    import aiohttp

    url = endpoint or DEFAULT_ENDPOINT
    try:
        agent_status = await _fetch_endpoint(url)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        if endpoint is not None:
            state["agentError"] = f"{url}: {exc}"
        return
    # The endpoint may belong to another node's agent: the default one is then left out,
    # an explicit one is shown with a warning.
    other = agent_status.get("node")
    if other != state["node"]:
        if endpoint is None:
            return
        state["agentWarning"] = f"{url} is the agent of node {other}, not of {state['node']}"
        print(f"drain-guard status: warning: {state['agentWarning']}", file=sys.stderr)
    state["agent"] = agent_status


async def _connect(kubeconfig: str | None, command: str) -> Kube | None:
    from drain_guard.kube.client import Kube
    from drain_guard.kubeclient import ConfigException

    try:
        return await Kube.connect(kubeconfig)
    except (ConfigException, OSError, ValueError) as exc:
        print(
            f"drain-guard {command}: error: cannot load Kubernetes config: {exc}", file=sys.stderr
        )
        return None


def render_text(state: Mapping[str, Any]) -> str:
    """The text view of :func:`node_state`; every annotation's text with control characters
    escaped (an annotation is anyone's input)."""
    now = datetime.fromisoformat(state["now"])
    max_hold = timedelta(seconds=state["maxHoldSeconds"])
    lines = [f"node {state['node']}:"]
    if state.get("error"):
        lines.append(f"  {printable(state['error'])}")
    ends_by = None
    if state["held"]:
        held = printable(state["heldDrain"])
        if "reasons" in state:
            since = datetime.fromisoformat(state["heldSince"])
            ends_by = datetime.fromisoformat(state["endsBy"])
            lines.append(
                f"  HELD since {state['heldSince']} ({format_duration(now - since)} ago)"
                f" for {', '.join(state['reasons'])}: {held}"
            )
            left = format_duration(ends_by - now)
            lines.append(
                f"  ends by {state['endsBy']} (in {left}; --max-hold"
                f" {format_duration(max_hold)}) unless released earlier"
            )
        else:
            lines.append(f"  HELD: {held}")
        if state.get("detail"):
            lines.append(f"  detail: {printable(state['detail'])}")
        for condition in state.get("releasesWhen", ()):
            lines.append(f"  released {condition}")
        lines.append(f"  released now by: drain-guard release --node-name {state['node']}")
        if state.get("pool"):
            lines.append(f"  {stalled(printable(state['pool']), state['node'])}")
    elif state.get("foreign"):
        lines.append(f"  no drain-guard hold: {printable(state['foreign'])}")
    else:
        lines.append("  no hold")
    if state["staleKeys"]:
        lines.append(
            f"  stale keys: {', '.join(state['staleKeys'])}"
            " (left by a hold that ended; drain-guard release removes them)"
        )
    lines.append(f"  desiredDrain: {printable(state['desiredDrain'] or '-')}")
    lines.append(f"  lastAppliedDrain: {printable(state['lastAppliedDrain'] or '-')}")
    if state["unschedulable"]:
        lines.append("  node is cordoned (SchedulingDisabled)")
    if state.get("holdRequest"):
        request = HoldRequestStatus.from_json(state["holdRequest"])
        lines.append(f"  hold request: {request.to_text(now, ends_by, max_hold)}")
    if "agentWarning" in state:
        lines.append(f"  WARNING: {printable(state['agentWarning'])}")
    if "agent" in state:
        lines.extend(f"  agent: {line}" for line in _agent_text(state["agent"]).splitlines())
    if "agentError" in state:
        lines.append(f"  agent endpoint unreachable: {printable(state['agentError'])}")
    return "\n".join(lines)


def _agent_text(agent: dict[str, Any]) -> str:
    """The agent's /status as its own text view (``?format=text``), not a line of JSON."""
    try:
        return AgentStatus.from_json(agent).to_text()
    except (KeyError, TypeError, ValueError):  # starting, or another version's document
        return printable(json.dumps(agent, sort_keys=True))


def _listed(node: NodeObj) -> bool:
    """Whether ``status`` without ``--node-name`` lists the node: something to look at."""
    state = node_state(node)
    return bool(state["held"] or state["staleKeys"] or "foreign" in state or state["holdRequest"])


def _releasable(annotations: Mapping[str, str]) -> bool:
    """What ``release --all`` acts on: a drain-guard hold, a hold request, or stale
    drain-guard keys."""
    try:
        force_release(annotations, "", protocol.Outcome.MANUAL)
    except NothingHeldError:
        return bool(stale_keys(annotations)) or protocol.HOLD_REQUEST in annotations
    return True


# --- hold -------------------------------------------------------------------------------


async def _hold(args: argparse.Namespace) -> int:
    """Write a valid ``drain-guard.io/hold-request`` (replacing any): the agent holds the
    node's drain requests until it expires, each at most ``--max-hold``."""
    from drain_guard.kube.call import KubeError
    from drain_guard.kube.client import Applied

    if args.duration <= timedelta(0):
        print("drain-guard hold: error: --for must be above 0", file=sys.stderr)
        return EXIT_USAGE
    until = datetime.now(UTC).replace(microsecond=0) + args.duration
    try:
        value = guards.format_hold_request(until, args.reason)
    except ValueError as exc:
        print(f"drain-guard hold: error: --reason: {exc}", file=sys.stderr)
        return EXIT_USAGE
    kube = await _connect(args.kubeconfig, "hold")
    if kube is None:
        return EXIT_USAGE
    name = args.node_name
    try:
        node = await kube.get_node(name)
        if node is None:
            print(f"drain-guard hold: error: node {name} not found", file=sys.stderr)
            return EXIT_FAILURE
        path = protocol.annotation_path(protocol.HOLD_REQUEST)
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": node.resource_version},
            {"op": "add", "path": path, "value": value},
        ]
        if not node.annotations:  # JSON Patch cannot add a key to a missing object
            ops[1] = {"op": "add", "path": "/metadata/annotations", "value": {}}
            ops.append({"op": "add", "path": path, "value": value})
        if not isinstance(await kube.patch_node_json(name, ops), Applied):
            print(f"drain-guard hold: error: node {name} changed; try again", file=sys.stderr)
            return EXIT_FAILURE
    except KubeError as exc:
        print(f"drain-guard hold: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        await kube.close()
    previous = node.annotations.get(protocol.HOLD_REQUEST)
    print(
        f"node {name}: drains held until {protocol.format_rfc3339(until)}: {value.split(';', 1)[1]}"
    )
    if previous is not None:
        print(f"node {name}: replaced the hold request {printable(repr(previous))}")
    if args.duration > args.max_hold:
        print(
            f"node {name}: note: a held drain is released after --max-hold"
            f" {format_duration(args.max_hold)} even so (the MCD's drain timeout is 1h)"
        )
    print(f"withdraw it with: drain-guard release --node-name {name}")
    return EXIT_OK


# --- release ----------------------------------------------------------------------------


async def _release(args: argparse.Namespace) -> int:
    from drain_guard.kube.call import KubeError

    kube = await _connect(args.kubeconfig, "release")
    if kube is None:
        return EXIT_USAGE
    try:
        if args.all:
            nodes = [n for n in await kube.list_nodes() if _releasable(n.annotations)]
            if not nodes:
                print("nothing to release: no node has a hold or stale keys")
                return EXIT_OK
            results = [await release_node(kube, n.name) for n in nodes]
            return EXIT_OK if all(results) else EXIT_FAILURE
        return EXIT_OK if await release_node(kube, args.node_name) else EXIT_FAILURE
    except KubeError as exc:
        print(f"drain-guard release: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        await kube.close()


RELEASE_ATTEMPTS = 5


async def release_node(kube: Kube, name: str) -> bool:
    """Release ``name``'s hold by compare-and-swap, re-reading on conflict; True on success.

    The patch also records the request in ``drain-guard.io/released``: the agent does not
    hold that request again, and counts the release as ``manual``.
    """
    from drain_guard.kube.client import Applied

    for _ in range(RELEASE_ATTEMPTS):
        node = await kube.get_node(name)
        if node is None:
            print(f"drain-guard release: error: node {name} not found", file=sys.stderr)
            return False
        # A hold request would hold the next drain request: release withdraws it too.
        request = node.annotations.get(protocol.HOLD_REQUEST)
        withdraw = [] if request is None else _withdraw_ops(request)
        try:
            release = force_release(
                node.annotations, node.resource_version, protocol.Outcome.MANUAL
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
        result = await kube.patch_node_json(name, [*release.patch, *withdraw])
        if isinstance(result, Applied):
            print(f"node {name}: released {release.original} (outcome manual)")
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
