"""The systemd units: ``systemd-analyze verify`` and ``security`` accept them, they are
hardened, the agent's command line and environment file are settings it accepts, and the node's
identity reaches the agent as the kubelet keeps rotating it.

``verify`` checks that each ExecStart's program exists, so it runs against a scratch root
holding the units, stand-in executables at their paths, and a copy of the machine's own unit
directory (for the targets the units pull in).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from drain_guard.config import RUN_OPTIONS, add_run_arguments, settings_from
from tests.deploy.tools import (
    AGENT_UNIT,
    COPIER_UNIT,
    ENV_FILE,
    KUBELET_CLIENT,
    REPO,
    SYSTEMD_DIR,
    UNITS,
    copier_commands,
    env_file,
    kubelet_kubeconfig,
    specifiers,
    systemd_unit,
)
from tests.helpers import require_tool

UNIT = AGENT_UNIT
SERVICES = [u for u in UNITS if u.suffix == ".service"]
PATH_UNIT = SYSTEMD_DIR / "drain-guard-credentials.path"
TIMER_UNIT = SYSTEMD_DIR / "drain-guard-credentials.timer"
SYSUSERS = SYSTEMD_DIR / "drain-guard.sysusers"
SYSTEM_UNITS = Path("/usr/lib/systemd/system")
# systemd-analyze security's exposure scale is 0-100 (shown as 0.0-10.0): 20 is "OK".
MAX_EXPOSURE = 20
#: The copy of the kubelet's client certificate the agent reads (its kubeconfig names it).
COPY = "/run/drain-guard-credentials/kubelet-client.pem"
INSTALL_DOC = REPO / "docs" / "install.md"


def unit_settings(unit: Path = UNIT) -> dict[str, list[str]]:
    """The [Service] section, each key with all its values in order."""
    return systemd_unit(unit).get("Service", {})


def exec_start(unit: Path) -> list[list[str]]:
    """Each ExecStart= command line of ``unit``, as words, specifiers resolved."""
    return [shlex.split(specifiers(line)) for line in unit_settings(unit)["ExecStart"]]


@pytest.fixture
def scratch_root(tmp_path: Path) -> Path:
    if not SYSTEM_UNITS.is_dir():
        pytest.skip(f"{SYSTEM_UNITS} is missing: not a systemd machine")
    root = tmp_path / "root"
    shutil.copytree(SYSTEM_UNITS, root / "usr/lib/systemd/system", symlinks=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    for unit in UNITS:
        shutil.copy(unit, root / "etc/systemd/system" / unit.name)
    for service in SERVICES:
        for argv in exec_start(service):
            program = root / argv[0].lstrip("/")
            program.parent.mkdir(parents=True, exist_ok=True)
            program.write_text("#!/bin/sh\n")
            program.chmod(0o755)
    return root


def _analyze(*args: str) -> subprocess.CompletedProcess[str]:
    tool = require_tool("systemd-analyze")
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=60, check=False)


def test_systemd_analyze_verify_is_clean(scratch_root: Path) -> None:
    proc = _analyze("verify", f"--root={scratch_root}", *(u.name for u in UNITS))
    assert proc.returncode == 0, proc.stderr
    # Unknown or misspelt settings are only warnings ("ignoring"): none is allowed.
    assert proc.stderr.strip() == "", proc.stderr


def test_verify_has_teeth(scratch_root: Path) -> None:
    unit = scratch_root / "etc/systemd/system" / UNIT.name
    unit.write_text(unit.read_text().replace("ProtectProc=invisible", "ProtectProc=invisibl"))
    stderr = _analyze("verify", f"--root={scratch_root}", UNIT.name).stderr
    assert "ignoring: invisibl" in stderr


@pytest.mark.parametrize("service", SERVICES, ids=lambda u: u.name)
def test_security_exposure_is_low(scratch_root: Path, service: Path) -> None:
    proc = _analyze(
        "security",
        "--offline=yes",
        f"--threshold={MAX_EXPOSURE}",
        f"--root={scratch_root}",
        service.name,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr


def test_unit_is_hardened() -> None:
    unit = unit_settings()
    expected = {
        "User": "drain-guard",
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


def test_the_unit_runs_with_the_nodes_identity_only() -> None:
    """Issue 11 finding 2: no service account, no credential of its own: a kubeconfig naming
    the copy of the node's certificate, made before the agent starts."""
    unit = systemd_unit(UNIT)
    assert "LoadCredential" not in unit["Service"]
    assert "KUBECONFIG=/etc/drain-guard/kubeconfig" in unit["Service"]["Environment"]
    wants = " ".join(unit["Unit"]["Wants"]).split()
    assert {COPIER_UNIT.name, PATH_UNIT.name, TIMER_UNIT.name} <= set(wants)
    assert COPIER_UNIT.name in " ".join(unit["Unit"]["After"]).split()


