"""The HTTP server's connections, capped: what a flood spends of the agent's file descriptors.

At most ``MAX_CONNECTIONS`` are open (probes included), so that a thousand connections cannot
take the descriptors the agent needs for the API and the host's files. The listening socket
queues a connection for ``accept()`` only once its client has sent something
(``TCP_DEFER_ACCEPT``): one that says nothing waits in the kernel, with no descriptor of the
agent's. Over plain HTTP, ``DOOR_SLOTS`` of the cap are the door's
(``drain_guard.runtime.door``): with every serving slot taken the server goes on accepting into
the door, which answers a probe at once and keeps any other request waiting for a serving slot
up to ``RETRY_AFTER``, then answers it busy; so a probe never waits in the kernel's queue behind
the flood for the cap to make room (issue 36: under 1,000 connections it waited up to 2.8 s of
the kubelet's 3). While a request waits, room is made at a bounded rate (``TURNOVER``) from
connections with no request in flight (one heard and not yet answered), or whose request only
waits for its busy 503 (answered at once then): a request being answered is never cut. Over
TLS (the webhook's site) the door cannot read the request: at the cap accepting pauses and the
excess waits in the kernel's queue (``BACKLOG``) for that room. Should ``accept()`` fail for
want of descriptors anyway, it is logged at most once a ``BAD_REQUEST_LOG_INTERVAL``.
"""

from __future__ import annotations

import asyncio
import logging
import select
import socket
import ssl
import time
from collections.abc import Callable, Iterable
from typing import Any, cast

from aiohttp import web

from drain_guard.config.values import Listen
from drain_guard.runtime.door import GRACE, Door, Prober

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
#: Of ``MAX_CONNECTIONS``, the slots kept for the door (plain HTTP): at the cap, where a probe
#: is answered and other requests wait for a serving slot (drain_guard.runtime.door).
DOOR_SLOTS = 16
#: Connections accepted at most per turn of the event loop: the holds' work goes on between.
ACCEPT_BATCH = 16
#: Seconds a connection that has sent nothing waits in the kernel before it is accepted all
#: the same (``TCP_DEFER_ACCEPT``; the server's idle timeout).
DEFER_ACCEPT = 10
#: How many ``TURNOVER`` periods a connection that has sent requests must have been quiet.
KEEP_ALIVE_QUIET = 4
#: How often, at the cap, the server looks whether a connection waits to be accepted.
TICK = 0.02
#: Seconds before accepting again after ``accept()`` failed (no descriptor left).
ACCEPT_RETRY = 1.0
BAD_REQUEST_LOG_INTERVAL = 60.0


