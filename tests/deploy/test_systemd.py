"""The systemd units: ``systemd-analyze verify`` and ``security`` accept them, they are
hardened, the agent's and the node proxy's command lines and environment file are settings
they accept, and the agent holds no credential: the node proxy holds the node's.

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
import sys
from pathlib import Path

import pytest

from drain_guard.cli import build_parser
from drain_guard.config.values import SettingsError
from drain_guard.confine.permissions import INSTALL_MODES
from drain_guard.node.host import read_booted_image_ostree
from drain_guard.settings.agent import RUN_OPTIONS, add_run_arguments, settings_from
from drain_guard.settings.install import InstallKind
from drain_guard_sim.actors.hostfs import HostFS
from tests.deploy.test_host_view import IMAGE, SECRET, SECRETS
from tests.deploy.tools import (
    AGENT_UNIT,
    ENV_FILE,
    ORIGIN_UNIT,
    PROXY_UNIT,
    REPO,
    SYSTEMD_DIR,
    UNITS,
    env_file,
    specifiers,
    systemd_unit,
)
from tests.helpers import require_tool

UNIT = AGENT_UNIT
SERVICES = [u for u in UNITS if u.suffix == ".service"]
SYSUSERS = SYSTEMD_DIR / "drain-guard.sysusers"
SYSTEM_UNITS = Path("/usr/lib/systemd/system")
# systemd-analyze security's exposure scale is 0-100 (shown as 0.0-10.0): 20 is "OK".
MAX_EXPOSURE = 20
SYSTEMD_QUICKSTART = REPO / "docs" / "quickstart" / "systemd.md"


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


#: What systemd-analyze leaves on the host (as root): a marker that units were loaded.
UNITS_LOADED_MARKER = Path("/run/systemd/systemd-units-load")


def _analyze(*args: str) -> subprocess.CompletedProcess[str]:
    """systemd-analyze; as root in a mount namespace of its own with an empty /run/systemd,
    so that the marker it writes there goes with it."""
    tool = require_tool("systemd-analyze")
    argv = [tool, *args]
    if os.geteuid() == 0:
        script = 'mount -t tmpfs tmpfs /run/systemd && exec "$@"'
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def test_systemd_analyze_verify_is_clean(scratch_root: Path) -> None:
    marked = UNITS_LOADED_MARKER.exists()
    proc = _analyze("verify", f"--root={scratch_root}", *(u.name for u in UNITS))
    assert proc.returncode == 0, proc.stderr
    # Unknown or misspelt settings are only warnings ("ignoring"): none is allowed.
    assert proc.stderr.strip() == "", proc.stderr
    assert UNITS_LOADED_MARKER.exists() == marked, "the host's /run/systemd was written"


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
    assert unit["LimitNOFILE"] == ["1024"]  # what the flood test gives the agent
    text = UNIT.read_text()
    unit_section = text[text.index("[Unit]") : text.index("[Service]")]
    assert "StartLimitIntervalSec=10min" in unit_section
    assert "StartLimitBurst=5" in unit_section


def test_the_agent_unit_holds_no_credential() -> None:
    """Issue 21: no node identity, no service account, no kubeconfig: the agent's only way to
    the API is the node proxy's socket, and it sees nothing of the kubelet's."""
    unit = systemd_unit(UNIT)
    service = unit["Service"]
    assert "LoadCredential" not in service
    assert "LoadCredentialEncrypted" not in service
    assert not [e for e in service["Environment"] if "KUBECONFIG" in e]
    assert "DRAIN_GUARD_API_SOCKET=%t/drain-guard-node-proxy/api.sock" in service["Environment"]
    assert unit["Unit"]["Wants"] == [PROXY_UNIT.name, ORIGIN_UNIT.name]
    assert PROXY_UNIT.name in " ".join(unit["Unit"]["After"]).split()
    hidden = service["InaccessiblePaths"][0].split()
    assert "-/var/lib/kubelet" in hidden
    # No network but the loopback listener and the proxy's socket: the API server is the
    # proxy's to reach.
    assert service["IPAddressDeny"] == ["any"]
    assert service["IPAddressAllow"] == ["localhost"]


def test_the_proxy_unit_holds_the_nodes_credential_and_serves_the_agent_alone() -> None:
    """Root to read the kubelet's 0600 key as its owner, with no capability; of the kubelet's
    directory only the kubeconfig and the certificates in view; its socket reachable by the
    agent's group alone, and the agent's user the one it serves; stopped with the agent."""
    proxy = unit_settings(PROXY_UNIT)
    agent_user = unit_settings()["User"][0]
    assert "User" not in proxy  # root
    assert "DynamicUser" not in proxy
    assert proxy["CapabilityBoundingSet"] == [""]
    assert proxy["AmbientCapabilities"] == [""]
    assert proxy["NoNewPrivileges"] == ["yes"]
    assert proxy["Group"] == [agent_user]
    assert proxy["UMask"] == ["0007"]
    assert proxy["RuntimeDirectory"] == ["drain-guard-node-proxy"]
    assert proxy["RuntimeDirectoryMode"] == ["0750"]
    assert proxy["TemporaryFileSystem"] == ["/var/lib/kubelet:ro"]
    assert proxy["BindReadOnlyPaths"] == ["/var/lib/kubelet/kubeconfig /var/lib/kubelet/pki"]
    assert proxy["Type"] == ["notify"]  # the agent starts once the socket is served
    assert systemd_unit(PROXY_UNIT)["Unit"]["PartOf"] == [UNIT.name]
    (argv,) = exec_start(PROXY_UNIT)
    args = build_parser().parse_args(argv[1:])
    assert args.command == "node-proxy"
    assert args.kubeconfig == "/var/lib/kubelet/kubeconfig"
    assert args.agent_user == agent_user
    assert f"DRAIN_GUARD_API_SOCKET={args.socket}" in map(
        specifiers, unit_settings()["Environment"]
    )
    assert os.path.dirname(args.socket) == "/run/" + proxy["RuntimeDirectory"][0]


def test_the_sysusers_line_makes_the_units_user() -> None:
    (line,) = [
        ln for ln in SYSUSERS.read_text().splitlines() if ln.strip() and not ln.startswith("#")
    ]
    kind, name, *_ = shlex.split(line)
    assert (kind, name) == ("u", unit_settings()["User"][0])  # "u" makes its group too


def test_the_docs_install_every_unit() -> None:
    """The systemd quickstart's commands install each file of systemd/ where systemd reads it."""
    text = SYSTEMD_QUICKSTART.read_text()
    for unit in UNITS:
        assert f"install -m 0644 systemd/{unit.name} /etc/systemd/system/{unit.name}" in text
    assert f"systemd/{SYSUSERS.name} /etc/sysusers.d/drain-guard.conf" in text
    assert "systemd-sysusers" in text
    assert {p.name for p in SYSTEMD_DIR.iterdir()} == {
        *(u.name for u in UNITS),
        SYSUSERS.name,
        ENV_FILE.name,
    }