def test_the_copy_follows_the_kubelets_rotation() -> None:
    """Issue 14: a systemd credential is copied once, at start, and a rotated certificate was
    never seen without a restart (which releases the hold). The copy is made again whenever
    the kubelet's certificate directory changes, and hourly should a change be missed."""
    path = systemd_unit(PATH_UNIT)
    assert path["Path"] == {
        "PathChanged": [os.path.dirname(KUBELET_CLIENT)],
        "Unit": [COPIER_UNIT.name],
    }
    timer = systemd_unit(TIMER_UNIT)
    assert timer["Timer"]["Unit"] == [COPIER_UNIT.name]
    assert timer["Timer"]["OnUnitActiveSec"] == ["1h"]
    for unit in (path, timer):
        assert unit["Unit"]["PartOf"] == [UNIT.name]  # stopped with the agent
    install, move = exec_start(COPIER_UNIT)
    assert install[:3] == ["/usr/bin/install", "-m", "0640"]
    assert install[3] == KUBELET_CLIENT
    assert move[:2] == ["/usr/bin/mv", "-f"]
    assert move[2:] == [install[4], COPY]  # renamed into place whole


def test_the_copy_is_readable_by_the_agent_alone() -> None:
    """The copier runs as root, to read the kubelet's 0600 file as its owner, with no
    capability; what it writes belongs to the agent's group and no other."""
    copier = unit_settings(COPIER_UNIT)
    assert "User" not in copier  # root
    assert "DynamicUser" not in copier
    assert copier["CapabilityBoundingSet"] == [""]
    assert copier["AmbientCapabilities"] == [""]
    assert copier["Group"] == unit_settings()["User"]
    assert copier["UMask"] == ["0027"]
    assert copier["RuntimeDirectory"] == ["drain-guard-credentials"]
    assert copier["RuntimeDirectoryMode"] == ["0750"]
    assert copier["RuntimeDirectoryPreserve"] == ["yes"]
    assert os.path.dirname(COPY) == "/run/" + copier["RuntimeDirectory"][0]
    # Of the kubelet's directory it sees the certificates only (pods' volumes stay hidden).
    assert copier["TemporaryFileSystem"] == ["/var/lib/kubelet:ro"]
    assert copier["BindReadOnlyPaths"] == [os.path.dirname(KUBELET_CLIENT)]
    assert copier["PrivateNetwork"] == ["yes"]
    assert copier["RestrictAddressFamilies"] == ["none"]


def test_the_sysusers_line_makes_the_units_user() -> None:
    (line,) = [
        ln for ln in SYSUSERS.read_text().splitlines() if ln.strip() and not ln.startswith("#")
    ]
    kind, name, *_ = shlex.split(line)
    assert (kind, name) == ("u", unit_settings()["User"][0])  # "u" makes its group too


def _section_7() -> str:
    text = INSTALL_DOC.read_text()
    return text[text.index("## 7. On the host with systemd") :]


def test_the_docs_install_every_unit() -> None:
    """Section 7's commands install each file of systemd/ where systemd reads it."""
    text = _section_7()
    for unit in UNITS:
        assert f"install -m 0644 systemd/{unit.name} /etc/systemd/system/{unit.name}" in text
    assert f"systemd/{SYSUSERS.name} /etc/sysusers.d/drain-guard.conf" in text
    assert "systemd-sysusers" in text
    assert {p.name for p in SYSTEMD_DIR.iterdir()} == {
        *(u.name for u in UNITS),
        SYSUSERS.name,
        ENV_FILE.name,
    }


