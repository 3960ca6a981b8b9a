"""The Dockerfile: hadolint-clean, two stages on one Debian base, installs this project, runs
it unprivileged.

The checks read the Dockerfile (and .dockerignore) against pyproject.toml, the source of what
gets installed; tests/image runs the image ``make image`` builds from it.
"""

from __future__ import annotations

import fnmatch
import json
import shlex
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from benchmarks.deployed import BUILD_CONTEXT, DEPLOYED_ENV
from tests.deploy.tools import REPO
from tests.helpers import require_tool

DOCKERFILE = REPO / "Dockerfile"


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, instruction: str) -> list[str]:
        return [args for ins, args in self.instructions if ins == instruction]


def parse_dockerfile(text: str) -> list[Stage]:
    """Stages and their instructions (continuation lines joined, comments dropped)."""
    stages: list[Stage] = []
    logical: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    for line in logical:
        instruction, _, args = line.partition(" ")
        instruction = instruction.upper()
        args = args.strip()
        if instruction == "ARG" and not stages:
            continue  # a global build argument: global_args()
        if instruction == "FROM":
            words = args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base=words[0], name=name))
        else:
            assert stages, "instruction before FROM"
            stages[-1].instructions.append((instruction, args))
    return stages


def global_args(text: str) -> dict[str, str]:
    """The build arguments declared before the first FROM, with their defaults."""
    args = {}
    for line in text.splitlines():
        if line.upper().startswith("FROM "):
            break
        if line.upper().startswith("ARG "):
            name, _, default = line[4:].strip().partition("=")
            args[name] = default
    return args


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    """The builder and the runtime stage (the ``wheels`` stage before them is empty)."""
    wheels, *rest = parse_dockerfile(DOCKERFILE.read_text())
    assert (wheels.base, wheels.name, wheels.instructions) == ("scratch", "wheels", [])
    return rest


def _debian_packages(run: str) -> list[str]:
    """The packages an ``apt-get install`` RUN installs."""
    (install,) = [c for c in run.split("&&") if "apt-get install" in c]
    return [w for w in shlex.split(install)[3:] if not w.startswith("-")]


@pytest.fixture(scope="module")
def project() -> dict[str, Any]:
    with (REPO / "pyproject.toml").open("rb") as f:
        data: dict[str, Any] = tomllib.load(f)
    return data


