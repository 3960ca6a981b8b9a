"""Alert gating end to end: a real Prometheus evaluates a rule on a gauge the test serves, and
a ``drain-guard run`` process (against the API simulator) queries its alerts.

The test owns the condition: it serves ``gate 1`` or ``gate 0`` for Prometheus to scrape, and
the rule ``DrainGate`` fires while ``gate == 1``; a second rule (``Watchdog``, on
``vector(1)``) fires throughout and is left out by the agent's ``--alert-filter``.
"""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import yaml
from aiohttp import web

from drain_guard import protocol
from drain_guard_sim.apiserver.server import SimApiServer
from drain_guard_sim.apiserver.tls import ServingCert
from tests.helpers import (
    CONFIG_B,
    IMAGE_B,
    NODE,
    StartAgent,
    mcd_request,
    metric,
    require_tool,
    wait_annotation,
)
from tests.observability.prometheus import Prometheus, free_port, prometheus
from tests.observability.test_prometheus_e2e import scraped

DRAIN_B = f"drain-{CONFIG_B}"
HELD = "hold-" + DRAIN_B
FILTER = "^DrainGate$"

pytestmark = pytest.mark.prometheus


class Gate:
    """A scrape target serving ``gate <value>``, the condition of the rule ``DrainGate``."""

    def __init__(self) -> None:
        self.value = 1

    async def metrics(self, _: web.Request) -> web.Response:
        return web.Response(text=f"# TYPE gate gauge\ngate {self.value}\n")


@contextlib.asynccontextmanager
async def gate_target() -> AsyncIterator[tuple[Gate, str]]:
    gate = Gate()
    app = web.Application()
    app.router.add_get("/metrics", gate.metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield gate, f"127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def rules(tmp: Path) -> Path:
    path = tmp / "gate.rules.yml"
    path.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "gate",
                        "rules": [
                            {"alert": "DrainGate", "expr": "gate == 1"},
                            {"alert": "Watchdog", "expr": "vector(1)"},
                        ],
                    }
                ]
            }
        )
    )
    return path


async def firing(prom: Prometheus) -> set[str]:
    data = await prom.api("alerts")
    return {a["labels"]["alertname"] for a in data["alerts"] if a["state"] == "firing"}


async def test_a_firing_alert_holds_the_drain_until_it_resolves(
    api: SimApiServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    require_tool("prometheus")
    async with (
        gate_target() as (gate, target),
        prometheus(tmp_path, [target], {}, [rules(tmp_path)]) as prom,
    ):
        await scraped(prom, 'ALERTS{alertname="DrainGate",alertstate="firing"}')
        agent = await start_agent(
            f"--alert-url={prom.base}", f"--alert-filter={FILTER}", "--alert-interval=1s"
        )
        mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
        ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == HELD)
        assert ann[protocol.HOLD_REASONS] == "alert"
        assert ann[protocol.HOLD_DETAIL] == "alert: firing: DrainGate"
        _, body = await agent.http("/status")
        doc = json.loads(body)
        assert doc["alerts"]["state"] == "firing"
        assert doc["alerts"]["firing"] == ["DrainGate"]  # Watchdog fires too, not matched
        assert await metric(agent, "drain_guard_alert_query_up") == 1
        assert await metric(agent, "drain_guard_alerts_firing") == 1

        gate.value = 0  # the alert resolves at Prometheus' next scrape and evaluation
        ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == DRAIN_B)
        assert protocol.HELD_DRAIN not in ann
        assert await firing(prom) == {"Watchdog"}
        released = await agent.wait_log(lambda r: r.get("outcome") == "safe")
        assert released["request"] == DRAIN_B


