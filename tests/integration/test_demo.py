"""``drain-guard demo`` end to end, and its verdict rules on made-up outcomes."""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from pathlib import Path

import pytest

from drain_guard import protocol
from drain_guard_sim.actors.mco import McoVersion
from drain_guard_sim.actors.timeline import Timeline
from drain_guard_sim.apiserver.server import SimApiServer
from drain_guard_sim.harness.agentproc import DECISION
from drain_guard_sim.harness.demo import MCO_NAMES, configure_parser
from drain_guard_sim.harness.demoagents import AgentDecision, held_reasons
from drain_guard_sim.harness.demoreport import RunResult, times_note, verdict
from drain_guard_sim.harness.outcome import BuildResult, Cordon, Outcome
from tests.helpers import (
    CONFIG_B,
    IMAGE_B,
    NODE,
    StartAgent,
    add_build_pod,
    mcd_request,
    wait_annotation,
)

X = "registry/ocb-image@sha256:" + "a" * 64
Y = "registry/ocb-image@sha256:" + "b" * 64


def result(
    *, phase: str = "Complete", cordons: tuple[Cordon, ...] = (), rollout: bool = True
) -> RunResult:
    build = BuildResult("build-r", phase, "", "worker-0", started=1.0, finished=5.0)
    outcome = Outcome(build, list(cordons), [], [], {})
    return RunResult("with drain-guard", outcome, Timeline(), 0.01, X, {}, rollout, 0.0)


def cordon(t: float, desired: str) -> Cordon:
    return Cordon("worker-0", t, "drain-r", desired, X, None)


def test_verdict_passes_only_when_every_goal_is_met() -> None:
    baseline = result(phase="Error", cordons=(cordon(2.0, X),), rollout=False)
    assert verdict(baseline, result(cordons=(cordon(6.0, Y),)))[1]
    assert not verdict(baseline, result(phase="Error"))[1]
    assert not verdict(baseline, result(cordons=(cordon(3.0, Y),)))[1]  # during the build
    assert not verdict(baseline, result(cordons=(cordon(6.0, X),)))[1]  # unchanged image
    assert not verdict(baseline, result(rollout=False))[1]
    rows, _ = verdict(baseline, result())
    assert rows[1] == ("build outcome", "Error on worker-0", "Complete on worker-0")


async def test_the_demo_reads_a_real_agents_structured_log(
    api: SimApiServer, start_agent: StartAgent
) -> None:
    """What the demo reads of an agent, read from a real agent: its port (the ``port`` field of
    its listening line; ``start_agent`` waits for it) and its decisions (the ``decision``
    records' fields). A field or an outcome renamed in the agent fails here, not in the demo's
    verdict a minute later."""
    add_build_pod(api)
    agent = await start_agent()
    status, _ = await agent.http("/status")
    assert status == 200
    drain = f"drain-{CONFIG_B}"
    mcd_request(api, drain, **{protocol.DESIRED_IMAGE: IMAGE_B})
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + drain)
    await agent.wait_log(lambda r: r.get("message") == DECISION and r.get("request") == drain)
    decisions = [AgentDecision.from_record(r) for r in agent.records if r["message"] == DECISION]
    held = next(d for d in decisions if d.request == drain)
    assert (held.node, held.reasons) == (NODE, ("build-pod",))
    assert held.why
    assert held_reasons(decisions) == {NODE: {"build-pod"}}


def test_a_decision_record_missing_a_field_is_a_clear_error() -> None:
    record = {"node": NODE, "request": "", "outcome": "idle", "reasons": [], "why": "nothing"}
    assert AgentDecision.from_record(record).outcome == "idle"
    with pytest.raises(ValueError, match="'outcome'"):
        AgentDecision.from_record({**record, "outcome": None})
    with pytest.raises(ValueError, match="'reasons'"):
        AgentDecision.from_record({**record, "reasons": "build-pod"})


