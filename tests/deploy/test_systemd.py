"""The systemd unit: ``systemd-analyze verify`` and ``security`` accept it, it is hardened,
and its command line and environment file are settings the agent accepts.

``verify`` checks that ExecStart's program exists, so it runs against a scratch root holding
the unit, a stand-in executable at the documented install path, and a copy of the machine's
own unit directory (for the targets the unit pulls in).
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from drain_guard.config import RUN_OPTIONS, add_run_arguments, settings_from
from tests.deploy.tools import ENV_FILE, KUBELET_CLIENT, REPO, env_file, kubelet_kubeconfig
from tests.helpers import require_tool

UNIT = REPO / "systemd" / "drain-guard.service"
SYSTEM_UNITS = Path("/usr/lib/systemd/system")
# systemd-analyze security's exposure scale is 0-100 (shown as 0.0-10.0): 20 is "OK".
MAX_EXPOSURE = 20


def unit_settings() -> dict[str, list[str]]:
    """The [Service] section, each key with all its values in order."""
    values: dict[str, list[str]] = {}
    section = ""
    for raw in UNIT.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        if section == "Service":
            name, _, value = line.partition("=")
            values.setdefault(name, []).append(value)
    return values


@pytest.fixture
def scratch_root(tmp_path: Path) -> Path:
    if not SYSTEM_UNITS.is_dir():
        pytest.skip(f"{SYSTEM_UNITS} is missing: not a systemd machine")
    root = tmp_path / "root"
    shutil.copytree(SYSTEM_UNITS, root / "usr/lib/systemd/system", symlinks=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    shutil.copy(UNIT, root / "etc/systemd/system" / UNIT.name)
    exec_start = shlex.split(unit_settings()["ExecStart"][0])[0]
    program = root / exec_start.lstrip("/")
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    return root


def _analyze(*args: str) -> subprocess.CompletedProcess[str]:
    tool = require_tool("systemd-analyze")
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=60, check=False)


def test_systemd_analyze_verify_is_clean(scratch_root: Path) -> None:
    proc = _analyze("verify", f"--root={scratch_root}", UNIT.name)
    assert proc.returncode == 0, proc.stderr
    # Unknown or misspelt settings are only warnings ("ignoring"): none is allowed.
    assert proc.stderr.strip() == "", proc.stderr


def test_verify_has_teeth(scratch_root: Path) -> None:
    unit = scratch_root / "etc/systemd/system" / UNIT.name
    unit.write_text(unit.read_text().replace("ProtectProc=invisible", "ProtectProc=invisibl"))
    stderr = _analyze("verify", f"--root={scratch_root}", UNIT.name).stderr
    assert "ignoring: invisibl" in stderr


def test_security_exposure_is_low(scratch_root: Path) -> None:
    proc = _analyze(
        "security",
        "--offline=yes",
        f"--threshold={MAX_EXPOSURE}",
        f"--root={scratch_root}",
        UNIT.name,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr


def test_unit_is_hardened() -> None:
    unit = unit_settings()
    expected = {
        "DynamicUser": "yes",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "CapabilityBoundingSet": "",
        "AmbientCapabilities": "",
        "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
        "Restart": "on-failure",
    }
    for name, value in expected.items():
        assert unit.get(name) == [value], name
    # /proc/cmdline names the booted deployment: hiding non-process /proc files would hide it.
    assert "ProcSubset" not in unit


def test_resources_and_restarts_are_bounded() -> None:
    unit = unit_settings()
    assert unit["MemoryMax"] == ["128M"]
    assert unit["TasksMax"] == ["64"]
    text = UNIT.read_text()
    unit_section = text[text.index("[Unit]") : text.index("[Service]")]
    assert "StartLimitIntervalSec=10min" in unit_section
    assert "StartLimitBurst=5" in unit_section


def credentials() -> dict[str, str]:
    """The unit's LoadCredential= settings: credential name -> the file it is read from."""
    return dict(c.partition(":")[::2] for c in unit_settings()["LoadCredential"])


#: Where the unit's credentials appear: /run/credentials/<unit>/<name>.
CREDENTIALS_DIRECTORY = f"/run/credentials/{UNIT.name}"


def test_the_unit_runs_with_the_nodes_identity_only() -> None:
    """Issue 11 finding 2: no service account; the node's own credentials, handed over as
    credentials, and a kubeconfig naming them."""
    creds = credentials()
    assert creds == {
        "kubelet-client.pem": KUBELET_CLIENT,
        "kubeconfig": "/etc/drain-guard/kubeconfig",
    }
    assert "KUBECONFIG=%d/kubeconfig" in unit_settings()["Environment"]


def test_the_documented_kubeconfig_names_the_credential(tmp_path: Path) -> None:
    """docs/install.md's command, run as written on a kubelet's kubeconfig, makes a kubeconfig
    whose certificate and key are the unit's credential, and keeps the server and CA."""
    (command,) = [
        line.strip().removesuffix("\\").strip()
        for line in (REPO / "docs" / "install.md").read_text().splitlines()
        if line.startswith("sed ") and KUBELET_CLIENT in line
    ]
    source = tmp_path / "kubelet-kubeconfig"
    source.write_text(yaml.safe_dump(kubelet_kubeconfig()))
    argv = shlex.split(command)
    proc = subprocess.run(
        [*argv, str(source)], capture_output=True, text=True, timeout=30, check=True
    )
    made = yaml.safe_load(proc.stdout)
    (name,) = [n for n, path in credentials().items() if path == KUBELET_CLIENT]
    wanted = kubelet_kubeconfig()
    user = wanted["users"][0]["user"]  # type: ignore[index]
    user["client-certificate"] = user["client-key"] = f"{CREDENTIALS_DIRECTORY}/{name}"
    assert made == wanted


def _settings(env: dict[str, str]) -> argparse.Namespace:
    argv = shlex.split(unit_settings()["ExecStart"][0])
    assert argv[1] == "run"
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    return parser.parse_args(argv[2:])


def test_agent_accepts_the_command_line_and_environment_file() -> None:
    env = {"NODE_NAME": "worker-0", "KUBECONFIG": "/run/credentials/x/kubeconfig"}
    env |= env_file(ENV_FILE.read_text())
    settings = settings_from(_settings(env), env)
    assert settings.release_on_exit
    assert settings.daemonset is None
    assert settings.listen.host == "127.0.0.1"
    # Budgets need a right the node's identity lacks: the central shield keeps them.
    assert not settings.shield_build_pods
    assert settings.node_kubeconfig is None  # KUBECONFIG is the node's identity already


def test_agent_accepts_every_example_in_the_environment_file() -> None:
    """The commented-out examples, uncommented, are valid too."""
    text = ENV_FILE.read_text()
    examples = [
        line.removeprefix("#")
        for line in text.splitlines()
        if line.startswith("#") and "=" in line and line[1:2].isupper() and " " not in line
    ]
    assert examples
    env = {"NODE_NAME": "worker-0"} | env_file(text) | env_file("\n".join(examples))
    settings_from(_settings(env), env)


def test_environment_names_are_the_agents() -> None:
    """Every variable the file sets is one the agent reads (a typo would be silently ignored)."""
    known = {option.env for option in RUN_OPTIONS}
    text = ENV_FILE.read_text()
    names = set(env_file(text)) | {
        line[1:].partition("=")[0]
        for line in text.splitlines()
        if line.startswith("#") and "=" in line and " " not in line
    }
    assert names
    assert names <= known, names - known
