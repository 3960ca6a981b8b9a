"""Helpers for the tests that drive a real agent process against the simulator: the worker
Node the ``api`` fixture creates, the agent's identity, and event-driven waits.

Fixtures stay in ``conftest.py``; everything a test imports is here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import pytest

from drain_guard import protocol
from drain_guard.guards import Guard
from drain_guard.settings.agent import add_run_arguments, settings_from
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.apiserver.server import SimApiServer
from drain_guard_sim.apiserver.writelog import WriteRecord
from drain_guard_sim.harness.agentproc import AgentProcess, clean_environment, spawn_agent

NODE = "worker-0"
AGENT_USER = "system:serviceaccount:drain-guard:drain-guard"
MCO_NS = "openshift-machine-config-operator"
REGISTRY = "image-registry.openshift-image-registry.svc:5000/openshift-machine-config-operator"
IMAGE_A = f"{REGISTRY}/ocb-image@sha256:{'a' * 64}"
IMAGE_B = f"{REGISTRY}/ocb-image@sha256:{'b' * 64}"
CONFIG_A = "rendered-worker-" + "a" * 32
CONFIG_B = "rendered-worker-" + "b" * 32
# Seconds: the upper bound of an event-driven wait, never reached by a passing test. Generous,
# for a loaded machine running the suite on several workers (an agent's first log line took
# over 15 s there).
WAIT = 60.0


def agent_guards(*flags: str) -> tuple[Guard, ...]:
    """The guards ``drain-guard run`` with ``flags`` checks, built as the agent builds them."""
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    return settings_from(parser.parse_args(["--node-name", NODE, *flags]), {}).guards


def require_tool(name: str) -> str:
    """The path of a system tool the test needs: the venv's bin directory first (tools that
    come from PyPI), then PATH. A missing tool skips the test on a developer's machine and
    fails it in CI (``CI`` set, and not ``false``), where scripts/system-deps.sh installs it."""
    venv_tool = Path(sys.executable).parent / name
    if venv_tool.exists():
        return str(venv_tool)
    found = shutil.which(name)
    if found is not None:
        return found
    require_or_skip(f"{name} is not installed (scripts/system-deps.sh installs it)")


def require_or_skip(message: str) -> NoReturn:
    """A missing prerequisite skips the test on a developer's machine and fails it in CI
    (``CI`` set, and not ``false``), where ``make test`` has set everything up."""
    if os.environ.get("CI", "").lower() not in ("", "false", "0"):
        pytest.fail(message)
    pytest.skip(message)


def node_annotations(api: SimApiServer, name: str = NODE) -> dict[str, str]:
    annotations: dict[str, str] = api.get("nodes", name)["metadata"].get("annotations") or {}
    return annotations


def mcd_request(api: SimApiServer, value: str, name: str = NODE, **extra: str) -> int:
    """Write desiredDrain as the MCD does (strategic merge, no resourceVersion); returns rv."""
    node = api.patch(
        "nodes",
        name,
        {"metadata": {"annotations": {protocol.DESIRED_DRAIN: value, **extra}}},
        user="system:serviceaccount:openshift-machine-config-operator:machine-config-daemon",
    )
    return int(node["metadata"]["resourceVersion"])


def add_build_pod(api: SimApiServer, name: str = "build-pod", node: str = NODE) -> None:
    api.create(
        "pods",
        {
            "metadata": {
                "name": name,
                "namespace": MCO_NS,
                "labels": {"openshift.io/build.name": f"build-{CONFIG_B}"},
            },
            "spec": {"nodeName": node, "containers": [{"name": "build", "image": "builder"}]},
            "status": {"phase": "Running"},
        },
        MCO_NS,
    )


def agent_writes(
    api: SimApiServer, since: int = 0, resource: str | None = None
) -> list[WriteRecord]:
    """The agent's writes after ``since``, to ``resource`` only if given (``"nodes"``: its
    decisions, without the Events and shield budgets it writes in the background)."""
    return [w for w in api.writes(resource) if w.user == AGENT_USER and w.rv > since]


async def wait_annotation(
    api: SimApiServer, key: str, predicate: Callable[[str | None], bool], name: str = NODE
) -> dict[str, str]:
    """Wait (on the simulator's writes, no polling) until annotation ``key`` satisfies it."""

    def check() -> dict[str, str]:
        ann = node_annotations(api, name)
        return ann if predicate(ann.get(key)) else {}  # {} is falsy: keep waiting

    return await api.wait_for(check, timeout=WAIT)


StartAgent = Callable[..., Awaitable[AgentProcess]]


async def spawn(
    node: str,
    kubeconfig: Path | None,
    host: HostFS,
    *extra: str,
    started: list[AgentProcess],
    ready: bool = True,
    env: dict[str, str] | None = None,
) -> AgentProcess:
    """Start ``drain-guard run`` for ``node``, add it to ``started`` (for ``reap``) before
    anything can fail, and with ``ready`` return once it listens and has made its first
    decision (both watches synced)."""
    agent = await spawn_agent(node, kubeconfig, host, *extra, env=env)
    started.append(agent)
    if ready:
        await agent.wait_synced(WAIT)
    return agent


async def reap(agents: Sequence[AgentProcess]) -> None:
    """Kill what is still running (a test that failed midway) and collect the readers."""
    for agent in agents:
        await agent.kill()


async def metric(agent: AgentProcess, name: str, **labels: str) -> float:
    """One sample from the agent's /metrics (0 if absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    status, text = await agent.http("/metrics")
    assert status == 200
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


async def confinement(agent: AgentProcess) -> dict[str, Any]:
    """The agent's confinement self-check, once it has run: /status's ``confinement``, checked
    to agree with its log line and ``drain_guard_confined`` (1 yes, 0 no, -1 unknown)."""
    record = await agent.wait_log(lambda r: "confinement self-check" in str(r.get("message")))
    status, body = await agent.http("/status")
    assert status == 200
    doc: dict[str, Any] = json.loads(body)["confinement"]
    assert doc["confined"] == record["confined"]
    assert (
        await metric(agent, "drain_guard_confined")
        == {True: 1, False: 0, None: -1}[doc["confined"]]
    )
    return doc


async def run_cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``python -m drain_guard ARGS`` as a subprocess (the simulator keeps serving meanwhile)."""
    environ = clean_environment()
    environ.update(env or {})
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "drain_guard",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=environ,
    )
    async with asyncio.timeout(WAIT):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


