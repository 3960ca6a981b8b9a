"""``drain-guard copy-node-credentials``: the kubelet's kubeconfig and client certificate,
copied for an agent that may not read them itself.

The kubelet's key is 0600 root. Reading it takes a root process; a root process without
capabilities still reads every root-owned file it can see, and on RHCOS the agent must see
``/sysroot/ostree``, which holds all of ``/var`` and every deployment's ``/etc``. So the agent
stays UID 65532 and this copier, root with nothing of the host in view but the kubelet's
kubeconfig and ``pki`` directory, writes them for the agent's group: the kubeconfig unchanged
and each file it names, at the same path relative to ``/var/lib/kubelet``, so that the copy
mounted at ``/var/lib/kubelet`` is read exactly as the kubelet's own. Each file is written new
and renamed into place (a reader never sees half a key), mode 0640, group the copier's own.

The kubelet rotates its certificate by moving the ``kubelet-client-current.pem`` link to a new
file; the copier reads the sources again every ``--interval`` and rewrites what changed, and
the agent reads the copy again when the API server refuses the old certificate (401).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from types import FrameType
from typing import Any, NoReturn

import yaml

#: Where the kubelet keeps its kubeconfig and, by path, the files that kubeconfig names.
KUBELET_DIR = PurePosixPath("/var/lib/kubelet")
KUBECONFIG = KUBELET_DIR / "kubeconfig"
#: The kubeconfig fields that name a file (client-go's, relative to the kubeconfig's own
#: directory when not absolute), per section entry.
FILE_FIELDS = {
    ("clusters", "cluster"): ("certificate-authority",),
    ("users", "user"): ("client-certificate", "client-key", "tokenFile"),
}
#: More links than a certificate store makes (one, ``-current`` to the pair): a loop.
MAX_LINKS = 8
MODE = 0o640
DIR_MODE = 0o750
DEFAULT_INTERVAL = 10.0
EXIT_FAILURE = 1


class CopyError(Exception):
    """A source that cannot be copied as it is (missing, or naming a file it may not)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--from",
        dest="source_root",
        default="/",
        help="where the host's / is seen (default /): the kubeconfig is <from>/var/lib/kubelet/"
        "kubeconfig, the files it names are read under <from>",
    )
    parser.add_argument("--to", required=True, help="directory to write the copy into")
    parser.add_argument("--once", action="store_true", help="copy once and exit")
    parser.add_argument(
        "--interval",
        type=_positive_seconds,
        default=DEFAULT_INTERVAL,
        help=f"seconds between two reads of the sources (default {DEFAULT_INTERVAL:g})",
    )


def _positive_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"must be above 0: {text!r}")
    return seconds


def named_files(kubeconfig: Mapping[str, Any]) -> list[PurePosixPath]:
    """The files ``kubeconfig`` names, as paths relative to /var/lib/kubelet; a file outside
    it is refused (the copy would hand it to the agent's group)."""
    names: list[PurePosixPath] = []
    for (section, key), fields in FILE_FIELDS.items():
        for entry in kubeconfig.get(section) or ():
            body = entry.get(key) if isinstance(entry, Mapping) else None
            if not isinstance(body, Mapping):
                continue
            for field in fields:
                value = body.get(field)
                if value is None:
                    continue
                if not isinstance(value, str) or not value:
                    raise CopyError(f"{section} entry's {field} is not a file name: {value!r}")
                path = PurePosixPath(os.path.normpath(KUBELET_DIR / value))  # absolute wins
                if KUBELET_DIR not in path.parents:
                    raise CopyError(
                        f"{KUBECONFIG} names its {field} {value}, outside {KUBELET_DIR}: not copied"
                    )
                names.append(path.relative_to(KUBELET_DIR))
    return list(dict.fromkeys(names))


