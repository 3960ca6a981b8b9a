"""The gating guards, pure (issue 26): alert answers of both APIs, the filter, the alert
guard and its settings; blocking pods and their settings; every new reason ends at max-hold."""

from __future__ import annotations

import argparse
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from drain_guard import protocol
from drain_guard.config.values import SettingsError
from drain_guard.core.alerts import (
    AlertApi,
    AlertFilter,
    AlertsSeen,
    MalformedAlertsError,
    OnUnreachable,
    firing_alerts,
)
from drain_guard.core.pods import Pod
from drain_guard.core.selectors import parse_build_pod_selector
from drain_guard.decision.decide import decide
from drain_guard.decision.decisions import Release
from drain_guard.guards import (
    AlertGuard,
    Block,
    BlockingPodGuard,
    BootedImage,
    Clear,
    NodeView,
    Unknown,
)
from drain_guard.protocol import Reason
from drain_guard.settings.agent import Settings, add_run_arguments, settings_from
from tests.helpers import agent_guards

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ANY = AlertFilter.parse("^(DrainGate|EtcdDown)$")


def prom(*alerts: tuple[str, str]) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {"alerts": [{"labels": {"alertname": n}, "state": s} for n, s in alerts]},
    }


def am(*alerts: tuple[str, str]) -> list[dict[str, Any]]:
    return [{"labels": {"alertname": n}, "status": {"state": s}} for n, s in alerts]


def test_prometheus_firing_alerts_count_pending_ones_not() -> None:
    body = prom(("DrainGate", "pending"), ("EtcdDown", "firing"), ("Watchdog", "firing"))
    assert firing_alerts(AlertApi.PROMETHEUS, body, ANY) == ("EtcdDown",)


def test_alertmanager_active_alerts_count_suppressed_ones_not() -> None:
    body = am(("DrainGate", "suppressed"), ("EtcdDown", "active"), ("EtcdDown", "active"))
    assert firing_alerts(AlertApi.ALERTMANAGER, body, ANY) == ("EtcdDown",)


def test_a_tenants_alert_of_a_platform_alerts_name_holds_no_drain() -> None:
    """Issue 34: user-workload monitoring sets a tenant alert's namespace to its rule's; the
    platform's alerts are in openshift-*, kube-*, default, or in no namespace."""
    alerts: list[dict[str, Any]] = [
        {"labels": {"alertname": "EtcdDown", "namespace": "tenant"}, "state": "firing"},
        {"labels": {"alertname": "EtcdDown", "namespace": "openshift-etcdx"}, "state": "firing"},
        {"labels": {"alertname": "DrainGate", "namespace": "xopenshift"}, "state": "firing"},
    ]
    body = {"status": "success", "data": {"alerts": alerts}}
    assert firing_alerts(AlertApi.PROMETHEUS, body, ANY) == ("EtcdDown",)
    alerts[1]["labels"]["namespace"] = "my-openshift-etcd"
    assert firing_alerts(AlertApi.PROMETHEUS, body, ANY) == ()
    alerts[2]["labels"] = {"alertname": "DrainGate"}  # no namespace: not a tenant's
    assert firing_alerts(AlertApi.PROMETHEUS, body, ANY) == ("DrainGate",)
    tenants_too = ANY.within("tenant|openshift-.*")
    assert firing_alerts(AlertApi.PROMETHEUS, body, tenants_too) == ("DrainGate", "EtcdDown")


@pytest.mark.parametrize(
    ("api", "body"),
    [
        (AlertApi.PROMETHEUS, {"status": "error", "error": "x"}),
        (AlertApi.PROMETHEUS, {"status": "success", "data": {}}),
        (AlertApi.PROMETHEUS, {"status": "success", "data": {"alerts": [{"state": "firing"}]}}),
        (AlertApi.ALERTMANAGER, {"alerts": []}),
        (AlertApi.ALERTMANAGER, ["x"]),
    ],
)
def test_a_malformed_answer_is_an_error_never_no_alerts(api: AlertApi, body: Any) -> None:
    with pytest.raises(MalformedAlertsError):
        firing_alerts(api, body, ANY)


def view(alerts: AlertsSeen | None) -> NodeView:
    booted = BootedImage(None, None, "test")
    return NodeView("n", {}, (), booted, NOW, "1", alerts=alerts)


def test_the_alert_guard() -> None:
    hold, go = AlertGuard(OnUnreachable.HOLD), AlertGuard(OnUnreachable.PASS)
    assert isinstance(hold.check(view(AlertsSeen())), Unknown)
    firing = AlertsSeen(("DrainGate",), NOW)
    assert hold.check(view(firing)) == Block(Reason.ALERT, "firing: DrainGate")
    assert isinstance(go.check(view(AlertsSeen((), NOW))), Clear)
    failing = AlertsSeen((), NOW, "refused", NOW)
    assert isinstance(hold.check(view(failing)), Block)
    verdict = go.check(view(failing))
    assert isinstance(verdict, Clear)
    assert verdict.abstained
    assert "--alert-unreachable=pass" in verdict.detail


def test_the_named_alerts_are_bounded() -> None:
    seen = AlertsSeen(tuple(f"A{i:02}" for i in range(25)), NOW)
    assert seen.named().endswith("A09 and 15 more")


