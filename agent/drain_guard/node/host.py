"""The image the host booted: ostree deployment origin, or ``rpm-ostree status --json``.

The parsing is pure (``parse_cmdline``, ``parse_origin``, ``parse_rpm_ostree_status``); the
readers around it are thin and never raise: a failure comes back as a ``BootedImage`` with
no digest and one line of ``error``, so the no-op guard abstains (invariant 7). In the
DaemonSet the host's ``/`` is mounted at ``host_root``: every path, and every symlink on the
way, is resolved inside it, never outside.
"""

from __future__ import annotations

import asyncio
import configparser
import json
import logging
import os
import re
import subprocess
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from drain_guard.core.imageref import ImageRefError, digest_of
from drain_guard.guards import BootedImage
from drain_guard.kube.retry import Backoff
from drain_guard.runtime.agent_metrics import Metrics
from drain_guard.settings.host import HostSettings

__all__ = [
    "DEFAULT_RPM_OSTREE_COMMAND",
    "HostError",
    "copy_booted_origin",
    "deployment_origin_path",
    "parse_cmdline",
    "parse_origin",
    "parse_rpm_ostree_status",
    "read_booted_image",
    "read_booted_image_ostree",
    "read_booted_image_rpm_ostree",
    "resolve_inside",
]

DEFAULT_RPM_OSTREE_COMMAND: tuple[str, ...] = ("rpm-ostree", "status", "--json")
#: Linux gives up after 40 links (ELOOP); so do we.
MAX_SYMLINKS = 40
#: Origin files and rpm-ostree output are small; anything bigger is not what we expect.
MAX_READ_BYTES = 1 << 20

_OSTREE_ARG_RE = re.compile(r"^/ostree/boot\.[^/]+/[^/]+/[^/]+/[0-9]+$")
#: RHCOS's ``/ostree`` is a link to ``sysroot/ostree`` (the physical root), so a deployment
#: may resolve under ``sysroot/`` inside the host root.
_DEPLOY_RE = re.compile(r"^(?:sysroot/)?ostree/deploy/[^/]+/deploy/[0-9a-f]+\.[0-9]+$")
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")

log = logging.getLogger(__name__)


class HostError(Exception):
    """The booted image cannot be determined; the message is one clear line."""


def parse_cmdline(text: str) -> str:
    """The ``ostree=`` boot path from a kernel command line (the last one, as the kernel)."""
    values = [arg.partition("=")[2] for arg in text.split() if arg.startswith("ostree=")]
    if not values:
        raise HostError("kernel command line has no ostree= argument (not an ostree system?)")
    value = values[-1].strip('"')
    if not _OSTREE_ARG_RE.match(value):
        raise HostError(
            f"kernel command line ostree={value!r} is not /ostree/boot.N/<os>/<bootcsum>/<serial>"
        )
    return value


def resolve_inside(root: Path, path: str) -> tuple[Path, str]:
    """Resolve ``path`` as if ``root`` were ``/``; return (real path, path relative to root).

    Absolute link targets are taken relative to ``root``; a ``..`` that would leave it is
    an error, as is a chain of more than MAX_SYMLINKS links (a loop).
    """
    parts = deque(path.split("/"))
    resolved: list[str] = []
    links = 0
    while parts:
        part = parts.popleft()
        if part in ("", "."):
            continue
        if part == "..":
            if not resolved:
                raise HostError(f"{path}: a link leads outside the host root")
            resolved.pop()
            continue
        candidate = root.joinpath(*resolved, part)
        if candidate.is_symlink():
            links += 1
            if links > MAX_SYMLINKS:
                raise HostError(f"{path}: too many levels of symbolic links (a loop?)")
            target = os.readlink(candidate)
            if target.startswith("/"):
                resolved = []
            parts.extendleft(reversed(target.split("/")))
        else:
            resolved.append(part)
    return root.joinpath(*resolved), "/".join(resolved)


def deployment_origin_path(host_root: Path, boot_path: str) -> Path:
    """The origin file of the deployment ``boot_path`` links to, inside ``host_root``."""
    deployment, relative = resolve_inside(host_root, boot_path)
    if not deployment.is_dir():
        raise HostError(f"{boot_path} resolves to /{relative}, which is not a directory")
    if not _DEPLOY_RE.match(relative):
        raise HostError(
            f"{boot_path} resolves to /{relative}, not /ostree/deploy/<os>/deploy/"
            "<checksum>.<serial>"
        )
    origin, origin_relative = resolve_inside(host_root, relative + ".origin")
    if not origin.is_file():
        raise HostError(f"origin file /{origin_relative} is missing")
    return origin


