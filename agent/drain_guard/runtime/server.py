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

Connections are what a flood spends of the agent's file descriptors: at most
``MAX_CONNECTIONS`` are open (probes included), so that a thousand connections cannot take the
descriptors the agent needs for the API and the host's files. At the cap the server stops
accepting and the excess waits in the kernel's queue (``BACKLOG``); while some wait, room is
made at a bounded rate (``TURNOVER``) from connections with no request in flight, or whose
request only waits for its busy 503 (answered at once then): a request being answered is
never cut, and a probe, queued behind at most ``BACKLOG`` connections, is accepted within
``BACKLOG * TURNOVER / MAX_CONNECTIONS`` seconds or so (issue 36; before, one connection more
closed the oldest, cutting requests in flight and once a probe). Should ``accept()`` fail
for want of descriptors anyway, it is logged at most once a ``BAD_REQUEST_LOG_INTERVAL``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import select
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, cast

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from drain_guard.config.values import Listen
from drain_guard.runtime.metrics import BaseMetrics

log = logging.getLogger(__name__)

#: Requests a second served, probes apart: scrapers and `drain-guard status` need a few a
#: minute; a flood beyond this costs the loop a 503 each, not a rendering.
RATE = 20.0
RETRY_AFTER = 1
MAX_PENDING = 512
#: Seconds a connection may sit idle, or dribble a request in, before it is closed.
IDLE_TIMEOUT = 10.0
#: Open connections at most, probes included: far below the 1,024 descriptors the agent is
#: given (systemd's LimitNOFILE, a container's default), beside its ~20 of its own.
MAX_CONNECTIONS = 128
#: Connections waiting to be accepted, in the kernel (no descriptor of the agent's): beyond
#: it the kernel drops them, and a client already sending on one is reset, its request lost.
BACKLOG = 1024
#: At the cap with connections waiting, one open this long with no request in flight may be
#: closed to make room: each of the cap's connections turns over at most this often.
TURNOVER = 0.25
#: How many ``TURNOVER`` periods a connection that has sent requests must have been quiet.
KEEP_ALIVE_QUIET = 4
#: How often, at the cap, the server looks whether a connection waits to be accepted.
TICK = 0.02
#: Seconds before accepting again after ``accept()`` failed (no descriptor left).
ACCEPT_RETRY = 1.0
BAD_REQUEST_LOG_INTERVAL = 60.0
PROBES = frozenset({"/healthz", "/readyz"})
#: The requests waiting for their busy 503, by connection: the connection cap answers them.
REFUSALS = web.AppKey("refusals", dict[asyncio.BaseTransport, "asyncio.Future[None]"])
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

    async def healthz(request: web.Request) -> web.Response:
        if source.alive():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="control loop not running\n")

    async def readyz(request: web.Request) -> web.Response:
        ok, reason = source.ready()
        if ok:
            return web.Response(text="ok\n")
        return web.Response(status=503, text=f"{reason or 'not ready'}\n")

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
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
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