def read_sources(root: Path) -> dict[PurePosixPath, bytes]:
    """The kubeconfig and every file it names, by path relative to /var/lib/kubelet, read
    under ``root`` (links followed within ``root`` and /var/lib/kubelet only)."""
    kubeconfig = _read(root, KUBECONFIG)
    try:
        doc = yaml.safe_load(kubeconfig)
    except yaml.YAMLError as exc:
        raise CopyError(f"{KUBECONFIG} is not YAML: {exc}".replace("\n", " ")) from None
    if not isinstance(doc, Mapping):
        raise CopyError(f"{KUBECONFIG} is not a kubeconfig (not a mapping)")
    sources = {KUBECONFIG.relative_to(KUBELET_DIR): kubeconfig}
    for name in named_files(doc):
        sources[name] = _read(root, KUBELET_DIR / name)
    return sources


def _read(root: Path, path: PurePosixPath) -> bytes:
    """``path`` (a host path) read under ``root``, following a link in its last component as
    the host would, but never out of /var/lib/kubelet."""
    for _ in range(MAX_LINKS):
        where = root / path.relative_to("/")
        try:
            target = os.readlink(where)
        except FileNotFoundError:
            raise CopyError(f"{path} is missing") from None
        except OSError:  # not a link
            pass
        else:
            link, path = path, PurePosixPath(os.path.normpath(path.parent / target))
            if KUBELET_DIR not in path.parents:
                raise CopyError(f"{link} links to {path}, outside {KUBELET_DIR}: not copied")
            continue
        # No link follows: a link put in its place since is a failed read, tried again later.
        try:
            fd = os.open(where, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise CopyError(f"cannot read {path}: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as f:
            return f.read()
    raise CopyError(f"{path}: more than {MAX_LINKS} links")


def write_copy(target: Path, sources: Mapping[PurePosixPath, bytes]) -> list[PurePosixPath]:
    """Write each file of ``sources`` whose content differs under ``target``; returns those
    written. The kubeconfig last: a reader that sees a new one finds its files."""
    written = []
    kubeconfig = KUBECONFIG.relative_to(KUBELET_DIR)
    for name in sorted(sources, key=lambda n: n == kubeconfig):
        path = target / name
        try:
            if path.read_bytes() == sources[name]:
                continue
        except FileNotFoundError:
            pass
        _make_dirs(target, name.parent)
        _replace(path, sources[name])
        written.append(name)
    return written


def _make_dirs(target: Path, relative: PurePosixPath) -> None:
    path = target
    for part in relative.parts:
        path = path / part
        try:
            path.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue
        os.chown(path, -1, os.getegid())
        path.chmod(DIR_MODE)  # whatever the umask


def _replace(path: Path, content: bytes) -> None:
    """A new file, then renamed over ``path``: ``path`` is the old file or the whole new one."""
    new = path.with_name(f".{path.name}.new")
    new.unlink(missing_ok=True)  # left by a copier stopped mid-write
    fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, MODE)
    with os.fdopen(fd, "wb") as f:
        os.fchown(fd, -1, os.getegid())
        os.fchmod(fd, MODE)  # whatever the umask
        f.write(content)
    new.replace(path)


def copy_once(root: Path, target: Path) -> list[PurePosixPath]:
    return write_copy(target, read_sources(root))


def _stop(_signum: int, _frame: FrameType | None) -> NoReturn:
    # Every write is a rename: stopping anywhere leaves each file whole.
    raise SystemExit(0)


def main(args: argparse.Namespace) -> int:
    """Copy, then (without ``--once``) keep the copy current until SIGTERM: a failure is one
    line when it starts (or changes), then tried again each ``--interval``."""
    prog = "drain-guard copy-node-credentials"
    root, target = Path(args.source_root), Path(args.to)
    if not target.is_dir():
        print(f"{prog}: error: --to {target} is not a directory", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _stop)  # as PID 1 the default would be to ignore it
    failure: str | None = None
    while True:
        try:
            written = copy_once(root, target)
        except (CopyError, OSError) as exc:
            if args.once:
                print(f"{prog}: error: {exc}", file=sys.stderr)
                return EXIT_FAILURE
            if str(exc) != failure:
                print(
                    f"{prog}: error: {exc}; trying again every {args.interval:g}s",
                    file=sys.stderr,
                    flush=True,
                )
            failure = str(exc)
        else:
            if written or failure is not None or args.once:
                copied = ", ".join(map(str, written)) or "nothing new"
                print(f"{prog}: copied {copied} to {target}", flush=True)
            failure = None
            if args.once:
                return 0
        time.sleep(args.interval)
