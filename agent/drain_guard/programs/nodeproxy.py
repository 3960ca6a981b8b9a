"""``drain-guard node-proxy``: the node's credential, kept out of the agent (systemd install).

A node identity (``system:node:<name>``) can do far more than hold and release its Node: read the
secrets of every pod bound to the node, mint their service-account tokens, ask for new client
certificates. So the agent never holds it. This small service, root because the kubelet's key is
0600 root, holds the kubelet's kubeconfig and passes on, from a Unix socket, the requests of one
local user (the agent's, checked by the socket's peer credentials on each request) that
:func:`drain_guard.confine.nodeaccess.decide` allows: the agent's reads, its Node's hold and
release, its Events. Anything else is answered 403 and never sent; only the headers the API needs
are passed on (never an ``Authorization`` or ``Impersonate-*`` of the caller's). The client reads
the kubelet's kubeconfig again when the API server refuses it (401), so the kubelet's rotation needs
no restart (drain_guard.kube.ApiClient). docs/install.md, section 7.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pwd
import socket
import struct
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import parse_qsl

from aiohttp import ClientError, web

from drain_guard.config.values import LogFormat
from drain_guard.confine import nodeaccess
from drain_guard.core.exitcodes import EXIT_USAGE
from drain_guard.kube.call import REQUEST_TIMEOUT, describe
from drain_guard.kube.credentials import ApiClient, load_api_client
from drain_guard.runtime.lifecycle import Program, Running, run_program
from drain_guard.runtime.logs import configure_logging
from drain_guard.settings.nodeproxy import NodeProxySettings

__all__ = ["NodeProxy", "main", "peer_uid"]

log = logging.getLogger(__name__)

#: The agent's requests are small: a JSON Patch, an Event.
MAX_BODY = 64 * 1024
#: Events created through the proxy, remembered for their aggregation (drain_guard.node.events
#: keeps 64 keys).
EVENTS_REMEMBERED = 256
#: A watch stays open up to its timeoutSeconds (the agent's: 30 minutes ±10 %) plus this slack;
#: one that gives none, or more than an hour, up to the hour kube-apiserver gives it at most.
WATCH_SLACK = 60
LONGEST_WATCH = 3600
PASSED_HEADERS = ("Accept", "Content-Type")
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def _watch_timeout(query: Mapping[str, str]) -> int:
    """How long a watch's upstream request may stay open: its own ``timeoutSeconds`` and some
    slack, at most an hour and the slack."""
    asked = query.get("timeoutSeconds", "")
    seconds = int(asked) if asked.isdigit() else LONGEST_WATCH
    return min(seconds, LONGEST_WATCH) + WATCH_SLACK


def _uid(user: str) -> int:
    if user.isdigit():
        return int(user)
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        raise ValueError(f"--agent-user {user}: no such user") from None


def peer_uid(request: web.Request) -> int | None:
    """The UID of the process at the other end of the request's Unix socket."""
    sock = request.transport.get_extra_info("socket") if request.transport else None
    if sock is None or sock.family != socket.AF_UNIX:
        return None
    _pid, uid, _gid = _PEERCRED.unpack(
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    )
    return int(uid)


