"""The agent as deployed: the image's packages and flags, on this machine, for the benchmarks.

``build`` makes what the Dockerfile's builder makes: a virtual environment without pip holding
``pip install --no-compile .`` of this repository (the agent and its dependencies only: no
simulator, no test tools), and the bytecode compiled ahead under a ``PYTHONPYCACHEPREFIX`` for
that environment and the standard library. The agent then runs as the image runs it: the
``drain-guard`` console script with the image's ``ENV`` (``DEPLOYED_ENV``, which a test holds
equal to the Dockerfile's). The variants take one thing away each, for comparison.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: What the Dockerfile's builder copies from the repository (a test holds the two equal).
BUILD_CONTEXT = ("pyproject.toml", "README.md", "agent", "docs/rights.md")
#: The Dockerfile's runtime ENV (besides PATH); ``{tree}`` is where it installs, /opt/drain-guard.
DEPLOYED_ENV = {
    "MALLOC_MMAP_THRESHOLD_": "131072",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONOPTIMIZE": "2",
    "PYTHONPYCACHEPREFIX": "{tree}/pycache",
    "PYTHONUNBUFFERED": "1",
}
#: The agent with kubernetes_asyncio imported whole before it (as before
#: drain_guard.kube.kubeclient).
EAGER = (
    "import sys, kubernetes_asyncio.client, kubernetes_asyncio.config\n"
    "from drain_guard.cli import main\n"
    "sys.argv[0] = 'drain-guard'\n"
    "raise SystemExit(main())\n"
)
VARIANTS = (
    "deployed",  # the image: optimised, kubeclient's deferred import
    "deployed-eager",  # optimised, the library imported whole
    "deployed-unoptimised",  # deferred import, no PYTHONOPTIMIZE
    "deployed-eager-unoptimised",  # the image before both
    "development",  # python -m drain_guard in the project's .venv (test tools installed)
)


@dataclass(frozen=True)
class Agent:
    """How to start ``drain-guard``: the command before ``run ...`` and the environment."""

    variant: str
    python: str  # the interpreter, for import measurements
    program: tuple[str, ...]
    env: dict[str, str]
    #: Whether it takes ``--boot-id-file`` (revisions before issue 36's boot id do not).
    boot_id: bool = True


def build_context(source: Path, dest: Path) -> Path:
    """Copy of ``source``'s ``BUILD_CONTEXT`` in ``dest``, as the image's builder gets it.
    Building there keeps setuptools' ``build/`` and ``*.egg-info`` out of the source tree, so
    that two builds (two test workers) never write the same files."""
    dest.mkdir(parents=True)
    for name in BUILD_CONTEXT:
        if (source / name).is_dir():
            skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
            # Links kept, as the image's COPY keeps them: the build resolves
            # agent/drain_guard/rights.md, a link to docs/rights.md, itself.
            shutil.copytree(source / name, dest / name, ignore=skip, symlinks=True)
        else:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / name, dest / name)
    return dest


def build(tree: Path, source: Path = ROOT) -> Path:
    """Install the image's packages (of ``source``: this repository, or another revision's
    copy) into ``tree`` and compile their bytecode ahead (optimised as the image has it, and
    unoptimised too, for the unoptimised variants)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tree)], check=True)
    python = tree / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet"]
    context = build_context(source, tree.with_name(f"{tree.name}-context"))
    subprocess.run([*pip, "--no-cache-dir", "--no-compile", str(context)], check=True)
    env = {"PYTHONPYCACHEPREFIX": str(tree / "pycache"), "PATH": ""}
    compileall = [str(python), "-m", "compileall", "-q", "-o", "0", "-o", "2"]
    compileall += ["--invalidation-mode", "checked-hash"]
    subprocess.run([*compileall, str(tree / "lib")], env=env, check=True, stdout=subprocess.DEVNULL)
    # This machine's standard library may hold its test suite (the image's has none).
    stdlib = sysconfig.get_path("stdlib")
    tests = "/(test|tests|idle_test|site-packages|dist-packages)/"
    subprocess.run(
        [*compileall, "-x", tests, stdlib], env=env, check=True, stdout=subprocess.DEVNULL
    )
    return tree


def agent(variant: str, tree: Path | None) -> Agent:
    """The command and environment of ``variant``; every variant but ``development`` needs
    the ``tree`` that :func:`build` made."""
    if variant == "development":
        return Agent(variant, sys.executable, (sys.executable, "-m", "drain_guard"), {})
    if variant not in VARIANTS or tree is None:
        raise ValueError(f"unknown variant {variant!r} or no deployed tree")
    env = {k: v.format(tree=tree) for k, v in DEPLOYED_ENV.items()}
    if variant.endswith("-unoptimised"):
        del env["PYTHONOPTIMIZE"]
    python = str(tree / "bin" / "python")
    if "-eager" in variant:
        return Agent(variant, python, (python, "-c", EAGER), env)
    return Agent(variant, python, (str(tree / "bin" / "drain-guard"),), env)


def tree_for(variants: Iterable[str], workdir: Path) -> Path | None:
    """A deployed tree in ``workdir`` if any of ``variants`` needs one (about half a minute)."""
    if set(variants) <= {"development"}:
        return None
    print("building the deployed tree (pip install . and compileall)", flush=True)
    return build(workdir / "drain-guard")


def baseline(ref: str, workdir: Path) -> Agent:
    """Git revision ``ref``'s agent as deployed (the previous release, for same-run ratios),
    without ``--boot-id-file``, which an older agent does not take."""
    return replace(agent("deployed", baseline_tree(ref, workdir)), boot_id=False)


def baseline_tree(ref: str, workdir: Path) -> Path:
    """The deployed tree of git revision ``ref`` (its source exported, then built alike): the
    previous release, for same-run ratios."""
    source = workdir / "baseline-source"
    source.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True
    )
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True)
    return build(workdir / "baseline", source)
