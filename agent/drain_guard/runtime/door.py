"""Where a plain-HTTP connection waits when every serving slot is taken (``connections.py``'s
cap).

A kubelet probe must not wait behind a flood (issue 36: under 1,000 hostile connections a
probe waited up to 2.8 s of its 3 s timeout in the kernel's accept queue, which the server
drained at the cap's turnover rate). So at the cap the server goes on accepting, into the
door, a few slots kept apart from the serving ones, and reads each request line there
without answering through aiohttp:

- a probe (``GET`` or ``HEAD`` of ``/healthz`` or ``/readyz``) is answered at once, from the
  same function the handlers answer from, and its connection closed;
- any other request waits for a serving slot (the cap makes room at its bounded rate) for
  ``RETRY_AFTER`` seconds at most, then gets the busy 503 and its connection closed; with
  the door full, a newcomer's request gets it at once, and those waiting keep their turn;
- a connection that has sent nothing yet (rare: the listener accepts a connection once it
  has spoken) waits for its request line, and may be closed after ``GRACE`` to make room.

A refused connection costs an ``accept``, a ``recv`` and a ``send``, no aiohttp request
handler, so the server can keep the kernel's queue short under a flood that reconnects at
once. The door knows nothing of HTTP beyond a request line: everything it admits, aiohttp
reads whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

#: Seconds a request waits at the door for a serving slot before its busy 503.
RETRY_AFTER = 1
#: Seconds a connection may sit at the door having sent nothing before a newer one may take
#: its slot (a client sends its request right after connecting).
GRACE = 0.1
#: Seconds a connection may sit at the door having sent nothing.
SILENT_TIMEOUT = 10.0
#: How often the door looks for guests waited out.
SWEEP = 0.05
#: A request line longer than this is no probe (and is admitted or refused as any other).
MAX_HEAD = 1024
PROBE_PATHS = frozenset({"/healthz", "/readyz"})
REASONS = {200: "OK", 503: "Service Unavailable"}

#: ``path`` → (HTTP status, text): what a probe is answered.
Prober = Callable[[str], tuple[int, str]]


@dataclass
class _Guest:
    entered: float
    #: Whether it has sent a request that is no probe (it waits for a serving slot).
    asks: bool = False


class Door:
    """At most ``slots`` accepted connections waiting at the cap (see the module)."""

    def __init__(
        self,
        slots: int,
        probe: Prober,
        has_room: Callable[[], bool],
        admit: Callable[[socket.socket], None],
        on_wait: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.slots = slots
        self.probe = probe
        self.has_room = has_room
        self._admit = admit
        self.on_wait = on_wait
        self.clock = clock
        self.loop = asyncio.get_running_loop()
        self._guests: OrderedDict[socket.socket, _Guest] = OrderedDict()  # oldest first
        self._sweep: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._guests)

    def enter(self, sock: socket.socket) -> None:
        """``sock`` (non-blocking, just accepted) is answered, admitted, refused or waits."""
        head = self._peek(sock)
        if head == b"":
            sock.close()
        elif head is not None:
            self._decide(sock, head, None)
        elif self._room_for_one():  # it has said nothing yet: wait for its request line
            self._guests[sock] = _Guest(self.clock())
            self.loop.add_reader(sock.fileno(), self._heard, sock)
            self._sweep_soon()
        else:
            sock.close()

    def waiting(self) -> bool:
        """Whether a request waits for a serving slot."""
        return any(guest.asks for guest in self._guests.values())

    def turn_away_oldest(self) -> bool:
        """Make one slot free, False if none can be: the oldest request waiting for a
        serving slot gets its busy 503; else the oldest connection that has sent nothing
        for ``GRACE`` is closed (read once more first: its request may just have come)."""
        for sock, guest in self._guests.items():
            if guest.asks:
                self._turn_away(sock, guest)
                return True
        now = self.clock()
        for sock, guest in list(self._guests.items()):
            self._heard(sock)
            if sock not in self._guests:  # answered, or admitted
                return True
            if guest.asks or now - guest.entered >= GRACE:
                self._turn_away(sock, guest)
                return True
        return False

    def admit_waiting(self) -> None:
        """Hand the oldest waiting requests to the server while it has room."""
        for sock, guest in list(self._guests.items()):
            if not self.has_room():
                return
            if guest.asks:
                self._leave(sock)
                self._admit(sock)

    def close(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for sock in list(self._guests):
            self._close(sock)

    def _heard(self, sock: socket.socket) -> None:
        guest = self._guests.get(sock)
        if guest is None:
            return
        head = self._peek(sock)
        if head == b"":
            self._close(sock)
        elif head is not None:
            self.loop.remove_reader(sock.fileno())
            self._decide(sock, head, guest)

    def _decide(self, sock: socket.socket, head: bytes, guest: _Guest | None) -> None:
        """A probe is answered; another request is admitted while there is room, else waits
        (a newcomer only if a slot is free: otherwise it is refused at once, and those
        waiting keep their turn)."""
        method, path = _request_line(head)
        if method in ("GET", "HEAD") and path in PROBE_PATHS:
            status, text = self.probe(path)
            self._answer(sock, status, text, body=method == "GET")
        elif self.has_room():
            self._leave(sock)
            self._admit(sock)
        elif guest is not None:
            guest.asks = True
            self.on_wait()
        elif len(self._guests) < self.slots:
            self._guests[sock] = _Guest(self.clock(), asks=True)
            self._sweep_soon()
            self.on_wait()
        else:
            self._answer(sock, 503, "busy\n", retry_after=RETRY_AFTER)

    def _peek(self, sock: socket.socket) -> bytes | None:
        """What ``sock`` has sent so far, left for aiohttp to read; None if nothing yet, b""
        if it is closed or broken."""
        try:
            return sock.recv(MAX_HEAD, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            return b""

    def _room_for_one(self) -> bool:
        return len(self._guests) < self.slots or self.turn_away_oldest()

    def _sweep_soon(self) -> None:
        if self._sweep is None:
            self._sweep = self.loop.call_later(SWEEP, self._sweep_out)

    def _sweep_out(self) -> None:
        self._sweep = None
        now = self.clock()
        for sock, guest in list(self._guests.items()):
            waited = now - guest.entered
            if (guest.asks and waited >= RETRY_AFTER) or waited >= SILENT_TIMEOUT:
                self._turn_away(sock, guest)
        if self._guests:
            self._sweep = self.loop.call_later(SWEEP, self._sweep_out)

    def _turn_away(self, sock: socket.socket, guest: _Guest) -> None:
        if guest.asks:
            self._answer(sock, 503, "busy\n", retry_after=RETRY_AFTER)
        else:
            self._close(sock)

    def _answer(
        self,
        sock: socket.socket,
        status: int,
        text: str,
        *,
        body: bool = True,
        retry_after: int | None = None,
    ) -> None:
        """Answer and close. What the client sent is read first (a request's head comes in
        one piece), so that the close is a FIN after the answer, not a reset that could
        overtake it."""
        with contextlib.suppress(OSError):
            sock.recv(65536)
        data = text.encode()
        head = f"HTTP/1.1 {status} {REASONS[status]}\r\n"
        head += f"Content-Type: text/plain; charset=utf-8\r\nContent-Length: {len(data)}\r\n"
        if retry_after is not None:
            head += f"Retry-After: {retry_after}\r\n"
        head += "Connection: close\r\n\r\n"
        with contextlib.suppress(OSError):
            sock.send(head.encode() + (data if body else b""))
        self._close(sock)

    def _leave(self, sock: socket.socket) -> None:
        self._guests.pop(sock, None)
        self.loop.remove_reader(sock.fileno())

    def _close(self, sock: socket.socket) -> None:
        self._leave(sock)
        sock.close()


def _request_line(head: bytes) -> tuple[str, str]:
    """(method, path) of the request line ``head`` begins with; ("", "") if it is not one."""
    line, found, _ = head.partition(b"\r\n")
    if not found:
        return "", ""
    parts = line.split(b" ")
    if len(parts) != 3:
        return "", ""
    method, target = parts[0].decode("ascii", "replace"), parts[1]
    return method, target.partition(b"?")[0].decode("ascii", "replace")