async def run_demo(*args: str) -> tuple[int, str]:
    """``drain-guard demo ARGS`` as a user runs it: exit code and everything it printed."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "drain_guard",
        "demo",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    assert proc.returncode is not None
    text = out.decode()
    assert_no_noise(text)
    return proc.returncode, text


#: What a demo must never print (issue 37, first contact): a task left pending at exit (asyncio's
#: dump when it is garbage-collected), a traceback, an exception ignored in a destructor, a
#: warning.
NOISE = ("Task was destroyed", "Traceback", "Exception ignored", "Warning:", "never awaited")


def assert_no_noise(text: str) -> None:
    found = [line for line in text.splitlines() if any(n in line for n in NOISE)]
    assert not found, text


@pytest.mark.timeout(240)
async def test_demo_passes_and_explains(tmp_path: Path) -> None:
    async with asyncio.timeout(220):
        code, text = await run_demo("--workdir", str(tmp_path))
    assert code == 0, text
    assert "Error (BuildPodDeleted) on worker-0" in text  # the seed, without agents
    assert "Complete on worker-0" in text
    assert "worker-0: build-pod, noop-image" in text
    assert "PASS: no drain during the build" in text
    assert "Image pullspecs equal, skipping rpm-ostree rebase" in text
    assert "drain is already completed on this node" in text
    assert "Times are MCO seconds: every MCO duration is played 20x faster" in text
    # The drain for the same image after the release is listed, and said why it is fine.
    assert re.search(r"- worker-0 at \d+s; the MCD's update: .* \(same image\)", text)
    assert "is the one drain the\n  node needed" in text


@pytest.mark.timeout(200)
@pytest.mark.parametrize("mco", ["4.16", "4.18"])
async def test_demo_on_a_later_mco_saves_a_build_from_the_control_plane_pools_drain(
    mco: str, tmp_path: Path
) -> None:
    """Issue 38 item 5: MCO 4.16+ targets no worker during the build, but the control-plane
    pool's rollout drains the node the build runs on: without drain-guard the build pod is
    evicted (4.16: the build fails and the worker pool stops; 4.18: its Job starts it over),
    with it that drain is held (build-pod) until the build ends. The revert that follows (D1
    on 4.16) is let through at once: no build will replace its same-image drains."""
    async with asyncio.timeout(190):
        code, text = await run_demo(
            "--mco-version", mco, "--nodes", "2", "--timeline", "none", "--workdir", str(tmp_path)
        )
    assert code == 0, text
    assert re.search(r"build pods evicted +1 \(build-\S+\) +0\n", text), text
    assert re.search(r"holds \(reasons\) +- +master-0: build-pod\n", text), text
    assert re.search(r"control-plane pool's rollout +complete +complete\n", text), text
    assert re.search(r"worker pool's rollout \(new image\) +\S+( \S+)? +complete\n", text), text
    # Then the worker MachineConfig is deleted: the pool goes back to a config built before.
    assert re.search(r"revert: drains held +- +none: let through at once\n", text), text
    assert re.search(r"revert: pool back on its config +\S+( \S+)? +complete\n", text), text
    if mco == "4.16":
        assert "Error (BuildPodDeleted)" in text
        assert "not complete" in text
        # D1: every worker's drain is for the image it runs, and nothing will replace it.
        assert re.search(r"revert: drains for the booted image +- +2 \(worker-0, worker-1\)", text)
    else:
        assert text.count("Complete after") == 2  # 4.18's Job builds again, later
        assert "OCPBUGS-58238" in text
        assert re.search(r"revert: drains for the booted image +0 +0\n", text), text
    assert "PASS: no build pod evicted, the build succeeded, both pools rolled out, no" in text


async def test_demo_on_the_real_api_without_its_binaries_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DRAIN_GUARD_CONTROL_PLANE_BIN", str(tmp_path))
    code, text = await run_demo("--api", "real")
    assert code == 1
    assert text.splitlines() == [
        f"drain-guard demo: --api real needs etcd, kube-apiserver, kube-controller-manager in "
        f"{tmp_path} (make control-plane builds them)"
    ]


def test_the_times_on_the_real_api_say_they_are_scaled() -> None:
    """On the real API server the timelines' seconds include its own delays, scaled up."""
    note = " ".join(times_note("real", 0.1).split())
    assert note.startswith("Times are MCO seconds: every MCO duration is played 10x faster")
    assert "the real API server's own delays show 10x longer than they took" in note
    assert "API server" not in times_note("sim", 0.05)


@pytest.mark.parametrize(
    ("name", "version"),
    [("4.17", McoVersion.V4_16), ("4.19", McoVersion.V4_18), ("4.15", McoVersion.V4_15)],
)
def test_the_demo_takes_every_release_it_plays(name: str, version: McoVersion) -> None:
    """4.17 is played by the 4.16 model and 4.19 by the 4.18 one (docs/mco-versions.md)."""
    parser = argparse.ArgumentParser()
    configure_parser(parser, agent_max_hold=2700.0)
    assert MCO_NAMES[parser.parse_args(["--mco-version", name]).mco_version] is version


def test_the_demo_refuses_a_release_it_does_not_play(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    configure_parser(parser, agent_max_hold=2700.0)
    with pytest.raises(SystemExit):
        parser.parse_args(["--mco-version", "4.20"])
    assert "invalid choice: '4.20'" in capsys.readouterr().err