class _Connection(asyncio.Protocol):
    """aiohttp's request handler for one connection, known to the :class:`_ConnectionCap`."""

    def __init__(self, inner: asyncio.Protocol, cap: _ConnectionCap) -> None:
        self.inner = inner
        self.cap = cap
        self.opened = cap.clock()
        self.heard = self.opened  # when its peer last sent anything
        self.spoke = False  # whether it has sent anything
        self.transport: asyncio.Transport | None = None

    def in_flight(self) -> bool:
        """Whether a request is being answered, or waits in line behind one. aiohttp keeps
        it in its handler's state; if that ever moves, every request counts as in flight
        (nothing is closed under one), which tests/observability/test_server.py catches."""
        return bool(
            getattr(self.inner, "_request_in_progress", True)
            or getattr(self.inner, "_messages", True)
        )

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a TCP server's: a stream
        self.cap.open[self] = None
        self.inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.cap.lost(self)
        self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.heard = self.cap.clock()
        self.spoke = True
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class _ConnectionCap:
    """At most ``MAX_CONNECTIONS`` open connections; the excess waits in the kernel's queue.

    At the cap the server stops accepting. While a connection waits to be accepted, room is
    made at a bounded rate (``TURNOVER``): of the connections open that long, the oldest with
    no request in flight and nothing heard for that long (a keep-alive connection: four times
    that) are closed, and a request waiting only for its busy 503 gets it now, with the
    connection closed after it. A request being answered is never cut; a probe,
    answered at once, is accepted within a bounded time behind at most ``BACKLOG``
    connections, and a flood's connections turn over at most ``MAX_CONNECTIONS /
    TURNOVER`` a second, so the loop's cost stays bounded.
    """

    def __init__(
        self,
        refusals: dict[asyncio.BaseTransport, asyncio.Future[None]],
        limit: int | None = None,
    ) -> None:
        self.limit = MAX_CONNECTIONS if limit is None else limit
        self.turnover = TURNOVER
        self.clock = time.monotonic
        self.open: dict[_Connection, None] = {}  # oldest first
        self.starting = 0  # accepted, not yet handed to aiohttp
        self.refusals = refusals  # the requests waiting for a busy 503 (make_app's)
        self.listener: _Listener | None = None
        self._tick: asyncio.TimerHandle | None = None

    def full(self) -> bool:
        return len(self.open) + self.starting >= self.limit

    def lost(self, connection: _Connection) -> None:
        self.open.pop(connection, None)
        self.settle()

    def settle(self) -> None:
        """Accept again below the cap."""
        if self.listener is not None and not self.full():
            self.listener.resume()

    def at_cap(self) -> None:
        """Accepting has paused: make room while someone waits to be accepted."""
        if self._tick is None:
            self._tick = asyncio.get_running_loop().call_later(TICK, self._make_room)

    def _make_room(self) -> None:
        self._tick = None
        if self.listener is None or not self.full():
            self.settle()
            return
        if self.listener.waiting():
            now = self.clock()
            budget = max(1, round(self.limit * TICK / self.turnover))
            for connection in list(self.open):
                if budget == 0 or now - connection.opened < self.turnover:
                    break  # oldest first: the rest are younger
                if self._refuse(connection):
                    budget -= 1
        self.at_cap()

    def _refuse(self, connection: _Connection) -> bool:
        """Close ``connection`` if no request is in flight on it, or answer its request that
        waits for a busy 503 now; False if it is serving a request."""
        transport = connection.transport
        if transport is None or transport.is_closing():
            return False
        waiting = self.refusals.get(transport)
        if waiting is not None:
            if not waiting.done():
                waiting.set_result(None)
            return True
        # Quiet that long too, and a keep-alive client's connection four times as long: it is not
        # closed as the client sends its next request (which would fail it, unanswered).
        quiet = self.turnover * (KEEP_ALIVE_QUIET if connection.spoke else 1)
        if connection.in_flight() or self.clock() - connection.heard < quiet:
            return False
        transport.close()
        return True

    def close(self) -> None:
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None


