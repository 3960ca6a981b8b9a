"""The read-only HTTP endpoint of the agent and of the central shield: ``/healthz``,
``/readyz``, ``/status``, ``/metrics``.

API::

    app = make_app(source, metrics)   # any StatusSource: the controller, the central shield
    runner, port = await serve(app, parse_listen("127.0.0.1:0"))   # logs "listening on http://HOST:PORT"
    ...
    await runner.cleanup()

A process serves from its first second, before it has reached the API: it makes the app on a
``LateSource`` (alive, not ready: "waiting for the API") and hands it the controller once the
start-up checks have passed, so that an API outage at start does not fail the liveness probe.

Only GET and HEAD are routed; any other method gets 405 (nothing here changes anything).
``/metrics`` is prometheus_client's aiohttp handler on the agent's own registry, so it answers
in the text format or, when the scraper asks for it, OpenMetrics; never compressed.

The server shares the event loop with the hold protocol, so a flood of requests must not
starve it nor grow the agent past its memory limit. The handlers never await, so they already
run one at a time; what a flood grows is their rate (rendering ``/metrics`` takes a few
milliseconds of the loop). So at most ``RATE`` requests a second other than the probes are
served, in bursts of up to ``RATE``. The rest get 503 after ``RETRY_AFTER`` seconds, so
that each connection of a flood costs the loop one cheap answer a second, not thousands; at
most ``MAX_PENDING`` wait so, beyond them the 503 is immediate and closes the connection. A
connection idle or stuck in
a request for ``IDLE_TIMEOUT`` is closed, and malformed requests are logged at most once a
``BAD_REQUEST_LOG_INTERVAL``, on one line each.

Connections are capped (``drain_guard.runtime.connections``): a flood cannot take the
descriptors the agent needs for the API and the host's files, and at the cap a probe is
answered at the door (``drain_guard.runtime.door``), not queued behind the flood.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from drain_guard.config.values import Listen
from drain_guard.runtime.connections import BAD_REQUEST_LOG_INTERVAL, CappedSite
from drain_guard.runtime.door import RETRY_AFTER, Prober
from drain_guard.runtime.metrics import BaseMetrics

log = logging.getLogger(__name__)

#: Requests a second served, probes apart: scrapers and `drain-guard status` need a few a
#: minute; a flood beyond this costs the loop a 503 each, not a rendering.
RATE = 20.0
MAX_PENDING = 512
#: Seconds a connection may sit idle, or dribble a request in, before it is closed.
IDLE_TIMEOUT = 10.0
PROBES = frozenset({"/healthz", "/readyz"})
#: The requests waiting for their busy 503, by connection: the connection cap answers them.
REFUSALS = web.AppKey("refusals", dict[asyncio.BaseTransport, "asyncio.Future[None]"])
#: What a probe is answered, by path: the door answers probes at the cap (runtime/door.py).
PROBE: web.AppKey[Prober] = web.AppKey("probe")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Snapshot(Protocol):
    """What ``/status`` serves (``drain_guard.status.agent.AgentStatus`` for the agent)."""

    def to_json(self) -> dict[str, Any]: ...

    def to_text(self) -> str: ...


class StatusSource(Protocol):
    """What the server asks the controller (or the central shield)."""

    def status(self) -> Snapshot:
        """A snapshot of the process's view and decision."""
        ...

    def alive(self) -> bool:
        """Whether the control loop is running (not stuck, not crashed)."""
        ...

    def ready(self) -> tuple[bool, str]:
        """Whether the watches are synced and the API answered recently, and if not, why."""
        ...