class _Answers:
    """The transport aiohttp writes a connection's answers to, noting when it last wrote: a
    request heard after that is in flight (asyncio's public transport interface; aiohttp
    keeps its own request state private)."""

    def __init__(self, transport: asyncio.Transport, connection: _Connection) -> None:
        self._transport = transport
        self._connection = connection

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._connection.answered = self._connection.cap.clock()
        self._transport.write(data)

    def writelines(self, chunks: Iterable[bytes | bytearray | memoryview]) -> None:
        self._connection.answered = self._connection.cap.clock()
        self._transport.writelines(chunks)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _Connection(asyncio.Protocol):
    """aiohttp's request handler for one connection, known to the :class:`_ConnectionCap`."""

    def __init__(self, inner: asyncio.Protocol, cap: _ConnectionCap) -> None:
        self.inner = inner
        self.cap = cap
        self.opened = cap.clock()
        self.heard = self.opened  # when its peer last sent anything
        self.answered = self.opened  # when the server last wrote to it
        self.spoke = False  # whether it has sent anything
        self.transport: asyncio.Transport | None = None
        #: What aiohttp's handler writes to (and keys its busy requests by).
        self.answers: asyncio.Transport | None = None

    def in_flight(self) -> bool:
        """Whether a request heard has not been answered yet."""
        return self.heard > self.answered

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a TCP server's: a stream
        self.answers = cast(asyncio.Transport, _Answers(self.transport, self))
        self.cap.open[self] = None
        self.inner.connection_made(self.answers)

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
    """At most ``limit`` (``MAX_CONNECTIONS``) open connections: serving ones, and over
    plain HTTP ``door_slots`` of them kept for the :class:`~drain_guard.runtime.door.Door`.

    While a request waits for a serving slot (at the door; over TLS, in the kernel's queue,
    accepting paused), room is made at a bounded rate (``TURNOVER``): of the connections
    open that long, the oldest with no request in flight and nothing heard for that long (a
    keep-alive connection: four times that) are closed, and a request waiting only for its
    busy 503 gets it now, with the connection closed after it. A request being answered is
    never cut, and a flood's connections turn over at most ``limit / TURNOVER`` a second.
    """

    def __init__(
        self,
        refusals: dict[asyncio.BaseTransport, asyncio.Future[None]],
        limit: int | None = None,
        door_slots: int = 0,
    ) -> None:
        self.limit = MAX_CONNECTIONS if limit is None else limit
        self.door_slots = door_slots
        self.turnover = TURNOVER
        self.clock = time.monotonic
        self.open: dict[_Connection, None] = {}  # oldest first
        self.starting = 0  # accepted, not yet handed to aiohttp
        self.refusals = refusals  # the requests waiting for a busy 503 (make_app's)
        self.listener: _Listener | None = None
        self._tick: asyncio.TimerHandle | None = None

    def serving(self) -> int:
        return len(self.open) + self.starting

    def serving_room(self) -> bool:
        return self.serving() < self.limit - self.door_slots

    def full(self) -> bool:
        at_door = (
            0 if self.listener is None or self.listener.door is None else len(self.listener.door)
        )
        return self.serving() + at_door >= self.limit

    def lost(self, connection: _Connection) -> None:
        self.open.pop(connection, None)
        self.settle()

    def settle(self) -> None:
        """Admit what waits at the door, and accept again below the cap."""
        if self.listener is None:
            return
        if self.listener.door is not None:
            self.listener.door.admit_waiting()
        if not self.full():
            self.listener.resume()

    def at_cap(self) -> None:
        """A request waits for a serving slot: make room at the bounded rate."""
        if self._tick is None:
            self._tick = asyncio.get_running_loop().call_later(TICK, self._make_room)

    def _make_room(self) -> None:
        self._tick = None
        if self.listener is None:
            return
        self.settle()
        if self.serving_room() or not self.listener.someone_waits():
            return
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
        waiting = self.refusals.get(cast(asyncio.BaseTransport, connection.answers))
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
    """The listening socket, accepted from by hand (an asyncio server cannot pause, nor hand
    a connection to a door first). Over TLS, accepting pauses at the cap; over plain HTTP it
    goes on into the :class:`Door` while the serving slots are taken."""

    def __init__(
        self,
        sock: socket.socket,
        server: web.Server,
        cap: _ConnectionCap,
        ssl_context: ssl.SSLContext | None,
        probe: Prober | None,
    ) -> None:
        self.sock = sock
        self.ssl_context = ssl_context
        self.server = server
        self.cap = cap
        self.loop = asyncio.get_running_loop()
        self.reading = False
        self.starts: set[asyncio.Task[Any]] = set()
        self.accept_errors = AcceptErrorLog()
        # One of the door's slots is the newcomer's, read as it is accepted.
        self.door = (
            None
            if probe is None or cap.door_slots == 0
            else Door(cap.door_slots - 1, probe, cap.serving_room, self.admit, cap.at_cap)
        )
        cap.listener = self

    def resume(self) -> None:
        if not self.reading and self.sock.fileno() >= 0:
            self.loop.add_reader(self.sock.fileno(), self._accept)
            self.reading = True

    def pause(self) -> None:
        if self.reading:
            self.loop.remove_reader(self.sock.fileno())
            self.reading = False

    def someone_waits(self) -> bool:
        """Whether a request waits for a serving slot: at the door, or (over TLS) a
        connection in the kernel's queue."""
        if self.door is not None:
            return self.door.waiting()
        return self._queued()

    def _queued(self) -> bool:
        """Whether a connection waits to be accepted (the socket is readable)."""
        return bool(select.select([self.sock], [], [], 0)[0])

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):  # then the loop's other work, and back
            if self.cap.full() and not self._queued():
                return
            if self.cap.full() and (self.door is None or not self.door.turn_away_oldest()):
                self.pause()
                if self.door is None:
                    self.cap.at_cap()
                else:  # the door holds only newcomers yet to speak
                    self.loop.call_later(GRACE, self.resume)
                return
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
            if self.door is not None and not self.cap.serving_room():
                self.door.enter(conn)
            else:
                self.admit(conn)

    def admit(self, conn: socket.socket) -> None:
        """Hand ``conn`` to aiohttp."""
        self.cap.starting += 1
        start = self.loop.create_task(self._start(conn))
        self.starts.add(start)
        start.add_done_callback(self.starts.discard)

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
        if self.door is not None:
            self.door.close()
        self.sock.close()
        for start in list(self.starts):
            start.cancel()


class CappedSite(web.BaseSite):
    """A TCP site whose connections are capped (:class:`_ConnectionCap`) at ``limit``
    (``MAX_CONNECTIONS``), over TLS with ``ssl_context`` (the 4.15/4.16 webhook's). The
    requests ``refusals`` holds (``make_app``'s busy ones) may be answered early; with
    ``probe`` (``make_app``'s), over plain HTTP, probes are answered at the door at the cap.
    ``port``: the port bound, once started; ``runner.cleanup()`` stops it as any site."""

    def __init__(
        self,
        runner: web.AppRunner,
        listen: Listen,
        limit: int | None = None,
        ssl_context: ssl.SSLContext | None = None,
        refusals: dict[asyncio.BaseTransport, asyncio.Future[None]] | None = None,
        probe: Prober | None = None,
    ) -> None:
        super().__init__(runner)
        self.app_runner = runner
        self.listen = listen
        self.limit = limit
        self.tls = ssl_context
        self.refusals = {} if refusals is None else refusals
        self.probe = probe
        self.port = 0
        self.listener: _Listener | None = None

    @property
    def name(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.listen}"

    async def start(self) -> None:
        await super().start()
        server = self.app_runner.server
        assert server is not None  # BaseSite requires a runner set up
        door_slots = 0 if self.tls is not None or self.probe is None else DOOR_SLOTS
        cap = _ConnectionCap(self.refusals, self.limit, door_slots)
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
            # Queued for accept() once the client has sent something: a connection that
            # says nothing waits in the kernel (for IDLE_TIMEOUT), not in the door's slots.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, DEFER_ACCEPT)
            sock.listen(BACKLOG)
            sock.setblocking(False)
            self.port = int(sock.getsockname()[1])
        except BaseException:
            sock.close()
            raise
        self.listener = _Listener(sock, server, cap, self.tls, self.probe)
        self.listener.resume()

    async def stop(self) -> None:
        if self.listener is not None:
            self.listener.close()
        await super().stop()


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
