"""Alert gating, the I/O half: one query of Prometheus, Thanos querier or Alertmanager per
``--alert-interval``, its answer kept as an :class:`~drain_guard.core.alerts.AlertsSeen`.

One GET of every active alert per interval, whatever the number of alerts or drains: the
load per agent is fixed (docs/benchmarks.md, alert gating at 2,000 nodes). The bearer token is
read from its file before every query (a projected service-account token is rotated under
the agent), and never sent over plain HTTP (the settings refuse that).
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import aiohttp

from drain_guard.config.alerts import AlertSettings
from drain_guard.core.alerts import AlertsSeen, MalformedAlertsError, firing_alerts

log = logging.getLogger("drain_guard.core.alerts")

#: The longest answer read (a cluster's every active alert is well below this).
MAX_ANSWER_BYTES = 16 * 1024 * 1024


class AlertSource:
    """Queries the alerts every interval; ``seen`` is the latest answer. ``changed`` is called
    when what the guard reads changes (alerts firing or not, reachable or not)."""

    def __init__(
        self,
        settings: AlertSettings,
        changed: Callable[[AlertsSeen], None],
        now: Callable[[], datetime],
    ) -> None:
        self.settings = settings
        self.changed = changed
        self.now = now
        self.seen = AlertsSeen()

    async def run(self) -> None:
        """Query, then sleep an interval, until cancelled; a failed query never ends it."""
        timeout = aiohttp.ClientTimeout(total=self.settings.timeout.total_seconds())
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                self._record(await self.query(session))
                await asyncio.sleep(self.settings.interval.total_seconds())

    async def query(self, session: aiohttp.ClientSession) -> tuple[str, ...] | str:
        """The matching firing alerts, or why the query failed (one line)."""
        url = self.settings.url.rstrip("/") + "/" + self.settings.api.path
        try:
            headers, tls = await asyncio.to_thread(self._credentials)
            async with session.get(url, headers=headers, ssl=tls) as resp:
                body = await resp.content.read(MAX_ANSWER_BYTES + 1)
                if resp.status != 200:
                    return f"HTTP {resp.status} from {url}"
            if len(body) > MAX_ANSWER_BYTES:
                return f"answer of {url} longer than {MAX_ANSWER_BYTES} bytes"
            return firing_alerts(self.settings.api, json.loads(body), self.settings.filter)
        except (MalformedAlertsError, ValueError) as err:
            return f"unreadable answer from {url}: {err}"
        except TimeoutError:
            return f"no answer from {url} within {self.settings.timeout.total_seconds():g}s"
        except (aiohttp.ClientError, OSError) as err:
            return f"{url}: {type(err).__name__}: {err}"

    def _credentials(self) -> tuple[dict[str, str], ssl.SSLContext]:
        """The request's headers (the token read afresh) and TLS context (the CA read afresh:
        a service CA is rotated under the agent too)."""
        headers = {"Accept": "application/json"}
        if self.settings.token_file is not None:
            token = Path(self.settings.token_file).read_text().strip()
            headers["Authorization"] = f"Bearer {token}"
        return headers, ssl.create_default_context(cafile=self.settings.ca_file)

    def _record(self, answer: tuple[str, ...] | str) -> None:
        before, now = self.seen, self.now()
        if isinstance(answer, str):
            since = before.since if before.error is not None else now
            if before.error is None:
                log.warning("alert query failing: %s", answer)
            self.seen = AlertsSeen((), now, answer, since)
        else:
            if before.error is not None:
                log.warning("alert query answered again (failing since %s)", before.since)
            if answer != before.firing or before.checked_at is None:
                log.info("matching alerts firing: %s", ", ".join(answer) or "none")
            self.seen = AlertsSeen(answer, now)
        if (self.seen.state, self.seen.firing, self.seen.since) != (
            before.state,
            before.firing,
            before.since,
        ):
            self.changed(self.seen)
