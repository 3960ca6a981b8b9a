"""The CLI's pure parts: one-line usage errors, the status view, lazy imports."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drain_guard import guards, protocol
from drain_guard.cli import build_parser, main
from drain_guard.config.values import SettingsError
from drain_guard.core.nodes import NodeObj
from drain_guard.decision import decisions
from drain_guard.decision.decide import stale_keys
from drain_guard.settings.agent import settings_from
from drain_guard.status.node import NodeState, node_state
from drain_guard_sim.__main__ import build_drain_guard_demo_parser

HELD = {
    protocol.DESIRED_DRAIN: "hold-drain-rendered-worker-1",
    protocol.LAST_APPLIED_DRAIN: "uncordon-rendered-worker-0",
    protocol.HELD_DRAIN: "drain-rendered-worker-1",
    protocol.HOLD_REASONS: "build-pod,noop-image",
    protocol.HELD_SINCE: "2026-01-02T03:04:05Z",
    protocol.HOLD_DETAIL: "build-pod: build pod ns/p",
    protocol.HOLD_EXPIRES: "2026-01-02T03:49:05Z",
}


def _node(annotations: dict[str, str], unschedulable: bool = False) -> NodeObj:
    return NodeObj("n1", "7", annotations, unschedulable)


def _state(annotations: dict[str, str], unschedulable: bool = False) -> NodeState:
    return node_state(_node(annotations, unschedulable), datetime(2026, 1, 2, 3, 10, tzinfo=UTC))


def _text(state: NodeState) -> str:
    return "\n".join(state.text_lines())


def test_node_state_of_a_held_node() -> None:
    state = _state(HELD, unschedulable=True)
    assert state.hold is not None
    assert state.hold.held_request == "drain-rendered-worker-1"
    assert [r.reason for r in state.hold.reasons] == ["build-pod", "noop-image"]
    doc = state.to_json()
    assert (doc["held"], doc["heldRequest"]) == (True, "drain-rendered-worker-1")
    assert (doc["since"], doc["expiresAt"]) == ("2026-01-02T03:04:05Z", "2026-01-02T03:49:05Z")
    text = _text(state)
    assert "  held since:    2026-01-02T03:04:05Z (5m55s ago)" in text
    assert "  reason:        build-pod: build pod ns/p" in text
    assert "cordoned" in text


def test_node_state_without_a_hold() -> None:
    state = _state({protocol.DESIRED_DRAIN: "uncordon-x"})
    assert state.hold is None
    assert not state.listed
    assert "no hold" in _text(state)


def test_node_state_reports_a_malformed_hold_as_held() -> None:
    # release can release it (the hold- value is drain-guard's), so status shows the hold.
    bad = {**HELD, protocol.HOLD_REASONS: "sun spots"}
    state = _state(bad)
    assert state.hold is not None
    assert state.hold.since is None
    assert state.error is not None
    assert "sun spots" in state.error
    text = _text(state)
    assert "malformed" in text
    assert "  held request:  drain-rendered-worker-1" in text


SUPERSEDED = {
    **HELD,
    protocol.DESIRED_DRAIN: "drain-rendered-worker-2",
}


def test_a_superseded_hold_is_not_held_and_its_keys_are_stale() -> None:
    state = _state(SUPERSEDED)
    assert state.hold is None
    assert state.stale_keys == protocol.OWNED_KEYS
    text = _text(state)
    assert "held request" not in text
    assert "stale keys: drain-guard.io/held-drain" in text
    assert stale_keys(SUPERSEDED) == protocol.OWNED_KEYS


def test_a_foreign_hold_value_is_not_held() -> None:
    state = _state({protocol.DESIRED_DRAIN: "hold-by-someone-else"})
    assert state.hold is None
    assert state.stale_keys == ()
    assert state.foreign is not None
    assert "not written by drain-guard" in state.foreign
    assert state.listed
    assert "no drain-guard hold" in _text(state)


@pytest.mark.parametrize(
    ("annotations", "stale"),
    [
        (HELD, ()),
        # The MCD wrote the held request again over the hold: the agent resumes it.
        ({**HELD, protocol.DESIRED_DRAIN: "drain-rendered-worker-1"}, ()),
        ({protocol.DESIRED_DRAIN: "drain-x", protocol.RELEASED: "drain-x"}, ()),
        (
            {protocol.DESIRED_DRAIN: "drain-y", protocol.RELEASED: "drain-x"},
            (protocol.RELEASED,),
        ),
        ({protocol.DESIRED_DRAIN: "drain-y", protocol.HELD_SINCE: "x"}, (protocol.HELD_SINCE,)),
    ],
)
def test_stale_keys(annotations: dict[str, str], stale: tuple[str, ...]) -> None:
    assert stale_keys(annotations) == stale


@pytest.mark.parametrize(
    "argv",
    [["bogus"], ["run", "--nope"], ["status", "-o", "xml"], ["release"], []],
)
def test_usage_errors_are_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("drain-guard")


def test_invalid_run_settings_are_one_line(
    capsys: pytest.CaptureFixture[str], no_env: None
) -> None:
    assert main(["run", "--node-name", "n", "--max-hold", "61m"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("drain-guard run: error: --max-hold 61m is not below 1h")


def test_run_does_not_import_the_simulator_or_the_demo() -> None:
    code = (
        "import sys\n"
        "from drain_guard.cli import build_parser\n"
        "import drain_guard.programs.runner\n"
        "build_parser().parse_args(['run', '--node-name', 'n'])\n"
        "loaded = [m for m in sys.modules if m.startswith('drain_guard_sim')]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_cli_imports_no_api_client_until_a_command_runs() -> None:
    """kubernetes_asyncio's config reads the home directory when imported, which the image's
    user (65532, no passwd entry, no HOME) has none of: ``drain-guard --help`` crashed there
    when the preflight's rows imported the Event recorder for a reason's name."""
    code = (
        "import sys\n"
        "from drain_guard.cli import build_parser\n"
        "build_parser().format_help()\n"
        "loaded = [m for m in sys.modules if m.startswith('kubernetes_asyncio')]\n"
        "assert not loaded, loaded[:3]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_demo_hands_the_agents_own_max_hold_default_to_the_simulator(
    monkeypatch: pytest.MonkeyPatch, no_env: None
) -> None:
    """One place for the default: the demo's agents get it from ``drain-guard run``'s own
    table, handed over as the default of the demo's --agent-max-hold (a user's flag wins),
    never a copy in the simulator."""
    handed: list[str] = []

    def execv(path: str, argv: list[str]) -> None:
        handed.extend(argv)

    monkeypatch.setattr("os.execv", execv)
    main(["demo", "--nodes", "2"])
    run = settings_from(build_parser().parse_args(["run", "--node-name", "n"]), {})
    assert handed[1:4] == ["-m", "drain_guard_sim", "--as-drain-guard-demo"]
    assert handed[5:] == ["--nodes", "2"]
    demo_parser = build_drain_guard_demo_parser(float(handed[4]))
    assert demo_parser.parse_args(handed[5:]).agent_max_hold == run.hold.max_hold.total_seconds()
    assert demo_parser.parse_args(["--agent-max-hold", "5"]).agent_max_hold == 5


def test_the_simulators_demo_without_the_agents_max_hold_is_a_usage_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "drain_guard_sim", "demo", "--nodes", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "the following arguments are required: --agent-max-hold" in proc.stderr


# --- what status says of a hold and a hold request (issue 25) --------------------------------

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
MAX_HOLD = timedelta(minutes=45)
MCO = "openshift-machine-config-operator"
STORAGE = {
    protocol.DESIRED_DRAIN: "hold-drain-rendered-worker-5620",
    protocol.LAST_APPLIED_DRAIN: "uncordon-rendered-worker-1111",
    protocol.HELD_DRAIN: "drain-rendered-worker-5620",
    protocol.HOLD_REASONS: "build-pod,manual",
    protocol.HELD_SINCE: "2026-03-01T11:47:55Z",
    protocol.HOLD_DETAIL: decisions.hold_detail(
        [
            guards.Block(protocol.Reason.BUILD_POD, f"build pod {MCO}/build-x"),
            guards.Block(
                protocol.Reason.MANUAL, "hold-request until 2099-01-01T00:00:00Z: storage migration"
            ),
        ]
    ),
    protocol.HOLD_REQUEST: "2099-01-01T00:00:00Z;storage migration",
    protocol.DESIRED_CONFIG: "rendered-worker-5620b8c1d2e3f4a5b6c7d8e9f0a1b2c3",
    protocol.HOLD_EXPIRES: "2026-03-01T12:32:55Z",
}


def _shown(annotations: dict[str, str]) -> str:
    return "\n".join(node_state(NodeObj("worker-1", "7", annotations, False), NOW).text_lines())


def test_status_reads_when_a_hold_ends_from_the_record() -> None:
    state = node_state(NodeObj("worker-1", "7", STORAGE, False), NOW)
    assert state.to_json()["expiresAt"] == "2026-03-01T12:32:55Z"


def test_status_of_an_older_agents_record_says_its_end_is_unknown() -> None:
    older = {k: v for k, v in STORAGE.items() if k != protocol.HOLD_EXPIRES}
    text = _shown(older)
    assert "  expires:       unknown: an older agent's record, without hold-expires" in text


def test_status_says_since_when_until_when_and_what_releases_the_hold() -> None:
    text = _shown(STORAGE)
    assert "  held since:    2026-03-01T11:47:55Z (12m05s ago)" in text
    assert "  expires:       2026-03-01T12:32:55Z (in 32m55s; then released" in text
    assert f"  released:      build-pod: when build pod {MCO}/build-x ends" in text
    assert "  released:      manual: when the hold request expires at 2099-01-01T00:00:00Z" in text
    assert "  released:      now by drain-guard release --node-name worker-1" in text
    assert "capped by --max-hold: the hold ends at 2026-03-01T12:32:55Z" in text
    # The pool in view (issue 25): its rollout waits on this node.
    assert (
        "  pool:          worker pool waiting: its rollout goes on past worker-1 only once the"
        " hold ends" in text
    )


def test_the_configuration_docs_show_the_real_output() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    section = docs.split("## `drain-guard status`", 1)[1]
    example = section.split("```\n", 2)[1]
    assert example == _shown(STORAGE) + "\n"


@pytest.mark.parametrize(
    ("request_value", "shown"),
    [
        ("30m;db failover", "hold request: INVALID, holds nothing: '30m' is not an RFC 3339"),
        ("2026-03-01T11:00:00Z;done", "hold request: EXPIRED at 2026-03-01T11:00:00Z (1h00m ago)"),
        ("2026-03-01T12:30:00Z", "hold request: until 2026-03-01T12:30:00Z (in 30m00s)"),
        (
            "2026-03-01T13:00:00Z",
            "hold request: until 2026-03-01T13:00:00Z (in 1h00m); capped by --max-hold: a drain"
            " is held at most the agent's --max-hold (below 1h",
        ),
    ],
)
def test_a_hold_request_without_a_hold_is_listed_and_marked(request_value: str, shown: str) -> None:
    annotations = {protocol.HOLD_REQUEST: request_value}
    state = node_state(NodeObj("worker-1", "7", annotations, False), NOW)
    assert state.listed
    text = _shown(annotations)
    assert shown in text
    assert ("capped" in text) is ("13:00" in request_value)


def test_status_escapes_control_characters_of_annotations() -> None:
    """Issue 21 item 7: a value could forge lines or drive the terminal."""
    forged = {**HELD, protocol.HOLD_DETAIL: "x\n  released now by: nobody\x1b[2J"}
    text = "\n".join(_state(forged).text_lines())
    assert "\x1b" not in text
    assert "\\x1b[2J" in text
    forged_lines = [line for line in text.splitlines() if "nobody" in line]
    assert forged_lines[0] == "  reason:        build-pod: x\\n  released now by: nobody\\x1b[2J"
    assert all(line.startswith(("  reason:", "  released:      ")) for line in forged_lines)


def test_status_accepts_max_hold_and_ignores_it() -> None:
    """Scripts written for an older status pass --max-hold: it still parses, and reads
    nothing (a hold's end is on its Node)."""
    assert build_parser().parse_args(["status", "--max-hold", "20m"]).max_hold == "20m"
    assert build_parser().parse_args(["status"]).max_hold is None


@given(
    until=st.datetimes(
        min_value=datetime(2000, 1, 1), max_value=datetime(2999, 1, 1), timezones=st.just(UTC)
    ).map(lambda t: t.replace(microsecond=0)),
    reason=st.text(
        st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="\x85"),
        min_size=1,
        max_size=60,
    ).filter(lambda r: r.strip()),
)
def test_a_hold_request_written_by_hold_reads_back(until: datetime, reason: str) -> None:
    value = guards.format_hold_request(until, reason)
    assert guards.parse_hold_request(value) == (until, " ".join(reason.split()))


def test_a_negative_duration_is_refused_as_such(no_env: None) -> None:
    """Issue 25: --max-hold -5m read as a missing argument."""
    args = build_parser().parse_args(["run", "--node-name", "n", "--max-hold", "-5m"])
    with pytest.raises(SettingsError, match="--max-hold"):
        settings_from(args, {})