class _Listener:
    """The listening socket, accepted from by hand so that accepting can pause at the cap
    (an asyncio server cannot pause). Quacks as the asyncio server aiohttp's site keeps."""

    def __init__(
        self,
        sock: socket.socket,
        server: web.Server,
        cap: _ConnectionCap,
        ssl_context: ssl.SSLContext | None,
    ) -> None:
        self.sock = sock
        self.ssl_context = ssl_context
        self.server = server
        self.cap = cap
        self.loop = asyncio.get_running_loop()
        self.reading = False
        self.starts: set[asyncio.Task[Any]] = set()
        self.accept_errors = AcceptErrorLog()
        cap.listener = self

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return () if self.sock.fileno() < 0 else (self.sock,)

    def resume(self) -> None:
        if not self.reading and self.sock.fileno() >= 0:
            self.loop.add_reader(self.sock.fileno(), self._accept)
            self.reading = True

    def pause(self) -> None:
        if self.reading:
            self.loop.remove_reader(self.sock.fileno())
            self.reading = False

    def waiting(self) -> bool:
        """Whether a connection waits to be accepted (the socket is readable)."""
        return bool(select.select([self.sock], [], [], 0)[0])

    def _accept(self) -> None:
        while not self.cap.full():
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors or buffers: try again in a while
                self.accept_errors.failed(exc)
                self.pause()
                self.loop.call_later(ACCEPT_RETRY, self.resume)
                return
            conn.setblocking(False)
            self.cap.starting += 1
            start = self.loop.create_task(self._start(conn))
            self.starts.add(start)
            start.add_done_callback(self.starts.discard)
        self.pause()
        self.cap.at_cap()

    async def _start(self, conn: socket.socket) -> None:
        connection = _Connection(self.server(), self.cap)
        try:
            await self.loop.connect_accepted_socket(lambda: connection, conn, ssl=self.ssl_context)
        except OSError:
            conn.close()
        finally:
            self.cap.starting -= 1
            self.cap.settle()

    def close(self) -> None:
        self.pause()
        self.cap.close()
        self.sock.close()
        for start in list(self.starts):
            start.cancel()


class CappedSite(web.BaseSite):
    """aiohttp's TCP site, its connections capped (:class:`_ConnectionCap`) at ``limit``
    (``MAX_CONNECTIONS``); over TLS with ``ssl_context`` (the 4.15/4.16 webhook's). The
    requests ``refusals`` holds (``make_app``'s busy ones) may be answered early."""

    def __init__(
        self,
        runner: web.BaseRunner,
        listen: Listen,
        limit: int | None = None,
        ssl_context: ssl.SSLContext | None = None,
        refusals: dict[asyncio.BaseTransport, asyncio.Future[None]] | None = None,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self.listen = listen
        self.cap = _ConnectionCap({} if refusals is None else refusals, limit)

    @property
    def name(self) -> str:
        return f"{'https' if self._ssl_context else 'http'}://{self.listen}"

    async def start(self) -> None:
        await super().start()
        assert self._runner.server is not None  # BaseSite requires a runner set up
        loop = asyncio.get_running_loop()
        family, kind, proto, _, address = (
            await loop.getaddrinfo(
                self.listen.host, self.listen.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )
        )[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(address)
            except OSError as exc:  # worded as asyncio's create_server words it
                raise OSError(
                    exc.errno,
                    f"error while attempting to bind on address {address!r}: "
                    f"{(exc.strerror or str(exc)).lower()}",
                ) from None
            sock.listen(BACKLOG)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        listener = _Listener(sock, self._runner.server, self.cap, self._ssl_context)
        listener.resume()
        self._server = cast(asyncio.Server, listener)


class AcceptErrorLog:
    """A failed ``accept()`` (no descriptor left) logged at most once an ``interval``, with
    how many were not logged: under a flood it fails thousands of times a second."""

    def __init__(
        self,
        interval: float = BAD_REQUEST_LOG_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = interval
        self.clock = clock
        self.next_at = 0.0
        self.suppressed = 0

    def failed(self, exc: OSError) -> None:
        now = self.clock()
        if now < self.next_at:
            self.suppressed += 1
            return
        self.next_at = now + self.interval
        log.error(
            "cannot accept connections: %s (%d more not logged; the next in %gs at the earliest)",
            exc,
            self.suppressed,
            self.interval,
        )
        self.suppressed = 0


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
        site = CappedSite(runner, listen, refusals=app[REFUSALS])
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = runner.addresses[0][1]
    log.info(
        "listening on http://%s",
        Listen(listen.host, int(bound)),
        extra={"fields": {"port": int(bound)}},
    )
    return runner, int(bound)