def parse_origin(text: str) -> str:
    """``[origin] container-image-reference`` from an ostree origin file (key-file syntax)."""
    # GKeyFile syntax: "=" only, "#" comments, case-sensitive keys, no interpolation.
    parser = configparser.ConfigParser(
        interpolation=None, strict=False, delimiters=("=",), comment_prefixes=("#",)
    )
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        parser.read_string(text)
    except configparser.Error as err:
        first = str(err).splitlines()[0]
        raise HostError(f"origin file is not a key file: {first}") from None
    if not parser.has_section("origin"):
        raise HostError("origin file has no [origin] section")
    reference = parser.get("origin", "container-image-reference", fallback=None)
    if reference is None:
        refspec = parser.get("origin", "refspec", fallback=None)
        if refspec is not None:
            raise HostError(f"booted deployment is not a container image (refspec={refspec})")
        raise HostError("origin file has no container-image-reference")
    if not reference.strip():
        raise HostError("origin file has an empty container-image-reference")
    return reference.strip()


def parse_rpm_ostree_status(text: str) -> tuple[str, str | None]:
    """(reference, digest) of the booted deployment in ``rpm-ostree status --json``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise HostError(f"rpm-ostree status output is not JSON: {err}") from None
    deployments = data.get("deployments") if isinstance(data, dict) else None
    if not isinstance(deployments, list):
        raise HostError("rpm-ostree status output has no deployments list")
    booted = [d for d in deployments if isinstance(d, dict) and d.get("booted") is True]
    if len(booted) != 1:
        raise HostError(f"rpm-ostree status shows {len(booted)} booted deployments, not 1")
    reference = booted[0].get("container-image-reference")
    if not isinstance(reference, str) or not reference:
        raise HostError("booted deployment has no container-image-reference")
    digest = booted[0].get("container-image-reference-digest")
    if digest is not None and (not isinstance(digest, str) or not _DIGEST_RE.match(digest)):
        raise HostError(f"booted deployment digest {digest!r} is not sha256:<64 hex>")
    return reference, digest


def _read_text(path: Path) -> str:
    with path.open("rb") as f:
        data = f.read(MAX_READ_BYTES + 1)
    if len(data) > MAX_READ_BYTES:
        raise HostError(f"{path} is larger than {MAX_READ_BYTES} bytes")
    return data.decode("utf-8", errors="replace")


def _from_reference(reference: str, digest: str | None, source: str) -> BootedImage:
    if digest is None:
        try:
            digest = digest_of(reference)
        except ImageRefError as err:
            return BootedImage(None, reference, source, f"booted image reference: {err}")
        if digest is None:
            return BootedImage(
                None, reference, source, f"booted reference {reference} has no digest"
            )
    return BootedImage(digest, reference, source)


def read_booted_image_ostree(host_root: Path, cmdline_file: Path) -> BootedImage:
    """From the kernel cmdline, the booted deployment and its origin file, under host_root."""
    source = "ostree"
    try:
        boot_path = parse_cmdline(_read_text(cmdline_file))
        origin = deployment_origin_path(host_root, boot_path)
        reference = parse_origin(_read_text(origin))
    except HostError as err:
        return BootedImage(None, None, source, str(err))
    except OSError as err:
        return BootedImage(None, None, source, f"{err.strerror or err}: {err.filename}")
    return _from_reference(reference, None, source)


def read_booted_image_rpm_ostree(
    command: Sequence[str] = DEFAULT_RPM_OSTREE_COMMAND, timeout: float = 30.0
) -> BootedImage:
    """From ``rpm-ostree status --json`` (blocking: the controller runs it in a thread)."""
    source = "rpm-ostree"
    if not command:
        return BootedImage(None, None, source, "no rpm-ostree command configured")
    try:
        done = subprocess.run(
            list(command),
            capture_output=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return BootedImage(None, None, source, f"{command[0]} timed out after {timeout:g} s")
    except OSError as err:
        return BootedImage(None, None, source, f"cannot run {command[0]}: {err.strerror or err}")
    if done.returncode != 0:
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        why = lines[-1] if lines else "no message"
        return BootedImage(None, None, source, f"{command[0]} exited {done.returncode}: {why}")
    try:
        reference, digest = parse_rpm_ostree_status(done.stdout.decode(errors="replace"))
    except HostError as err:
        return BootedImage(None, None, source, str(err))
    return _from_reference(reference, digest, source)


def read_booted_image(
    host_root: str | Path,
    cmdline_file: str | Path,
    source: str = "ostree",
    rpm_ostree_command: Sequence[str] = DEFAULT_RPM_OSTREE_COMMAND,
    timeout: float = 30.0,
) -> BootedImage:
    """The booted image from the chosen source (``ostree`` or ``rpm-ostree``); never raises."""
    if source == "rpm-ostree":
        return read_booted_image_rpm_ostree(rpm_ostree_command, timeout)
    if source != "ostree":
        return BootedImage(None, None, source, f"unknown booted-image source {source!r}")
    return read_booted_image_ostree(Path(host_root), Path(cmdline_file))


def copy_booted_origin(host_root: Path, cmdline_file: Path, target: Path) -> str:
    """Copy under ``target`` what :func:`read_booted_image_ostree` reads under ``host_root``
    and nothing more: the booted deployment's origin file, an empty directory for the
    deployment, and the kernel's ``ostree=`` boot path as a link to it. Read with
    ``host_root=target`` it gives the same answer; the rest of the host's ostree tree (every
    deployment's ``/etc``, all of ``/var``) is not there. Returns the boot path and the
    origin it leads to; a host whose booted image cannot be read is a :class:`HostError`
    (nothing written)."""
    boot_path = parse_cmdline(_read_text(cmdline_file))
    _, relative = resolve_inside(host_root, boot_path)
    content = _read_text(deployment_origin_path(host_root, boot_path))
    deployment = target / relative
    deployment.mkdir(parents=True, exist_ok=True)
    origin = target / f"{relative}.origin"
    new = origin.with_name(f".{origin.name}.new")
    new.write_text(content)
    new.replace(origin)
    link = target / boot_path.lstrip("/")
    link.parent.mkdir(parents=True, exist_ok=True)
    new_link = link.with_name(f".{link.name}.new")
    new_link.unlink(missing_ok=True)
    new_link.symlink_to("/" + relative)  # resolved inside the copy, as on the host
    new_link.replace(link)
    return f"{boot_path} -> /{relative}.origin"


class BootedImageReader:
    """The booted image, read once per boot and again while reading it fails: with backoff
    (1 s doubling to 5 min), since the failure may pass (the origin file missing for a moment
    at boot, rpm-ostree's ``Transaction in progress``); until issue 35 an error at start stood
    for the life of the process.

    The kernel command line and the deployment it names cannot change without a reboot, so
    each check reads only the kernel's boot id (``--boot-id-file``, 37 bytes of procfs); a new
    one (the simulator reboots a host under a running agent) reads the image again. A boot id
    that cannot be read (no descriptor left, EMFILE) is not a new boot: the last image stands.
    """

    def __init__(
        self,
        settings: HostSettings,
        metrics: Metrics,
        now: Callable[[], datetime],
        monotonic: Callable[[], float],
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self._now = now
        self._monotonic = monotonic
        self._boot: str | None = None
        self._value: BootedImage | None = None
        self._backoff = Backoff(base=1.0, cap=300.0)
        #: When (monotonic) a failed read is due again; None while the image is known.
        self._retry_at: float | None = None

    def _boot_id(self) -> str:
        try:
            with open(self.settings.boot_id_file, "rb") as f:
                return f.read(64).decode("ascii", errors="replace").strip()
        except OSError as exc:
            if self._boot is None:
                log.warning("cannot read the boot id (%s): the booted image is read once", exc)
                return f"<unreadable: {exc.strerror or exc}>"
            return self._boot

    def _read(self) -> BootedImage:
        return read_booted_image(
            host_root=self.settings.host_root,
            cmdline_file=self.settings.cmdline_file,
            source=self.settings.booted_image_source.value,
            rpm_ostree_command=(*self.settings.rpm_ostree_command, "status", "--json"),
        )

    async def get(self) -> BootedImage:
        # The boot id is read in the loop, not in a thread: on every decision, and so on the
        # path from a drain request to its hold, where a thread hop waited for the scheduler
        # (a loaded node's p99, docs/benchmarks.md); procfs answers from memory.
        boot = self._boot_id()
        due = self._retry_at is not None and self._monotonic() >= self._retry_at
        if boot != self._boot or self._value is None or due:
            self._value = self._noted(await asyncio.to_thread(self._read))
            self._boot = boot
        return self._value

    def retry_in(self) -> float | None:
        """Seconds until a failed read is due again (the loop wakes for it), or None."""
        if self._retry_at is None:
            return None
        return max(0.0, self._retry_at - self._monotonic())

    def _noted(self, value: BootedImage) -> BootedImage:
        """``value`` with since when reading fails; logged and counted once per error."""
        last = self._value
        if value.error is None:
            self._retry_at = None
            self._backoff.reset()
            if last is None or last.error is not None or last.digest != value.digest:
                log.info("booted image %s (from %s)", value.digest, value.source)
            return value
        since = self._now() if last is None or last.failing_since is None else last.failing_since
        delay = self._backoff.next_delay()
        self._retry_at = self._monotonic() + delay
        if last is None or last.error != value.error:
            self.metrics.count_invalid_input("host_file")
            log.warning(
                "booted image unknown: %s; read again in %.0fs, then with backoff",
                value.error,
                delay,
            )
        return replace(value, failing_since=since)