AGENT_POD = "drain-guard-x7k2p"


def add_own_daemonset(api: SimApiServer, owns_pod: bool = True) -> list[str]:
    """The agent's DaemonSet drain-guard/drain-guard and its pod on NODE (controlled by it,
    or with ``owns_pod=False`` by another DaemonSet); returns the agent's flags naming them."""
    pod_spec: dict[str, Any] = {"containers": [{"name": "agent", "image": "drain-guard"}]}
    template = {"metadata": {"labels": {"app": "drain-guard"}}, "spec": pod_spec}
    spec = {"selector": {"matchLabels": {"app": "drain-guard"}}, "template": template}
    owner = api.create(
        "daemonsets",
        {"metadata": {"name": "drain-guard" if owns_pod else "other"}, "spec": spec},
        "drain-guard",
    )
    if not owns_pod:
        api.create("daemonsets", {"metadata": {"name": "drain-guard"}, "spec": spec}, "drain-guard")
    ref = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    api.create(
        "pods",
        {
            "metadata": {
                "name": AGENT_POD,
                "labels": {"app": "drain-guard"},
                "ownerReferences": [ref],
            },
            "spec": {"nodeName": NODE, **pod_spec},
            "status": {"phase": "Running"},
        },
        "drain-guard",
    )
    return ["--daemonset", "drain-guard/drain-guard", "--pod-name", AGENT_POD]


def namespace_of(path: str) -> str | None:
    """The namespace of a request path (``.../namespaces/NS/RESOURCE...``); None if cluster-wide."""
    parts = path.strip("/").split("/")
    if "namespaces" in parts[:4] and len(parts) > parts.index("namespaces") + 2:
        return parts[parts.index("namespaces") + 1]
    return None
