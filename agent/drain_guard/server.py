"""The agent's read-only HTTP endpoint: ``/healthz``, ``/readyz``, ``/status``, ``/metrics``.

API::

    app = make_app(source, metrics)          # source: any StatusSource (the controller)
    runner, port = await serve(app, parse_listen("127.0.0.1:0"))   # logs "listening on http://HOST:PORT"
    ...
    await runner.cleanup()

Only GET and HEAD are routed; any other method gets 405 (nothing here changes anything).
``/metrics`` is prometheus_client's aiohttp handler on the agent's own registry, so it answers
in the text format or, when the scraper asks for it, OpenMetrics.
"""

from __future__ import annotations

import json
import logging
from typing import Protocol

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from drain_guard.config import Listen
from drain_guard.metrics import Metrics
from drain_guard.status import AgentStatus

log = logging.getLogger(__name__)


class StatusSource(Protocol):
    """What the server asks the controller."""

    def status(self) -> AgentStatus:
        """A snapshot of the agent's view and decision."""
        ...

    def alive(self) -> bool:
        """Whether the control loop is running (not stuck, not crashed)."""
        ...

    def ready(self) -> tuple[bool, str]:
        """Whether the watches are synced and the API answered recently, and if not, why."""
        ...


def make_app(source: StatusSource, metrics: Metrics) -> web.Application:
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

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/status", status)
    app.router.add_get("/metrics", make_aiohttp_handler(metrics.registry))
    return app


async def serve(app: web.Application, listen: Listen) -> tuple[web.AppRunner, int]:
    """Bind ``app`` on ``listen`` and return the runner and the port actually bound.

    Logs ``listening on http://HOST:PORT`` (tests and the demo parse it to find ephemeral
    ports). The caller stops the server with ``await runner.cleanup()``.
    """
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, listen.host, listen.port)
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = runner.addresses[0][1]
    log.info("listening on http://%s", Listen(listen.host, int(bound)))
    return runner, int(bound)
