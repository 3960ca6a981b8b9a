"""The one launcher and log reader of agent processes (demo, tests, chaos, benchmarks)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from drain_guard_sim.harness.agentproc import AgentError, AgentProcess

# A process that logs as the agent does: a line far over a stream's 64 KiB line limit, then
# the lines a caller waits for, then it waits for a signal.
SCRIPT = """
import json, sys, time
huge = "x" * (300 * 1024)
print(json.dumps({"message": "decision", "request": huge}), file=sys.stderr, flush=True)
print(json.dumps({"message": "listening", "port": 4242}), file=sys.stderr, flush=True)
print("not json", file=sys.stderr, flush=True)
print(json.dumps({"message": "decision", "request": "drain-x"}), file=sys.stderr, flush=True)
time.sleep(60)
"""


async def _attach(
    tmp_path: Path, script: str = SCRIPT, seen: list[str] | None = None
) -> AgentProcess:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    return AgentProcess.attach(
        "n",
        proc,
        on_record=None if seen is None else lambda r: seen.append(r["request"][:8]),
        log_path=tmp_path / "log",
    )


async def test_reads_past_a_line_over_64_kib(tmp_path: Path) -> None:
    decisions: list[str] = []
    agent = await _attach(tmp_path, seen=decisions)
    try:
        record = await agent.wait_log(lambda r: r.get("request") == "drain-x")
        assert record["message"] == "decision"
        assert len(agent.records[0]["request"]) == 300 * 1024
        assert agent.port == 4242
        assert await agent.wait_synced() >= 0
        assert agent.lines[2] == "not json"
        assert await agent.wait_line("not json") == "not json"
        assert decisions == ["xxxxxxxx", "drain-x"]
    finally:
        assert await agent.stop() != 0  # SIGTERM, unhandled
    assert agent.ended is not None
    assert (tmp_path / "log").read_text().splitlines()[1:] == agent.lines[1:]


async def test_a_wait_ends_when_the_process_exits(tmp_path: Path) -> None:
    agent = await _attach(tmp_path, "import sys; print('bye', file=sys.stderr)")
    with pytest.raises(AgentError, match="exited:\nbye"):
        await agent.wait_log(lambda r: False)
    await agent.closed()
    assert agent.lines == ["bye"]
    assert json.dumps(agent.records) == "[]"