def test_hadolint_is_clean() -> None:
    hadolint = require_tool("hadolint")
    proc = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_has_teeth(tmp_path: Path) -> None:
    """The same call fails on a Dockerfile with a known problem (unpinned apt install)."""
    hadolint = require_tool("hadolint")
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian:bookworm\nRUN apt-get update && apt-get install -y curl\n")
    proc = subprocess.run(
        [hadolint, str(bad)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode != 0


def test_two_stages_on_one_debian_base_with_debians_python(
    stages: list[Stage], project: dict[str, Any]
) -> None:
    """Both stages are BASE (a registry's debian:bookworm-slim, or make image's debootstrap of
    the same), so the venv's interpreter, Debian's python3.11, is at one path in both; the
    runtime gets the builder's Debian packages less the venv module (pip's wheels)."""
    assert len(stages) == 2
    builder, final = stages
    assert builder.name == "builder"
    assert builder.base == final.base == "${BASE}"
    assert global_args(DOCKERFILE.read_text()) == {"BASE": "debian:bookworm-slim"}
    minimum = project["project"]["requires-python"].removeprefix(">=")
    (builder_apt,) = [r for r in builder.all("RUN") if "apt-get install" in r]
    (final_apt,) = final.all("RUN")
    builder_packages = _debian_packages(builder_apt)
    assert f"python{minimum}" in builder_packages
    assert set(_debian_packages(final_apt)) == set(builder_packages) - {f"python{minimum}-venv"}
    assert {"python3-psutil", "python3-yaml"} <= set(_debian_packages(final_apt))


def test_builder_installs_this_project(stages: list[Stage], project: dict[str, Any]) -> None:
    builder = stages[0]
    copied = {src for args in builder.all("COPY") for src in shlex.split(args)[:-1]}
    source_roots = project["tool"]["setuptools"]["packages"]["find"]["where"]
    assert "pyproject.toml" in copied
    assert project["project"]["readme"] in copied
    for root in source_roots:
        assert root in copied, f"source root {root} is not copied"
    (workdir,) = builder.all("WORKDIR")
    (run,) = [r for r in builder.all("RUN") if "pip" in r]
    install = [c for c in run.split("&&") if " install " in c]
    assert len(install) == 1
    words = shlex.split(install[0])
    # Installs the directory holding the copied pyproject.toml: this project, nothing else.
    arguments = words[words.index("install") + 1 :]
    targets = [
        w
        for i, w in enumerate(arguments)
        if not w.startswith("-") and arguments[i - 1] != "--find-links"
    ]
    assert targets == ["."]
    destinations = {shlex.split(a)[-1] for a in builder.all("COPY")}
    assert destinations <= {"./", "./agent", "./docs/"}
    assert set(BUILD_CONTEXT) == copied, "the benchmarks (and tests) build what the image does"
    assert workdir.startswith("/")


def test_final_stage_runs_the_console_script_unprivileged(
    stages: list[Stage], project: dict[str, Any]
) -> None:
    final = stages[1]
    (entrypoint,) = final.all("ENTRYPOINT")
    (cmd,) = final.all("CMD")
    assert json.loads(entrypoint) == ["drain-guard"]
    assert "drain-guard" in project["project"]["scripts"]
    assert json.loads(cmd) == ["run"]
    (user,) = final.all("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit()
    assert int(uid) > 0
    assert not gid or gid.isdigit()
    # Nothing is built in the final stage: it installs Debian's packages and copies the venv.
    (run,) = final.all("RUN")
    assert "pip" not in run
    assert not final.all("ADD")
    (copy,) = final.all("COPY")
    assert copy.startswith("--from=builder ")


def test_image_user_matches_the_daemonset() -> None:
    daemonset = (REPO / "daemonset" / "base" / "daemonset.yaml").read_text()
    (user,) = parse_dockerfile(DOCKERFILE.read_text())[-1].all("USER")
    assert f"runAsUser: {user.partition(':')[0]}" in daemonset


def _matches(pattern: str, path: str) -> bool:
    """A .dockerignore pattern matches the path or one of its parent directories;
    ``**/`` matches at any depth."""
    parts = path.split("/")
    if pattern.startswith("**/"):
        tail = pattern.removeprefix("**/")
        return any(
            fnmatch.fnmatchcase("/".join(parts[j : i + 1]), tail)
            for i in range(len(parts))
            for j in range(i + 1)
        )
    return any(fnmatch.fnmatchcase("/".join(parts[: i + 1]), pattern) for i in range(len(parts)))


def _dockerignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins, and ``!`` re-includes."""
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        if _matches(pattern.removeprefix("!").rstrip("/"), path):
            ignored = not negate
    return ignored


def test_dockerignore_sends_what_the_build_needs_and_no_more() -> None:
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    needed = (
        "pyproject.toml",
        "README.md",
        "agent/drain_guard/__init__.py",
        "agent/drain_guard/cli.py",
        "docs/rights.md",
    )
    for path in needed:
        assert not _dockerignored(path, patterns), path
    for unwanted in (
        ".venv/bin/python",
        ".git/HEAD",
        "tests/conftest.py",
        "agent/drain_guard/__pycache__/x.pyc",
        "simulator/drain_guard_sim/apiserver/server.py",
        "docs/protocol.md",
    ):
        assert _dockerignored(unwanted, patterns), unwanted


def _env(stage: Stage) -> dict[str, str]:
    return dict(w.split("=", 1) for args in stage.all("ENV") for w in shlex.split(args))


def test_runs_optimised_from_bytecode_compiled_at_build(stages: list[Stage]) -> None:
    """PYTHONOPTIMIZE=2 on a read-only root needs its .opt-2.pyc files in the image: else
    every start compiles every module in memory (measured: more resident memory than none)."""
    builder, final = stages
    env = _env(final)
    assert env["PYTHONOPTIMIZE"] == "2"
    prefix = env["PYTHONPYCACHEPREFIX"]
    assert prefix.startswith("/opt/drain-guard/"), "the only tree copied from the builder"
    (run,) = [r for r in builder.all("RUN") if "compileall" in r]
    (compile_step,) = [c for c in run.split("&&") if "compileall" in c]
    words = shlex.split(compile_step)
    assert words[0] == f"PYTHONPYCACHEPREFIX={prefix}"
    assert words[words.index("-o") + 1] == "2"
    assert {"/opt/drain-guard/lib", "/usr/lib/python3.11", "/usr/lib/python3/dist-packages"} <= set(
        words
    )
    assert "--no-compile" in next(c for c in run.split("&&") if " install " in c)


def test_the_benchmarks_run_the_agent_as_the_image_does(stages: list[Stage]) -> None:
    env = _env(stages[1])
    del env["PATH"]
    assert env == {k: v.format(tree="/opt/drain-guard") for k, v in DEPLOYED_ENV.items()}


def test_the_systemd_unit_runs_optimised_as_the_image() -> None:
    unit = (REPO / "systemd" / "drain-guard.service").read_text()
    (line,) = [x for x in unit.splitlines() if x.startswith("Environment=PYTHON")]
    settings = dict(w.split("=", 1) for w in shlex.split(line.removeprefix("Environment=")))
    final = _env(parse_dockerfile(DOCKERFILE.read_text())[-1])
    kept = ("PYTHONOPTIMIZE", "PYTHONPYCACHEPREFIX", "MALLOC_MMAP_THRESHOLD_")
    assert settings == {k: final[k] for k in kept}


def test_glibcs_mmap_threshold_is_fixed_so_the_heap_does_not_grow_with_holds() -> None:
    """Set, glibc stops raising the threshold on each freed large buffer (mallopt(3)); the
    soak (benchmarks/soak.py) showed the heap growing by each hold without it."""
    final = _env(parse_dockerfile(DOCKERFILE.read_text())[-1])
    assert final["MALLOC_MMAP_THRESHOLD_"] == "131072"


def test_the_dockerfile_is_architecture_neutral() -> None:
    """A multi-architecture build (docs/install.md, issue 25) needs a Dockerfile that names no
    architecture and no platform, and a project with no compiled code of its own."""
    text = DOCKERFILE.read_text()
    for word in ("--platform", "amd64", "x86_64", "arm64", "aarch64", "ppc64le", "s390x"):
        assert word not in text, word
    for path in (REPO / "agent").rglob("*"):
        assert path.suffix not in (".c", ".pyx", ".so"), path
    install = (REPO / "docs" / "install.md").read_text()
    assert "podman build --platform linux/amd64,linux/arm64" in install