def _settings(env: dict[str, str]) -> argparse.Namespace:
    argv = shlex.split(unit_settings()["ExecStart"][0])
    assert argv[1] == "run"
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    return parser.parse_args(argv[2:])


def _unit_environment() -> dict[str, str]:
    """What the agent's unit sets (Environment=, then the settings file over it)."""
    env = {"NODE_NAME": "worker-0"}
    for line in unit_settings()["Environment"]:
        for word in shlex.split(specifiers(line)):
            name, _, value = word.partition("=")
            env[name] = value
    return env | env_file(ENV_FILE.read_text())


def test_agent_accepts_the_command_line_and_environment_file() -> None:
    env = _unit_environment()
    settings = settings_from(_settings(env), env)
    assert settings.install.kind is InstallKind.SYSTEMD
    assert settings.install.kind is InstallKind(INSTALL_MODES["systemd"].install)
    assert settings.reporting.listen.host == "127.0.0.1"
    # The proxy passes on no budget write: the central shield keeps them.
    assert not settings.shield.build_pods
    assert settings.api.socket == "/run/drain-guard-node-proxy/api.sock"
    assert settings.api.kubeconfig is None


def test_a_kubeconfig_in_the_settings_file_is_refused() -> None:
    """The agent must not be handed a credential by a settings file: one clear line."""
    env = _unit_environment() | {"KUBECONFIG": "/var/lib/kubelet/kubeconfig"}
    with pytest.raises(SettingsError, match="DRAIN_GUARD_API_SOCKET excludes KUBECONFIG: "):
        settings_from(_settings(env), env)


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


def test_the_agent_unit_sees_the_booted_origin_and_nothing_else_of_the_physical_root(
    tmp_path: Path,
) -> None:
    """Issue 21 item 6, for the host: /sysroot holds every deployment's /etc, where MCO leaves
    secrets world-readable, and all of /var. The agent's unit hides it; the copy unit's own
    command, run as systemd runs it on a scratch /sysroot with those secrets, makes the agent's
    host root (the unit's DRAIN_GUARD_HOST_ROOT, the settings file leaving it alone), where the
    agent's reader finds the booted image as on the host, and nothing else."""
    hidden = unit_settings()["InaccessiblePaths"][0].split()
    assert {"-/sysroot", "-/ostree"} <= set(hidden)
    assert "DRAIN_GUARD_HOST_ROOT" not in env_file(ENV_FILE.read_text())
    host_root = _unit_environment()["DRAIN_GUARD_HOST_ROOT"]
    origin_unit = systemd_unit(ORIGIN_UNIT)
    assert origin_unit["Unit"]["Before"] == [UNIT.name]
    assert origin_unit["Unit"]["PartOf"] == [UNIT.name]
    copy = unit_settings(ORIGIN_UNIT)
    assert (copy["User"], copy["Type"], copy["RemainAfterExit"]) == (
        ["drain-guard"],
        ["oneshot"],
        ["yes"],
    )
    assert copy["PrivateNetwork"] == ["yes"]
    assert host_root == "/run/" + copy["RuntimeDirectory"][0]

    sysroot = HostFS(tmp_path / "sysroot", IMAGE)
    sysroot.reboot_into(IMAGE.replace("ab" * 32, "cd" * 32))
    for deployment in sysroot.deployments:
        for secret in SECRETS:
            path = sysroot.deploy_dir / deployment.name / secret
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(SECRET)
    (argv,) = exec_start(ORIGIN_UNIT)
    assert argv[:2] == ["/opt/drain-guard/bin/drain-guard", "copy-booted-origin"]
    args = dict(zip(argv[2::2], argv[3::2], strict=True))
    assert args == {"--host-root": "/sysroot", "--to": host_root}
    view = tmp_path / host_root.lstrip("/")
    view.mkdir(parents=True)
    command = [sys.executable, "-m", "drain_guard", "copy-booted-origin"]
    command += ["--host-root", str(sysroot.root), "--to", str(view)]
    command += ["--cmdline-file", str(sysroot.cmdline_file)]
    subprocess.run(command, capture_output=True, check=True, timeout=60)

    on_host = read_booted_image_ostree(sysroot.root, sysroot.cmdline_file)
    assert on_host.digest == "sha256:" + "cd" * 32, on_host
    assert read_booted_image_ostree(view, sysroot.cmdline_file) == on_host
    files = [p.relative_to(view) for p in view.rglob("*") if p.is_file() and not p.is_symlink()]
    assert files == [sysroot.origin_file().relative_to(sysroot.root)]
