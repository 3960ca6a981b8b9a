"""The HTTP server's connections, capped: what a flood spends of the agent's file descriptors.

At most
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
import logging
import select
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any, cast

from aiohttp import web

from drain_guard.config.values import Listen

#: The server's log (drain_guard.runtime.server): a failed accept is the server's to tell.
log = logging.getLogger("drain_guard.runtime.server")

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
