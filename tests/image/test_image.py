"""The agent's image as ``make image`` builds it (build/image/drain-guard.oci.tar): what it holds
and how it runs.

The archive is unpacked layer by layer as a container runtime does (whiteouts applied) and its
entrypoint run as its config says: its user, its environment, a read-only root, and no
network (a network namespace of its own with nothing in it), in mount and PID namespaces that
go with the process, so nothing of the host changes. Needs root (chroot, namespaces).
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import tarfile
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from benchmarks.deployed import DEPLOYED_ENV
from tests.deploy.tools import REPO
from tests.helpers import require_or_skip

ARCHIVE = REPO / "build" / "image" / "drain-guard.oci.tar"
TIMEOUT = 120.0


def _version() -> str:
    with (REPO / "pyproject.toml").open("rb") as f:
        version: str = tomllib.load(f)["project"]["version"]
    return version


@dataclass(frozen=True)
class Image:
    name: str
    config: dict[str, Any]
    root: Path


def _member(archive: tarfile.TarFile, name: str) -> bytes:
    member = archive.extractfile(name)
    assert member is not None, name
    return member.read()


def _blob(digest: str) -> str:
    return "blobs/" + digest.replace(":", "/")


def _apply_layer(layer: tarfile.TarFile, root: Path) -> None:
    """One layer onto ``root``, the OCI way: ``.wh.NAME`` deletes NAME of the layers below,
    ``.wh..wh..opq`` empties its directory of them."""
    members = []
    for member in layer.getmembers():
        path = Path(member.name)
        if path.name == ".wh..wh..opq":
            directory = root / path.parent
            for child in directory.iterdir() if directory.is_dir() else ():
                subprocess.run(["rm", "-rf", str(child)], check=True)
        elif path.name.startswith(".wh."):
            subprocess.run(["rm", "-rf", str(root / path.parent / path.name[4:])], check=True)
        else:
            members.append(member)
    layer.extractall(root, members=members, numeric_owner=True, filter="fully_trusted")


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    if not ARCHIVE.exists():
        require_or_skip(f"{ARCHIVE.relative_to(REPO)} is not built (make image)")
    if os.geteuid() != 0:
        require_or_skip("running the image needs root (chroot and namespaces)")
    root = tmp_path_factory.mktemp("image") / "root"
    root.mkdir()
    with tarfile.open(ARCHIVE) as archive:
        (entry,) = json.loads(_member(archive, "index.json"))["manifests"]
        manifest = json.loads(_member(archive, _blob(entry["digest"])))
        config = json.loads(_member(archive, _blob(manifest["config"]["digest"])))
        for layer in manifest["layers"]:
            with tarfile.open(fileobj=archive.extractfile(_blob(layer["digest"]))) as tar:
                _apply_layer(tar, root)
    name = entry["annotations"]["org.opencontainers.image.ref.name"]
    return Image(name=name, config=config, root=root)


def _run(
    image: Image, argv: Sequence[str], env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``argv`` in the image as its config runs the entrypoint: its user, its environment (or
    ``env``), a read-only root, no network, its own /proc."""
    config = image.config["config"]
    environment = env if env is not None else dict(e.split("=", 1) for e in config["Env"])
    script = (
        'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && '
        'mount -t proc -o nosuid,nodev,noexec proc "$1/proc" && '
        'root=$1 && user=$2 && shift 2 && exec chroot --userspec="$user" "$root" "$@"'
    )
    return subprocess.run(
        [
            *("unshare", "--net", "--mount", "--pid", "--fork", "--propagation", "private"),
            *("sh", "-c", script, "sh", str(image.root), config["User"]),
            "/usr/bin/env",
            "-i",
            *(f"{k}={v}" for k, v in environment.items()),
            *argv,
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def test_the_archive_names_the_image_for_a_node_to_import(image: Image) -> None:
    """``ctr -n k8s.io images import`` names the image after this annotation."""
    assert image.name == f"localhost/drain-guard:{_version()}"
    machine = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    assert image.config["architecture"] == machine


def test_the_config_runs_the_console_script_unprivileged_optimised(image: Image) -> None:
    config = image.config["config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["drain-guard"]
    assert config["Cmd"] == ["run"]
    env = dict(e.split("=", 1) for e in config["Env"])
    assert env["PATH"].startswith("/opt/drain-guard/bin:")
    assert {k: env[k] for k in DEPLOYED_ENV} == {
        k: v.format(tree="/opt/drain-guard") for k, v in DEPLOYED_ENV.items()
    }


def test_the_entrypoint_runs_as_65532_on_a_read_only_root_with_no_network(image: Image) -> None:
    proc = _run(image, [*image.config["config"]["Entrypoint"], "--help"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: drain-guard ")
    assert "Traceback" not in proc.stderr
    identity = _run(image, ["id", "-u"])
    assert identity.stdout.strip() == "65532", identity.stderr
    links = _run(image, ["cat", "/proc/net/dev"])
    assert [line.split(":")[0].strip() for line in links.stdout.splitlines()[2:]] == ["lo"]


def _compiled_from_source(image: Image, env: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """The modules ``drain-guard --help`` loads from bytecode, and those it compiles."""
    proc = _run(image, ["drain-guard", "--help"], {**env, "PYTHONVERBOSE": "1"})
    assert proc.returncode == 0, proc.stderr
    loaded = re.findall(r"^# code object from '?([^' ]+)'?$", proc.stderr, re.MULTILINE)
    return (
        [p for p in loaded if p.endswith(".pyc")],
        [p for p in loaded if p.endswith(".py")],
    )


def test_the_agent_runs_from_the_bytecode_compiled_at_build(image: Image) -> None:
    """Every module, the standard library's, Debian's and the venv's, comes from the optimised,
    hash-checked tree; none is compiled at start (a read-only root could not keep it)."""
    env = dict(e.split("=", 1) for e in image.config["config"]["Env"])
    bytecode, compiled = _compiled_from_source(image, env)
    assert compiled == []
    assert len(bytecode) > 100
    assert all(p.startswith("/opt/drain-guard/pycache/") for p in bytecode), bytecode[:5]
    assert all(p.endswith(".opt-2.pyc") for p in bytecode), bytecode[:5]
    assert any("/drain_guard/" in p for p in bytecode)
    assert any("/usr/lib/python3.11/" in p for p in bytecode)
    # The check has teeth: without the prefix the agent's modules are compiled at start.
    del env["PYTHONPYCACHEPREFIX"]
    _, compiled = _compiled_from_source(image, env)
    assert any("/drain_guard/" in p for p in compiled)


def test_psutil_and_pyyaml_are_debians_for_every_architecture(image: Image) -> None:
    """PyPI has no psutil wheel for ppc64le or s390x and no PyYAML wheel for ppc64le: the image
    takes Debian's, built for every architecture, and pip installs neither into the venv."""
    proc = _run(
        image,
        ["python3.11", "-c", "import psutil, yaml; print(psutil.__file__); print(yaml.__file__)"],
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [
        "/usr/lib/python3/dist-packages/psutil/__init__.py",
        "/usr/lib/python3/dist-packages/yaml/__init__.py",
    ]
    assert not list((image.root / "opt/drain-guard/lib").glob("python3.11/site-packages/psutil"))


def test_no_pip_compiler_or_source_tree_in_the_image(image: Image) -> None:
    """Only the builder had pip, the venv module and the repository's files."""
    tools = re.compile(r"^(pip[0-9.]*|(.*-)?(gcc|g\+\+|cpp)(-[0-9]+)?|cc|c\+\+|ld|as|make)$")
    path = dict(e.split("=", 1) for e in image.config["config"]["Env"])["PATH"]
    on_path = [
        f"{directory}/{entry.name}"
        for directory in path.split(":")
        if (image.root / directory.lstrip("/")).is_dir()
        for entry in (image.root / directory.lstrip("/")).iterdir()
        if tools.match(entry.name)
    ]
    assert on_path == []
    probe = "import importlib.util as u; print([m for m in MODULES if u.find_spec(m)])"
    modules = ("pip", "ensurepip", "setuptools", "wheel", "drain_guard_sim", "tests")
    proc = _run(image, ["python3.11", "-c", f"MODULES = {modules!r}; {probe}"])
    assert (proc.returncode, proc.stdout.strip()) == (0, "[]"), proc.stderr
    ours = [
        str(p.relative_to(image.root))
        for pattern in ("**/conftest.py", "**/drain_guard_sim", "**/drain_guard.egg-info")
        for p in image.root.glob(pattern)
    ]
    assert ours == []
    for absent in ("src", "wheels", "opt/pip", "usr/share/python-wheels"):
        assert not (image.root / absent).exists(), absent


def test_the_image_ships_the_rights_table_preflight_reads_by_default(image: Image) -> None:
    """The package's rights.md, a symlink to docs/rights.md in the repository, is in the image
    as a file with the page's text (the wheel build resolved it), and ``drain-guard
    preflight``'s default ``--rights`` is that file."""
    program = "from drain_guard.commands.preflight.run import DEFAULT_RIGHTS; print(DEFAULT_RIGHTS)"
    proc = _run(image, ["/opt/drain-guard/bin/python", "-c", program])
    assert proc.returncode == 0, proc.stderr
    shipped = image.root / proc.stdout.strip().lstrip("/")
    assert shipped.name == "rights.md"
    assert not shipped.is_symlink()
    assert shipped.read_text() == (REPO / "docs" / "rights.md").read_text()