class StartingSnapshot:
    """``/status`` before the process's parts exist."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def to_json(self) -> dict[str, Any]:
        return {"phase": "starting", "ready": False, "reason": self.reason}

    def to_text(self) -> str:
        return f"starting: {self.reason}\n"


class LateSource:
    """A :class:`StatusSource` whose ``target`` is set once the start-up checks have passed.
    Until then the process is alive (the kubelet must not restart it for an API outage) and
    not ready, for ``reason``."""

    def __init__(self, reason: str = "waiting for the API") -> None:
        self.reason = reason
        self.target: StatusSource | None = None

    def status(self) -> Snapshot:
        return StartingSnapshot(self.reason) if self.target is None else self.target.status()

    def alive(self) -> bool:
        return self.target is None or self.target.alive()

    def ready(self) -> tuple[bool, str]:
        return (False, self.reason) if self.target is None else self.target.ready()


class _Bucket:
    """A token bucket: ``rate`` a second, up to ``rate`` at once."""

    def __init__(self, rate: float, clock: Callable[[], float]) -> None:
        self.rate = rate
        self.clock = clock
        self.tokens = rate
        self.at = clock()

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(self.rate, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


def make_app(
    source: StatusSource, metrics: BaseMetrics, clock: Callable[[], float] = time.monotonic
) -> web.Application:
    """The aiohttp application; it keeps no state of its own."""

    def probe(path: str) -> tuple[int, str]:
        """A probe's status and text: the handlers' and, at the cap, the door's answer."""
        if path == "/healthz":
            return (200, "ok\n") if source.alive() else (503, "control loop not running\n")
        ok, reason = source.ready()
        return (200, "ok\n") if ok else (503, f"{reason or 'not ready'}\n")

    async def probed(request: web.Request) -> web.Response:
        status, text = probe(request.path)
        return web.Response(status=status, text=text)

    async def status(request: web.Request) -> web.Response:
        snapshot = source.status()
        fmt = request.query.get("format", "json")
        if fmt == "text":
            return web.Response(text=snapshot.to_text())
        if fmt != "json":
            raise web.HTTPBadRequest(text="format must be json or text\n")
        body = json.dumps(snapshot.to_json(), indent=2) + "\n"
        return web.Response(text=body, content_type="application/json")

    bucket = _Bucket(RATE, clock)
    pending = 0
    refusals: dict[asyncio.BaseTransport, asyncio.Future[None]] = {}

    @web.middleware
    async def bounded(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in PROBES:  # constant time, and the kubelet must always get through
            return await handler(request)
        nonlocal pending
        if bucket.take():
            return await handler(request)
        busy = web.Response(status=503, text="busy\n", headers={"Retry-After": str(RETRY_AFTER)})
        if pending >= MAX_PENDING:
            busy.force_close()
            return busy
        pending += 1
        # The connection cap may answer it sooner, to make room for a new connection.
        refused = asyncio.get_running_loop().create_future()
        transport = request.transport
        if transport is not None:
            refusals[transport] = refused
        try:
            async with asyncio.timeout(RETRY_AFTER):
                await refused
            busy.force_close()  # answered early: its connection makes room
        except TimeoutError:
            pass
        finally:
            pending -= 1
            if transport is not None:
                refusals.pop(transport, None)
        return busy

    app = web.Application(middlewares=[bounded])
    app[REFUSALS] = refusals
    app[PROBE] = probe
    app.router.add_get("/healthz", probed)
    app.router.add_get("/readyz", probed)
    app.router.add_get("/status", status)
    app.router.add_get("/metrics", make_aiohttp_handler(metrics.registry, disable_compression=True))
    return app


class _BadRequestLog(logging.Filter):
    """aiohttp logs each malformed request with a traceback: keep one line per interval."""

    def __init__(self, interval: float = BAD_REQUEST_LOG_INTERVAL) -> None:
        super().__init__()
        self.interval = interval
        self.next_at = 0.0
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        if now < self.next_at:
            self.dropped += 1
            return False
        self.next_at = now + self.interval
        exc = record.exc_info[1] if record.exc_info else None
        why = " ".join(str(exc).split()) if exc is not None else record.getMessage()
        more = f" ({self.dropped} more not logged)" if self.dropped else ""
        record.msg, record.args = "bad HTTP request: %s%s", (why, more)
        record.exc_info, record.exc_text = None, None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        self.dropped = 0
        return True


def _server_log() -> logging.Logger:
    logger = logging.getLogger(f"{__name__}.requests")
    if not logger.filters:
        logger.addFilter(_BadRequestLog())
    return logger


async def serve(app: web.Application, listen: Listen) -> tuple[web.AppRunner, int]:
    """Bind ``app`` on ``listen`` and return the runner and the port actually bound.

    Logs ``listening on http://HOST:PORT`` with the bound port in the structured field
    ``port`` (the simulator's harness reads the field to find an ephemeral port). The caller
    stops the server with ``await runner.cleanup()``.
    """
    runner = web.AppRunner(
        app, access_log=None, keepalive_timeout=IDLE_TIMEOUT, logger=_server_log()
    )
    await runner.setup()
    try:
        site = CappedSite(runner, listen, refusals=app[REFUSALS], probe=app[PROBE])
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = site.port
    log.info(
        "listening on http://%s",
        Listen(listen.host, int(bound)),
        extra={"fields": {"port": int(bound)}},
    )
    return runner, int(bound)