def _status(code: int, reason: str, message: str) -> web.Response:
    """A Kubernetes Status, as the API server answers, so the agent reads it as one."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return web.json_response(body, status=code)


class NodeProxy:
    """The proxy's state: its upstream client, the one user it serves, its Events."""

    def __init__(self, api: ApiClient, node: str, agent_uid: int) -> None:
        self.api = api
        self.node = node
        self.agent_uid = agent_uid
        self.created_events: OrderedDict[str, None] = OrderedDict()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_route("*", "/{path:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        uid = peer_uid(request)
        if uid != self.agent_uid:
            log.warning("refused a request from UID %s (serving UID %s only)", uid, self.agent_uid)
            return _status(403, "Forbidden", f"drain-guard node-proxy: UID {uid} is not served")
        body = await request.read()
        # Decided on the path as sent, not aiohttp's decoding of it (nodeaccess: the API server
        # decodes it again); the query decoded once, as the API server does.
        path, _, raw_query = request.raw_path.partition("?")
        try:
            query = parse_qsl(raw_query, keep_blank_values=True, strict_parsing=True)
        except ValueError:
            verdict = nodeaccess.Verdict(False, "drain-guard node-proxy: a malformed query")
        else:
            content_type = request.headers.get("Content-Type", "").partition(";")[0].strip()
            verdict = nodeaccess.decide(
                request.method, path, query, content_type, body, self.node, self.created_events
            )
        if not verdict.allowed:
            log.warning("denied %s %r: %s", request.method, request.raw_path, verdict.message)
            return _status(403, "Forbidden", verdict.message)
        return await self._forward(request, verdict, body)

    async def _forward(
        self, request: web.Request, verdict: nodeaccess.Verdict, body: bytes
    ) -> web.StreamResponse:
        """Send the request as ``verdict`` rebuilt it (path and query), with the checked body
        and only the headers the API needs."""
        headers = {h: request.headers[h] for h in PASSED_HEADERS if h in request.headers}
        settings = await self.api.configuration.auth_settings()
        headers.update(
            {a["key"]: a["value"] for a in settings.values() if a["in"] == "header" and a["value"]}
        )
        document = json.loads(body) if body else None
        watch = dict(verdict.query).get("watch", "").lower() in ("true", "1")
        try:
            upstream = await self.api.request(
                request.method,
                f"{self.api.configuration.host}{verdict.path}",
                query_params=list(verdict.query),
                headers=headers,
                body=document,
                _preload_content=False,
                _request_timeout=_watch_timeout(request.query) if watch else REQUEST_TIMEOUT,
            )
        except (ClientError, TimeoutError) as exc:
            why = describe(exc, REQUEST_TIMEOUT)
            log.warning(
                "%s %s: the API server did not answer: %s", request.method, verdict.path, why
            )
            return _status(503, "ServiceUnavailable", f"drain-guard node-proxy: {why}")
        async with upstream:
            if request.method == "POST" and upstream.status == 201 and document:
                self._created(str(document["metadata"]["name"]))
            response = web.StreamResponse(status=upstream.status)
            response.content_type = upstream.content_type
            await response.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
            except (ClientError, TimeoutError) as exc:
                log.info(
                    "%s %s: the API server's answer ended: %s", request.method, verdict.path, exc
                )
            await response.write_eof()
            return response

    def _created(self, name: str) -> None:
        self.created_events[name] = None
        while len(self.created_events) > EVENTS_REMEMBERED:
            self.created_events.popitem(last=False)


def notify_ready() -> None:
    """Tell systemd (``Type=notify``) that the socket is served, so the agent starts after."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):  # an abstract socket
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        sock.connect(address)
        sock.sendall(b"READY=1")


async def serve(args: NodeProxySettings) -> int:
    prog = "drain-guard node-proxy"
    if not nodeaccess.is_node_name(args.node_name):
        log.error("%s: --node-name %r is not a Node's name (a DNS subdomain)", prog, args.node_name)
        return EXIT_USAGE
    try:
        agent_uid = _uid(args.agent_user)
    except ValueError as exc:
        log.error("%s: %s", prog, exc)
        return EXIT_USAGE
    path = Path(args.socket)

    async def serve_socket(api: ApiClient) -> web.AppRunner:
        proxy = NodeProxy(api, args.node_name, agent_uid)
        # A request whose agent went away is cancelled, and its upstream request with it: else
        # a watch stays open on the API server, and keeps the proxy from stopping, until the
        # server ends it (up to the watch's timeout; systemd killed the proxy first).
        runner = web.AppRunner(
            proxy.app(), access_log=None, handle_signals=False, handler_cancellation=True
        )
        await runner.setup()
        path.unlink(missing_ok=True)  # noqa: ASYNC240  (once, at start)
        try:
            await web.UnixSite(runner, str(path)).start()
            path.chmod(0o660)  # noqa: ASYNC240  (the agent's group, the unit's Group=, connects)
        except OSError:
            await runner.cleanup()
            raise
        return runner

    async def start(_: ApiClient) -> Running:
        log.info(
            "serving node %s to UID %d on %s with %s",
            args.node_name,
            agent_uid,
            path,
            args.kubeconfig,
        )
        notify_ready()
        return Running({})  # it serves until SIGTERM/SIGINT

    return await run_program(
        Program(
            connect=lambda: load_api_client(args.kubeconfig, identity="node"),
            serve=serve_socket,
            listener=f"--socket {path}",
            start=start,
            close=ApiClient.close,
        )
    )


def main(args: NodeProxySettings) -> int:
    configure_logging(LogFormat.TEXT, "INFO")
    return asyncio.run(serve(args))