def settings(*flags: str) -> Settings:
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    return settings_from(parser.parse_args(["--node-name=n", *flags]), {})


def test_alert_settings() -> None:
    got = settings("--alert-url=https://q:9091", "--alert-filter=^X$").alerts
    assert got is not None
    assert got.on_unreachable is OnUnreachable.HOLD
    assert got.timeout.total_seconds() == 10
    assert settings().alerts is None


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--alert-url=https://q"], "--alert-url needs --alert-filter"),
        (["--alert-filter=X"], "--alert-filter needs --alert-url"),
        (["--alert-url=q:9091", "--alert-filter=X"], "invalid --alert-url"),
        (["--alert-url=https://q", "--alert-filter=("], "--alert-filter: invalid regular"),
        (["--alert-url=https://q", "--alert-filter= "], "the alert filter is empty"),
        (
            ["--alert-url=https://q", "--alert-filter=X", "--alert-namespaces=("],
            "--alert-namespaces: invalid regular",
        ),
        (["--alert-url=https://q", "--alert-filter=X", "--alert-namespaces="], "empty"),
        (
            ["--alert-url=http://q", "--alert-filter=X", "--alert-token-file=/t"],
            "clear text",
        ),
        (
            ["--alert-url=https://q", "--alert-filter=X", "--alert-interval=500ms"],
            "at least 1s",
        ),
    ],
)
def test_bad_alert_settings_are_one_clear_line(flags: list[str], message: str) -> None:
    with pytest.raises(SettingsError, match=message.replace("(", r"\(")):
        settings(*flags)


# --- blocking pods and the node label (the same issue's other guards) -----------------------


def test_blocking_settings() -> None:
    got = settings(
        "--blocking-pod-selector=app=etl",
        "--blocking-pod-selector=batch:job-name",
        "--blocking-pod-namespace=batch",
        "--blocking-pod-namespace=etl",
    )
    assert [str(s) for s in got.scope.blocking_pod_selectors] == ["app=etl", "batch:job-name"]
    assert got.scope.blocking_pod_namespaces == ("batch", "etl")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--blocking-pod-selector=app=etl"], "needs --blocking-pod-namespace"),
        (["--blocking-pod-namespace=batch"], "needs --blocking-pod-selector"),
        (["--blocking-pod-selector=app=etl", "--blocking-pod-namespace=*"], "never cluster-wide"),
        (
            ["--blocking-pod-selector=other:app=etl", "--blocking-pod-namespace=batch"],
            "opt it in with --blocking-pod-namespace other",
        ),
        (["--blocking-pod-selector=", "--blocking-pod-namespace=batch"], "would match every pod"),
    ],
)
def test_bad_blocking_settings_are_one_clear_line(flags: list[str], message: str) -> None:
    with pytest.raises(SettingsError, match=message.replace("*", r"\*")):
        settings(*flags)


def test_only_running_blocking_pods_in_opted_in_namespaces_block() -> None:

    guard = BlockingPodGuard([parse_build_pod_selector("app=etl")], ["batch"])
    etl = {"app": "etl"}
    pods = (
        Pod("batch", "done", "Succeeded", etl),
        Pod("batch", "next", "Pending", etl),
        Pod("batch", "going", "Running", etl, deleting=True),
        Pod("tenant", "copy", "Running", etl),
        Pod("batch", "web", "Running", {"app": "web"}),
    )
    base = view(None)
    assert isinstance(guard.check(replace(base, pods=pods)), Clear)
    running = Pod("batch", "etl-1", "Running", etl)
    assert guard.check(replace(base, pods=pods, blocking_pods=(running,))) == Block(
        Reason.BLOCKING_POD, "blocking pod batch/etl-1"
    )
    assert isinstance(guard.check(replace(base, pods=pods, blocking_pods=None)), Unknown)


@pytest.mark.parametrize(
    ("reason", "seen"),
    [
        (Reason.ALERT, {"alerts": AlertsSeen(("DrainGate",), NOW)}),
        (Reason.NODE_LABEL, {"labels": {protocol.BLOCK_DRAINS_LABEL: "backup"}}),
    ],
)
def test_every_new_reason_ends_at_max_hold(reason: Reason, seen: dict[str, Any]) -> None:
    """Still blocking after max-hold, the hold is released all the same, as ``expired``."""

    request = "drain-rendered-worker-aaa"
    annotations = {
        protocol.DESIRED_DRAIN: "hold-" + request,
        protocol.HELD_DRAIN: request,
        protocol.HOLD_REASONS: reason.value,
        protocol.HELD_SINCE: protocol.format_rfc3339(NOW - timedelta(minutes=45)),
        protocol.HOLD_DETAIL: "x",
    }
    node = replace(view(None), annotations=annotations, **seen)
    guards = agent_guards(
        "--alert-url=https://q:9091", "--alert-filter=X", "--alert-unreachable=hold"
    )
    assert any(isinstance(v, Block) for v in (g.check(node) for g in guards))
    decision = decide(node, guards, timedelta(minutes=45))
    assert isinstance(decision, Release)
    assert decision.outcome is protocol.Outcome.EXPIRED