def test_the_documented_kubeconfig_names_the_copy(tmp_path: Path) -> None:
    """docs/install.md's command, run as written on a kubelet's kubeconfig, makes a kubeconfig
    whose certificate and key are the copy the agent reads, and keeps the server and CA."""
    (command,) = [
        line.strip().removesuffix("\\").strip()
        for line in INSTALL_DOC.read_text().splitlines()
        if line.startswith("sed ") and KUBELET_CLIENT in line
    ]
    source = tmp_path / "kubelet-kubeconfig"
    source.write_text(yaml.safe_dump(kubelet_kubeconfig()))
    argv = shlex.split(command)
    proc = subprocess.run(
        [*argv, str(source)], capture_output=True, text=True, timeout=30, check=True
    )
    made = yaml.safe_load(proc.stdout)
    wanted = kubelet_kubeconfig()
    user = wanted["users"][0]["user"]  # type: ignore[index]
    user["client-certificate"] = user["client-key"] = COPY
    assert made == wanted


def _no_capabilities(*ids: str) -> list[str]:
    """setpriv with ``ids`` (--regid=..., --reuid=...), then no capability at all."""
    setpriv = require_tool("setpriv")
    return [setpriv, *ids, "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all"]


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A scratch directory other users may enter (pytest's own are root's, mode 0700)."""
    with tempfile.TemporaryDirectory(prefix="drain-guard-copier-") as name:
        os.chmod(name, 0o755)
        yield Path(name)


def test_the_copier_reads_the_kubelets_file_as_root_without_capabilities(open_tmp: Path) -> None:
    """The copier's own commands, run as its unit runs them (root, its group and umask, no
    capability), on a kubelet certificate directory as the kubelet leaves it (0600 root, a
    link to the current file): the copy is the current certificate, root:group 0640, readable
    by a user of the group and by no other; a 0600 file of another user stays unreadable to
    the copier (reading a file one owns needs no capability, reading another's would)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the copier runs as root")
    group, agent, stranger = 61990, 61991, 61992
    host = open_tmp
    pki = host / os.path.dirname(KUBELET_CLIENT).lstrip("/")
    pki.mkdir(parents=True)
    current = pki / "kubelet-client-2026-01-01-00-00-00.pem"
    current.write_text("certificate and key\n")
    current.chmod(0o600)
    (pki / os.path.basename(KUBELET_CLIENT)).symlink_to(current)
    commands = copier_commands(host)
    runtime = host / "run" / unit_settings(COPIER_UNIT)["RuntimeDirectory"][0]
    os.chown(runtime, 0, group)  # as systemd makes it: root:Group
    umask = int(unit_settings(COPIER_UNIT)["UMask"][0], 8)
    for argv in commands:
        subprocess.run(
            [*_no_capabilities(f"--regid={group}", "--clear-groups"), *argv],
            check=True,
            timeout=30,
            umask=umask,
        )
    copy = host / COPY.lstrip("/")
    info = copy.stat()
    assert (info.st_uid, info.st_gid, info.st_mode & 0o777) == (0, group, 0o640)
    assert copy.read_text() == current.read_text()

    def reads(*ids: str, path: Path = copy) -> bool:
        cat = [*_no_capabilities(*ids), "cat", str(path)]
        return subprocess.run(cat, capture_output=True, timeout=30, check=False).returncode == 0

    user = (f"--reuid={agent}", f"--regid={agent}")
    assert reads(*user, f"--groups={group}")
    assert not reads(f"--reuid={stranger}", f"--regid={stranger}", "--clear-groups")
    others = pki / "someone-elses.pem"
    others.write_text("x")
    others.chmod(0o600)
    os.chown(others, stranger, stranger)
    assert not reads(f"--regid={group}", "--clear-groups", path=others)
    assert reads(f"--regid={group}", "--clear-groups", path=current)


def _settings(env: dict[str, str]) -> argparse.Namespace:
    argv = shlex.split(unit_settings()["ExecStart"][0])
    assert argv[1] == "run"
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    return parser.parse_args(argv[2:])


def test_agent_accepts_the_command_line_and_environment_file() -> None:
    env = {"NODE_NAME": "worker-0", "KUBECONFIG": "/etc/drain-guard/kubeconfig"}
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