async def test_a_tenants_alert_named_like_the_filters_holds_no_drain(
    api: SimApiServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    """Issue 34: with user-workload monitoring the Thanos querier serves tenants' alerts too,
    each with its rule's namespace as ``namespace`` (enforced: a tenant cannot set it). A
    tenant's ``DrainGate`` on ``vector(1)`` fires throughout; the agent with the default
    ``--alert-namespaces`` lets the drain go on, as it would with no alert firing."""
    require_tool("prometheus")
    path = tmp_path / "tenant.rules.yml"
    tenant = {"alert": "DrainGate", "expr": "vector(1)", "labels": {"namespace": "tenant-a"}}
    path.write_text(yaml.safe_dump({"groups": [{"name": "tenant", "rules": [tenant]}]}))
    async with prometheus(tmp_path, [], {}, [path]) as prom:
        await scraped(
            prom, 'ALERTS{alertname="DrainGate",namespace="tenant-a",alertstate="firing"}'
        )
        agent = await start_agent(
            f"--alert-url={prom.base}", f"--alert-filter={FILTER}", "--alert-interval=1s"
        )
        mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
        passed = await agent.wait_log(lambda r: r.get("outcome") == "pass")
        assert passed["request"] == DRAIN_B
        assert protocol.HELD_DRAIN not in api.get("nodes", NODE)["metadata"]["annotations"]
        _, body = await agent.http("/status")
        alerts = json.loads(body)["alerts"]
        assert (alerts["state"], alerts["firing"]) == ("clear", [])
        assert await firing(prom) == {"DrainGate"}  # it fires: the agent left it out


@pytest.mark.parametrize("policy", ["hold", "pass"])
async def test_an_unreachable_prometheus_follows_the_policy_and_is_reported(
    api: SimApiServer, start_agent: StartAgent, policy: str
) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    agent = await start_agent(
        f"--alert-url={nobody}",
        f"--alert-filter={FILTER}",
        "--alert-interval=1s",
        f"--alert-unreachable={policy}",
    )
    await agent.wait_log(lambda r: "alert query failing" in str(r.get("message")))
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    if policy == "hold":
        ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == HELD)
        assert ann[protocol.HOLD_REASONS] == "alert"
        assert "alert query unanswered since" in ann[protocol.HOLD_DETAIL]
        assert "--alert-unreachable=hold" in ann[protocol.HOLD_DETAIL]
    else:
        passed = await agent.wait_log(lambda r: r.get("outcome") == "pass")
        assert passed["request"] == DRAIN_B
        assert protocol.HELD_DRAIN not in (api.get("nodes", NODE)["metadata"]["annotations"])
    _, body = await agent.http("/status")
    alerts = json.loads(body)["alerts"]
    assert alerts["state"] == "unreachable"
    assert alerts["url"] == nobody
    assert nobody in alerts["error"]
    assert await metric(agent, "drain_guard_alert_query_up") == 0


@contextlib.asynccontextmanager
async def token_front(upstream: str, cert: ServingCert, token: list[str]) -> AsyncIterator[str]:
    """HTTPS in front of Prometheus that answers only ``Bearer <token[0]>``, as the Thanos
    querier's kube-rbac-proxy answers only an authorized token; its URL."""

    async def alerts(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {token[0]}":
            return web.Response(status=401, text="Unauthorized")
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{upstream}/api/v1/alerts") as resp,
        ):
            return web.Response(status=resp.status, body=await resp.read())

    app = web.Application()
    app.router.add_get("/api/v1/alerts", alerts)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert.cert_file, cert.key_file)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    try:
        yield f"https://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def test_the_token_and_ca_are_used_and_read_again_before_each_query(
    api: SimApiServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    require_tool("prometheus")
    cert = ServingCert.generate(tmp_path / "tls")
    token = ["first"]
    token_file = tmp_path / "token"
    token_file.write_text("first\n")
    async with (
        gate_target() as (_, target),
        prometheus(tmp_path, [target], {}, [rules(tmp_path)]) as prom,
        token_front(prom.base, cert, token) as url,
    ):
        await scraped(prom, 'ALERTS{alertname="DrainGate",alertstate="firing"}')
        agent = await start_agent(
            f"--alert-url={url}",
            f"--alert-filter={FILTER}",
            "--alert-interval=1s",
            f"--alert-token-file={token_file}",
            f"--alert-ca-file={cert.ca_file}",
        )
        mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
        ann = await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == HELD)
        assert ann[protocol.HOLD_DETAIL] == "alert: firing: DrainGate"

        token[0] = "second"  # rotated at the source: the old token is refused
        failing = await agent.wait_log(lambda r: "alert query failing" in str(r.get("message")))
        assert "HTTP 401" in failing["message"]
        token_file.write_text("second\n")  # and then in the file: answered again
        await agent.wait_log(lambda r: "answered again" in str(r.get("message")))
        _, body = await agent.http("/status")
        assert json.loads(body)["alerts"]["state"] == "firing"


async def test_a_certificate_not_signed_by_the_ca_file_is_refused(
    api: SimApiServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    require_tool("prometheus")
    cert, other = ServingCert.generate(tmp_path / "tls"), ServingCert.generate(tmp_path / "other")
    async with (
        gate_target() as (_, target),
        prometheus(tmp_path, [target], {}, [rules(tmp_path)]) as prom,
        token_front(prom.base, cert, ["t"]) as url,
    ):
        agent = await start_agent(
            f"--alert-url={url}", f"--alert-filter={FILTER}", f"--alert-ca-file={other.ca_file}"
        )
        failing = await agent.wait_log(lambda r: "alert query failing" in str(r.get("message")))
        assert "CERTIFICATE_VERIFY_FAILED" in failing["message"]
        _, body = await agent.http("/status")
        assert json.loads(body)["alerts"]["state"] == "unreachable"
