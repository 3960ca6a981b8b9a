"""A real Alertmanager for tests (Debian's ``prometheus-alertmanager``): loopback only, no
cluster peers, a temp dir. Alerts are posted to its API as Prometheus posts them, and
silenced through it as an operator silences them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from tests.observability.prometheus import serving

TOOL = "prometheus-alertmanager"


class Alertmanager:
    """A running Alertmanager and its API (v2)."""

    def __init__(self, base: str, http: aiohttp.ClientSession) -> None:
        self.base = base
        self.http = http
        self._started: dict[str, datetime] = {}

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        async with self.http.request(method, f"{self.base}/api/v2/{path}", json=body) as resp:
            assert resp.status == 200, f"{method} {path}: {resp.status} {await resp.text()}"
            return await resp.json() if resp.content_type == "application/json" else None

    async def post(
        self,
        name: str,
        *,
        resolved: bool = False,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
    ) -> None:
        """Post the alert ``name`` firing, or ``resolved`` (ended now), as Prometheus does:
        the same start each time; ``labels`` besides its name (a rule's and the series')."""
        now = datetime.now(UTC)
        start = self._started.setdefault(name, now - timedelta(seconds=1))
        alert: dict[str, Any] = {
            "labels": {"alertname": name, **(labels or {})},
            "annotations": annotations or {},
            "startsAt": _rfc3339(start),
        }
        if resolved:
            alert["endsAt"] = _rfc3339(now)
            del self._started[name]
        await self._call("POST", "alerts", [alert])

    async def silence(self, name: str) -> str:
        """Silence the alert ``name`` for an hour; the silence's id."""
        now = datetime.now(UTC)
        body = {
            "matchers": [{"name": "alertname", "value": name, "isRegex": False, "isEqual": True}],
            "startsAt": _rfc3339(now),
            "endsAt": _rfc3339(now + timedelta(hours=1)),
            "createdBy": "test",
            "comment": "drains may go on",
        }
        created = await self._call("POST", "silences", body)
        return str(created["silenceID"])

    async def expire(self, silence: str) -> None:
        await self._call("DELETE", f"silence/{silence}")

    async def receivers(self) -> dict[str, list[str]]:
        """The receivers Alertmanager routed each active alert to, by alert name."""
        alerts = await self._call("GET", "alerts")
        return {a["labels"]["alertname"]: [r["name"] for r in a["receivers"]] for a in alerts}

    async def states(self) -> dict[str, str]:
        """Each active alert's state by name (``active``, ``suppressed``, ``unprocessed``)."""
        alerts = await self._call("GET", "alerts")
        return {a["labels"]["alertname"]: a["status"]["state"] for a in alerts}

    async def wait_state(self, name: str, state: str) -> None:
        """Until the alert ``name`` is in ``state``; the caller's timeout bounds
        the wait (Alertmanager applies an inhibition once its inhibitor has seen the source)."""
        while True:
            if (await self.states()).get(name) == state:
                return
            await asyncio.sleep(0.1)


def _rfc3339(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def inhibiting(inhibitor: str, target: str) -> str:
    """A configuration that notifies no one, where a firing ``inhibitor`` inhibits ``target``."""
    return yaml.safe_dump(
        {
            "route": {"receiver": "nobody"},
            "receivers": [{"name": "nobody"}],
            "inhibit_rules": [
                {
                    "source_matchers": [f'alertname="{inhibitor}"'],
                    "target_matchers": [f'alertname="{target}"'],
                }
            ],
        }
    )


@contextlib.asynccontextmanager
async def alertmanager(tmp: Path, config_text: str) -> AsyncIterator[Alertmanager]:
    """Start Alertmanager with the configuration ``config_text``; stop it on exit."""
    config = tmp / "alertmanager.yml"
    config.write_text(config_text)

    def args(port: int, attempt: int) -> list[str]:
        return [
            f"--config.file={config}",
            f"--storage.path={tmp / f'am-data-{attempt}'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",  # no peers: a single instance
            "--log.level=warn",
        ]

    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http,
        serving(TOOL, args, tmp, http) as base,
    ):
        yield Alertmanager(base, http)
