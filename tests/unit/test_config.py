"""Settings: flags over environment over defaults, and one-sentence refusals."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drain_guard.cli import main
from drain_guard.config.values import (
    Listen,
    LogFormat,
    SettingsError,
    WorkloadRef,
    format_duration,
    parse_duration,
    parse_listen,
)
from drain_guard.core.selectors import (
    DEFAULT_BUILD_POD_SELECTORS,
    MCO_NAMESPACE,
    default_build_pod_selectors,
)
from drain_guard.settings.agent import (
    RUN_GROUPS,
    RUN_OPTIONS,
    Settings,
    add_run_arguments,
    settings_from,
)
from drain_guard.settings.host import BootedImageSource, HostSettings
from drain_guard.settings.install import Install, InstallKind
from drain_guard.settings.nodeproxy import (
    NodeProxySettings,
    add_node_proxy_arguments,
    node_proxy_settings,
)
from drain_guard.settings.shield import (
    SHIELD_GROUPS,
    SHIELD_OPTIONS,
    ShieldSettings,
    add_shield_arguments,
    shield_settings_from,
)
from drain_guard.settings.webhook import add_webhook_arguments, webhook_settings


def _parse(argv: list[str], env: dict[str, str] | None = None) -> Settings:
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    return settings_from(parser.parse_args(argv), env or {})


def test_defaults() -> None:
    s = _parse(["--node-name", "n1"])
    assert s.node_name == "n1"
    assert s.api.kubeconfig is None
    assert s.host == HostSettings("/", "/proc/cmdline")
    assert s.host.booted_image_source is BootedImageSource.OSTREE
    assert s.host.rpm_ostree_command == ("rpm-ostree",)
    assert s.reporting.listen == Listen("127.0.0.1", 9797)
    assert s.hold.max_hold == timedelta(minutes=45)
    assert tuple(str(sel) for sel in s.scope.build_pod_selectors) == DEFAULT_BUILD_POD_SELECTORS
    assert s.install == Install(InstallKind.STANDALONE)
    assert s.reporting.log_format is LogFormat.TEXT
    assert s.reporting.log_level == "INFO"


def test_environment_fills_in_and_flags_win() -> None:
    env = {
        "NODE_NAME": "from-env",
        "KUBECONFIG": "/env/kubeconfig",
        "DRAIN_GUARD_MAX_HOLD": "10m",
        "DRAIN_GUARD_LISTEN": "0.0.0.0:0",
        "DRAIN_GUARD_DAEMONSET": "ns/dg",
        "POD_NAME": "dg-x7k2p",
        "DRAIN_GUARD_LOG_FORMAT": "json",
        "DRAIN_GUARD_LOG_LEVEL": "debug",
        "DRAIN_GUARD_BUILD_POD_SELECTOR": "app=a,tier=b; other=c",
        "DRAIN_GUARD_RPM_OSTREE_COMMAND": "chroot /host rpm-ostree",
    }
    s = _parse([], env)
    assert s.node_name == "from-env"
    assert s.api.kubeconfig == "/env/kubeconfig"
    assert s.hold.max_hold == timedelta(minutes=10)
    assert s.reporting.listen == Listen("0.0.0.0", 0)
    assert s.install == Install(InstallKind.DAEMONSET, WorkloadRef("ns", "dg"), "dg-x7k2p")
    assert s.reporting.log_format is LogFormat.JSON
    assert s.reporting.log_level == "DEBUG"
    assert [str(sel) for sel in s.scope.build_pod_selectors] == ["app=a,tier=b", "other=c"]
    assert s.host.rpm_ostree_command == ("chroot", "/host", "rpm-ostree")

    s = _parse(["--node-name", "flag", "--max-hold", "90s", "--build-pod-selector", "x=y"], env)
    assert s.node_name == "flag"
    assert s.hold.max_hold == timedelta(seconds=90)
    assert [str(sel) for sel in s.scope.build_pod_selectors] == ["x=y"]


def test_build_pod_scope_is_mco_unless_namespaces_are_opted_in() -> None:
    assert _parse(["--node-name", "n"]).scope.build_pod_scope.names() == [MCO_NAMESPACE]
    flags = ["--build-pod-namespace", "tenant-b", "--build-pod-namespace", "tenant-a"]
    s = _parse(["--node-name", "n", *flags])
    assert s.scope.build_pod_scope.names() == [MCO_NAMESPACE, "tenant-a", "tenant-b"]
    env = {"DRAIN_GUARD_BUILD_POD_NAMESPACE": "tenant-a; *"}
    assert _parse(["--node-name", "n"], env).scope.build_pod_scope.names() == ["*"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--build-pod-namespace", "Tenant_A"], "invalid --build-pod-namespace 'Tenant_A'"),
        (
            ["--build-pod-selector", "tenant-a:app=build"],
            "names namespace tenant-a, outside the build-pod scope;"
            " opt it in with --build-pod-namespace tenant-a",
        ),
    ],
)
def test_build_pod_scope_refusals(argv: list[str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        _parse(["--node-name", "n", *argv])


def test_a_selector_namespace_that_is_opted_in_is_accepted() -> None:
    argv = ["--build-pod-selector", "tenant-a:app=build", "--build-pod-namespace", "tenant-a"]
    s = _parse(["--node-name", "n", *argv])
    assert [sel.namespace for sel in s.scope.build_pod_selectors] == ["tenant-a"]


def test_release_on_exit_from_environment_is_the_systemd_install() -> None:
    on = _parse(["--node-name", "n"], {"DRAIN_GUARD_RELEASE_ON_EXIT": "true"})
    assert on.install.kind is InstallKind.SYSTEMD
    off = _parse(["--node-name", "n"], {"DRAIN_GUARD_RELEASE_ON_EXIT": "0"})
    assert off.install.kind is InstallKind.STANDALONE


@pytest.mark.parametrize(
    ("argv", "kind"),
    [
        (["--daemonset", "ns/dg", "--pod-name", "p"], InstallKind.DAEMONSET),
        (
            ["--install", "daemonset", "--daemonset", "ns/dg", "--pod-name", "p"],
            InstallKind.DAEMONSET,
        ),
        (["--release-on-exit"], InstallKind.SYSTEMD),
        (["--install", "systemd"], InstallKind.SYSTEMD),
        (["--install", "systemd", "--release-on-exit"], InstallKind.SYSTEMD),
        ([], InstallKind.STANDALONE),
        (["--install", "standalone"], InstallKind.STANDALONE),
        # The credential is not the install: the node proxy's socket alone keeps holds.
        (["--api-socket", "/run/x.sock"], InstallKind.STANDALONE),
    ],
)
def test_the_install_is_one_value_given_or_implied(argv: list[str], kind: InstallKind) -> None:
    assert _parse(["--node-name", "n", *argv]).install.kind is kind


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--install", "daemonset"], "--install daemonset needs --daemonset"),
        (["--install", "daemonset", "--daemonset", "ns/dg"], "--daemonset needs --pod-name"),
        (
            ["--install", "systemd", "--daemonset", "ns/dg"],
            "--install systemd excludes --daemonset",
        ),
        (["--install", "standalone", "--release-on-exit"], "excludes --release-on-exit"),
        (["--daemonset", "ns/dg", "--release-on-exit"], "exclude each other"),
    ],
)
def test_an_install_at_odds_with_its_flags_is_refused(argv: list[str], error: str) -> None:
    with pytest.raises(SettingsError, match=error):
        _parse(["--node-name", "n", *argv])


@pytest.mark.parametrize(
    ("text", "value"),
    [
        *[("1", True), ("TRUE", True), ("yes", True), ("On", True)],
        *[("0", False), ("false", False), ("NO", False), ("off", False)],
    ],
)
def test_every_boolean_takes_the_same_spellings(text: str, value: bool) -> None:
    for flag in ("SHIELD_BUILD_PODS", "SHIELD_DEPENDENCIES"):
        env = {f"DRAIN_GUARD_{flag}": text}
        if flag == "SHIELD_DEPENDENCIES":
            env["DRAIN_GUARD_SHIELD_BUILD_PODS"] = "true"
        shield = _parse(["--node-name", "n"], env).shield
        assert getattr(shield, flag.lower().removeprefix("shield_")) is value
    released = _parse(["--node-name", "n"], {"DRAIN_GUARD_RELEASE_ON_EXIT": text})
    assert (released.install.kind is InstallKind.SYSTEMD) is value
    assert _parse(["--node-name", "n", "--shield-build-pods", text]).shield.build_pods is value


def test_an_empty_variable_is_unset() -> None:
    s = _parse(
        ["--node-name", "n"], {"DRAIN_GUARD_SHIELD_BUILD_PODS": "", "DRAIN_GUARD_MAX_HOLD": ""}
    )
    assert s.shield.build_pods is True
    assert s.hold.max_hold == timedelta(minutes=45)


@pytest.mark.parametrize(
    ("argv", "env", "fragment"),
    [
        ([], {}, "--node-name (or NODE_NAME) is required"),
        (["--node-name", "n", "--max-hold", "0s"], {}, "greater than 0"),
        (["--node-name", "n", "--max-hold", "1h"], {}, "not below 1h"),
        (["--node-name", "n", "--max-hold", "59m61s"], {}, "not below 1h"),
        (["--node-name", "n", "--max-hold", "soon"], {}, "invalid duration"),
        (["--node-name", "n", "--listen", "9797"], {}, "HOST:PORT"),
        (["--node-name", "n", "--listen", "h:70000"], {}, "0-65535"),
        (["--node-name", "n", "--daemonset", "dg"], {}, "NAMESPACE/NAME"),
        (["--node-name", "n", "--daemonset", "ns/dg"], {}, "--daemonset needs --pod-name"),
        (["--node-name", "n", "--log-format", "xml"], {}, "choose from text, json"),
        (["--node-name", "n", "--booted-image-source", "x"], {}, "choose from"),
        (["--node-name", "n", "--build-pod-selector", "a in (b"], {}, "--build-pod-selector"),
        (["--node-name", "n", "--rpm-ostree-command", ""], {}, "empty"),
        (
            ["--node-name", "n"],
            {"DRAIN_GUARD_RELEASE_ON_EXIT": "maybe"},
            "DRAIN_GUARD_RELEASE_ON_EXIT: invalid value 'maybe' (expected true/false",
        ),
        (["--node-name", "n", "--max-hold", "99999999999h"], {}, "--max-hold: duration"),
        (["--node-name", "n", "--api-stale-after", "9" * 400 + "h"], {}, "is too long"),
        (["--node-name", "n", "--shield-build-pods", "maybe"], {}, "--shield-build-pods: invalid"),
        # A value from the environment is named by its variable, not by the flag.
        (["--node-name", "n"], {"DRAIN_GUARD_MAX_HOLD": "2h"}, "DRAIN_GUARD_MAX_HOLD 2h is not"),
        (["--node-name", "n"], {"DRAIN_GUARD_MAX_HOLD": "soon"}, "DRAIN_GUARD_MAX_HOLD: invalid"),
        (["--node-name", "n"], {"DRAIN_GUARD_LISTEN": "9797"}, "DRAIN_GUARD_LISTEN: invalid"),
        (["--node-name", "n"], {"DRAIN_GUARD_LOG_LEVEL": "x"}, "invalid DRAIN_GUARD_LOG_LEVEL 'x'"),
        (
            ["--node-name", "n", "--shield-build-pods", "off"],
            {"DRAIN_GUARD_SHIELD_DEPENDENCIES": "yes"},
            "DRAIN_GUARD_SHIELD_DEPENDENCIES needs --shield-build-pods=true",
        ),
        (
            ["--node-name", "n", "--daemonset", "a/b", "--release-on-exit"],
            {},
            "exclude each other",
        ),
    ],
)
def test_invalid_settings_are_one_sentence(
    argv: list[str], env: dict[str, str], fragment: str
) -> None:
    with pytest.raises(SettingsError) as info:
        _parse(argv, env)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("45m", 2700), ("1h30m", 5400), ("1.5s", 1.5), ("250ms", 0.25), ("2m3s", 123)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@given(st.integers(0, 10), st.integers(0, 59), st.integers(0, 59))
def test_parse_duration_roundtrip(hours: int, minutes: int, seconds: int) -> None:
    text = f"{hours}h{minutes}m{seconds}s"
    assert parse_duration(text) == timedelta(hours=hours, minutes=minutes, seconds=seconds)


@given(st.text(max_size=12))
def test_parse_duration_never_crashes(text: str) -> None:
    with contextlib.suppress(SettingsError):
        parse_duration(text)


@pytest.mark.parametrize(
    ("listen", "expected"),
    [
        ("127.0.0.1:0", Listen("127.0.0.1", 0)),
        ("0.0.0.0:9464", Listen("0.0.0.0", 9464)),
        ("[::1]:8080", Listen("::1", 8080)),
        ("localhost:65535", Listen("localhost", 65535)),
    ],
)
def test_parse_listen(listen: str, expected: Listen) -> None:
    assert parse_listen(listen) == expected
    assert str(expected) == listen  # how the agent logs it


@pytest.mark.parametrize(
    ("listen", "why"),
    [
        # Host ::1 and port 80, or the address ::1:80 and no port? Refused, as Go's
        # net.SplitHostPort refuses it ("too many colons"): IPv6 hosts take brackets.
        ("::1:80", r"write IPv6 hosts as \[::1\]:PORT"),
        ("[::1:80", r"write IPv6 hosts as \[::1\]:PORT"),
        ("[nonsense]:80", "invalid IPv6 address"),
        ("9464", "expected HOST:PORT"),
        (":9464", "name the host"),
        ("", "expected HOST:PORT"),
        ("host:", "invalid port"),
        ("host:http", "invalid port"),
        ("host:70000", "invalid port"),
    ],
)
def test_parse_listen_rejects(listen: str, why: str) -> None:
    with pytest.raises(SettingsError, match=why):
        parse_listen(listen)


def test_api_stale_after_is_a_positive_duration() -> None:
    assert _parse(["--node-name", "n1"]).api.stale_after == timedelta(minutes=10)
    assert _parse(["--node-name", "n1", "--api-stale-after", "90s"]).api.stale_after == (
        timedelta(seconds=90)
    )
    with pytest.raises(SettingsError, match="--api-stale-after must be greater than 0"):
        _parse(["--node-name", "n1", "--api-stale-after", "0s"])


def test_watch_timeout_is_at_least_five_seconds() -> None:
    # Issue 36: the default the flags give, 30 minutes, is the one measured at rest.
    assert _parse(["--node-name", "n1"]).api.watch_timeout == timedelta(minutes=30)
    assert _parse(["--node-name", "n1"]).reporting.confinement_check_interval == timedelta(hours=1)
    assert _parse(["--node-name", "n1"], {"DRAIN_GUARD_WATCH_TIMEOUT": "5s"}).api.watch_timeout == (
        timedelta(seconds=5)
    )
    with pytest.raises(SettingsError, match=r"--watch-timeout must be at least 5s: the API"):
        _parse(["--node-name", "n1", "--watch-timeout", "4s"])


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(2700, "45m"), (5400, "1h30m"), (90, "1m30s"), (0.25, "250ms"), (0, "0s"), (3600, "1h")],
)
def test_format_duration_is_what_the_flags_take(seconds: float, text: str) -> None:
    assert format_duration(timedelta(seconds=seconds)) == text
    assert parse_duration(text) == timedelta(seconds=seconds)


def shield_settings(*argv: str, env: dict[str, str] | None = None) -> ShieldSettings:
    parser = argparse.ArgumentParser()
    add_shield_arguments(parser)
    return shield_settings_from(parser.parse_args(argv), env or {})


def test_shield_settings_default_to_the_build_pods_of_mcos_namespace() -> None:
    s = shield_settings()
    assert s.scope.build_pod_selectors == default_build_pod_selectors()
    assert s.reporting.listen == Listen("127.0.0.1", 9798)
    assert s.deployment is None
    env = {"DRAIN_GUARD_DEPLOYMENT": "drain-guard/drain-guard-shield"}
    assert shield_settings(env=env).deployment == WorkloadRef("drain-guard", "drain-guard-shield")


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (
            ["--build-pod-selector", "builds:openshift.io/build.name"],
            {},
            "--build-pod-selector builds:openshift.io/build.name names namespace builds: the"
            f" central shield keeps budgets in {MCO_NAMESPACE} only",
        ),
        (
            ["--build-pod-selector", "!openshift.io/build.name"],
            {},
            "--build-pod-selector !openshift.io/build.name has no label a pod must have"
            " (key=value, key in (...), or key): the central shield would watch every pod of"
            f" {MCO_NAMESPACE}; add one",
        ),
        (["--deployment", "shield"], {}, "invalid --deployment 'shield' (expected NAMESPACE/NAME)"),
        ([], {"DRAIN_GUARD_DEPLOYMENT": "a/b/c"}, "invalid DRAIN_GUARD_DEPLOYMENT 'a/b/c'"),
    ],
)
def test_shield_settings_refuse_in_one_line(
    argv: list[str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(SettingsError) as refused:
        shield_settings(*argv, env=env)
    assert str(refused.value).startswith(message)
    assert "\n" not in str(refused.value)


def test_a_listen_address_without_a_host_says_which_to_write() -> None:
    """Issue 25: --listen :9797 was refused with no hint of what to write instead."""
    with pytest.raises(
        SettingsError, match=r"127\.0\.0\.1:9797 for this host only, or 0\.0\.0\.0:9797"
    ):
        parse_listen(":9797")


def test_the_start_up_line_shows_every_setting_as_a_flag_takes_it() -> None:
    """Derived from the fields (config/effective.py): a new setting shows with no second list,
    under its group, as ``run --help`` lists them."""
    s = _parse(["--node-name", "n", "--max-hold", "90s", "--daemonset", "ns/dg", "--pod-name", "p"])
    shown: dict[str, Any] = s.effective()
    assert list(shown) == [_camel(f.name) for f in dataclasses.fields(Settings)]
    for group in dataclasses.fields(Settings):
        value = getattr(s, group.name)
        if dataclasses.is_dataclass(value):
            assert list(shown[_camel(group.name)]) == [
                _camel(f.name) for f in dataclasses.fields(value)
            ]
    assert json.loads(json.dumps(shown)) == shown
    assert (shown["nodeName"], shown["hold"]["maxHold"], shown["reporting"]["listen"]) == (
        "n",
        "1m30s",
        "127.0.0.1:9797",
    )
    assert shown["install"] == {"kind": "daemonset", "daemonset": "ns/dg", "podName": "p"}
    assert shown["scope"]["buildPodScope"] == ["openshift-machine-config-operator"]
    assert shown["guards"] == [guard.reason.value for guard in s.guards]


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(word.capitalize() for word in rest)


def test_each_group_of_run_help_is_one_field_of_its_settings() -> None:
    """The groups of ``run --help`` are the typed groups of :class:`Settings`, in its order
    (the node's name, the guards and the status group named for what they hold)."""
    fields = [f.name for f in dataclasses.fields(Settings)]
    titles = [group.title for group in RUN_GROUPS]
    named = {"node": "node_name", "status and logs": "reporting"}
    assert [named.get(title, title) for title in titles] == fields


def test_run_options_are_grouped_once_each_as_its_help_shows_them() -> None:
    """``drain-guard run --help`` lists its options by group (settings/agent.py RUN_GROUPS)."""
    flags = [option.flag for option in RUN_OPTIONS]
    assert len(flags) == len(set(flags))
    titles = [group.title for group in RUN_GROUPS]
    for title in ("install", "api", "host", "hold", "scope", "shield", "alerts"):
        assert title in titles
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    shown = parser.format_help()
    host = shown.index("\nhost:\n")
    assert host < shown.index("  --host-root", host) < shown.index("\nhold:\n")


def test_each_group_of_shield_help_is_one_field_of_its_settings() -> None:
    """``drain-guard shield``'s settings are typed per group as ``run``'s: the groups of its
    ``--help`` are :class:`ShieldSettings`' fields, in its order (the Deployment's group named
    for what it holds), and the start-up line shows each under its group."""
    fields = [f.name for f in dataclasses.fields(ShieldSettings)]
    titles = [group.title for group in SHIELD_GROUPS]
    named = {"install": "deployment", "status and logs": "reporting"}
    assert [named.get(title, title) for title in titles] == fields
    flags = [option.flag for option in SHIELD_OPTIONS]
    assert len(flags) == len(set(flags))
    parser = argparse.ArgumentParser()
    add_shield_arguments(parser)
    shown = parser.format_help()
    order = [shown.index(f"\n{title}:\n") for title in titles]
    assert order == sorted(order)
    assert order[0] < shown.index("  --kubeconfig") < order[1] < shown.index("  --build-pod")
    effective: dict[str, Any] = shield_settings("--deployment", "dg/shield").effective()
    assert list(effective) == [_camel(f) for f in fields]
    assert effective["reporting"]["listen"] == "127.0.0.1:9798"
    assert effective["deployment"] == "dg/shield"


def test_node_proxy_settings_are_typed_and_need_a_node() -> None:
    parser = argparse.ArgumentParser()
    add_node_proxy_arguments(parser)
    settings = node_proxy_settings(parser.parse_args([]), {"NODE_NAME": "worker-0"})
    assert settings == NodeProxySettings("worker-0")
    flagged = node_proxy_settings(parser.parse_args(["--node-name", "w1"]), {"NODE_NAME": "x"})
    assert flagged.node_name == "w1"
    with pytest.raises(SettingsError, match="--node-name"):
        node_proxy_settings(parser.parse_args([]), {})


def test_node_proxy_without_a_node_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert main(["node-proxy"]) == 2
    assert (
        capsys.readouterr().err
        == "drain-guard node-proxy: error: --node-name (NODE_NAME) is required\n"
    )


def test_webhook_settings_are_typed_and_checked() -> None:
    parser = argparse.ArgumentParser()
    add_webhook_arguments(parser)
    base = ["--tls-cert-file", "c.pem", "--tls-private-key-file", "k.pem"]
    settings = webhook_settings(parser.parse_args(base), {"KUBECONFIG": "/k"})
    assert (str(settings.listen), settings.kubeconfig) == ("0.0.0.0:9443", "/k")
    assert "ECDHE-RSA-AES128-GCM-SHA256" in settings.tls12_ciphers
    for argv, error in [
        (["--agent-account", "nocolon"], "expected NAMESPACE:NAME"),
        (["--tls-cipher-suites", "TLS_RSA_WITH_RC4_128_SHA"], "unsupported suite"),
        (["--tls-cipher-suites", "TLS_AES_128_GCM_SHA256"], "no TLS 1.2 suite"),
        (["--listen", "nowhere"], "--listen"),
    ]:
        with pytest.raises(SettingsError, match=error):
            webhook_settings(parser.parse_args([*base, *argv]), {})
