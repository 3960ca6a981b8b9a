"""What a node changes on the host it runs on, recorded before and put back after.

A kubelet, kube-proxy and containerd are not guests: the kubelet writes kernel sysctls
(``vm.overcommit_memory``, ``kernel.panic``, ``kernel.panic_on_oops``, the key quotas) and
adds iptables chains, kube-proxy adds its chains, containerd and the CNI plugins mount
namespaces, overlays and shared memory, make cgroups, a bridge and its veths, and leave
directories behind. ``HostState.read`` takes what a test run may change; ``restore`` puts it
back (stopping nothing: the node's processes are gone by then) and ``HostState.read()``
compared with the recorded state says whether anything is left (``differences``).

Everything here runs the host's own tools (``iptables-save``, ``ip``, ``umount``) on the
state this module recorded, never on a guess: a mount, cgroup, link or chain that was there
before is never touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SYSCTLS", "HostState", "HostStateError"]

#: The sysctls a kubelet (KernelTunableModify: with protectKernelDefaults off it sets them),
#: kube-proxy (conntrack, route_localnet) and the bridge plugin (forwarding) may write.
SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/forwarding",
    "net/ipv6/conf/all/forwarding",
    "net/ipv4/conf/all/route_localnet",
    "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables",
    "net/netfilter/nf_conntrack_max",
    "net/netfilter/nf_conntrack_tcp_timeout_established",
    "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
    "net/netfilter/nf_conntrack_tcp_be_liberal",
)
#: Directories outside a node's work directory that containerd, its shims and the CNI
#: plugins create whatever they are told (a shim's socket directory, the CNI result cache,
#: the network namespaces' mount points); removed at restore when they were not there.
CREATED_PATHS = (
    Path("/run/containerd"),
    Path("/var/lib/cni"),
    Path("/run/netns"),
    Path("/var/lib/containerd"),
    Path("/var/log/pods"),
    Path("/var/log/containers"),
    Path("/var/lib/kubelet"),
    Path("/etc/cni"),
)
#: containerd's mount points of pods' network namespaces (files).
NETNS_FILES = "/run/netns/cni-"
#: Where the node's mounts are, besides its own directories (the network namespaces'
#: mount points, the shims' state): nothing else on the host is touched or compared, so
#: another program's mounts (a build's) are left alone.
MOUNT_SCOPES = (
    NETNS_FILES,  # containerd's names for pods' network namespaces; no one else's
    "/run/containerd/",
    "/var/lib/kubelet/",
    "/var/lib/containerd/",
)
#: Where other programs keep things too: removed only if empty.
SHARED_PATHS = (Path("/run/netns"),)
#: The kubelets' cgroups (cgroupfs driver): kubepods (the node's, cgroup root /) and
#: kubepods-NAME (an added node's cgroup root, with its kubepods), and everything under them.
CGROUP_PREFIX = "kubepods"
CGROUP_ROOT = Path("/sys/fs/cgroup")
SYSCTL_ROOT = Path("/proc/sys")


class HostStateError(RuntimeError):
    """The host could not be read or put back as it was; the message says what is left."""


def _run(*argv: str, stdin: str | None = None) -> str:
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise HostStateError(f"{' '.join(argv)} failed: {done.stderr.strip()}")
    return done.stdout


def _iptables_save(command: str) -> dict[str, str]:
    """Each table's chains and rules as ``iptables-save`` prints them, without the counters
    and the comment lines (a timestamp), so two reads of one state compare equal."""
    tables: dict[str, list[str]] = {}
    current: list[str] = []
    for line in _run(command).splitlines():
        if line.startswith("#") or line == "COMMIT":
            continue
        if line.startswith("*"):
            current = tables.setdefault(line[1:], [])
            continue
        if line.startswith(":"):
            line = line.rsplit(" ", 1)[0]  # ":CHAIN POLICY [packets:bytes]"
        current.append(line)
    # A table left with no rule, no chain of its own and every policy ACCEPT filters nothing:
    # the same as no table (iptables-nft cannot delete a table it made, only empty it).
    return {
        table: "\n".join(lines)
        for table, lines in tables.items()
        if not all(line.startswith(":") and line.endswith(" ACCEPT") for line in lines)
    }


def _mount_points(scopes: tuple[str, ...]) -> tuple[str, ...]:
    """The mount points under ``scopes``, in the order they were mounted."""
    points = (
        line.split()[4].encode().decode("unicode_escape")
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
    )
    return tuple(point for point in points if (point + "/").startswith(scopes))


def _cgroups() -> frozenset[str]:
    """The kubelet's cgroup directories in every hierarchy (kubepods, the pods', the
    containers'), as paths under /sys/fs/cgroup."""
    found: set[str] = set()
    if not CGROUP_ROOT.is_dir():
        return frozenset()
    for hierarchy in CGROUP_ROOT.iterdir():
        if hierarchy.is_symlink() or not hierarchy.is_dir():
            continue
        for top in hierarchy.glob(f"{CGROUP_PREFIX}*"):
            if not top.is_dir():
                continue
            found.add(str(top))
            for directory, subdirectories, _files in os.walk(top):
                found.update(str(Path(directory) / name) for name in subdirectories)
    return frozenset(found)


def _sysctls() -> dict[str, str]:
    values = {}
    for name in SYSCTLS:
        path = SYSCTL_ROOT / name
        if path.exists():
            values[name] = path.read_text().strip()
    return values


def _links(bridge: str) -> frozenset[str]:
    """The bridge and the links on it (the pods' veths), if there is one."""
    return frozenset(
        link["ifname"]
        for link in json.loads(_run("ip", "-j", "link", "show"))
        if bridge in (link["ifname"], link.get("master"))
    )


def _routes() -> frozenset[str]:
    return frozenset(
        json.dumps(route, sort_keys=True) for route in json.loads(_run("ip", "-j", "route", "show"))
    )


@dataclass(frozen=True)
class HostState:
    """The parts of the host a node changes, as they were when read."""

    bridge: str
    mount_scopes: tuple[str, ...]
    sysctls: dict[str, str]
    iptables: dict[str, str]
    ip6tables: dict[str, str]
    mounts: tuple[str, ...]
    cgroups: frozenset[str]
    links: frozenset[str]
    routes: frozenset[str]
    paths: frozenset[Path]

    @classmethod
    def read(cls, bridge: str, roots: tuple[Path, ...] = ()) -> HostState:
        """The host as it is, for a node on ``bridge`` with its own directories ``roots``."""
        scopes = (*MOUNT_SCOPES, *(f"{root}/" for root in roots))
        return cls(
            bridge=bridge,
            mount_scopes=scopes,
            sysctls=_sysctls(),
            iptables=_iptables_save("iptables-save"),
            ip6tables=_iptables_save("ip6tables-save"),
            mounts=_mount_points(scopes),
            cgroups=_cgroups(),
            links=_links(bridge),
            routes=_routes(),
            paths=frozenset(path for path in CREATED_PATHS if os.path.lexists(path)),
        )

    def differences(self, now: HostState) -> list[str]:
        """What ``now`` has that this state had not, or lacks that it had: one line each."""
        found: list[str] = []
        for name in sorted(set(self.sysctls) | set(now.sysctls)):
            if self.sysctls.get(name) != now.sysctls.get(name):
                found.append(f"sysctl {name}: {self.sysctls.get(name)} -> {now.sysctls.get(name)}")
        for family, before, after in (
            ("iptables", self.iptables, now.iptables),
            ("ip6tables", self.ip6tables, now.ip6tables),
        ):
            for table in sorted(set(before) | set(after)):
                if before.get(table, "") != after.get(table, ""):
                    found.append(f"{family} table {table} differs")
        for kind, was, is_ in (
            ("mount", set(self.mounts), set(now.mounts)),
            ("cgroup", self.cgroups, now.cgroups),
            ("link", self.links, now.links),
            ("route", self.routes, now.routes),
            ("path", {str(p) for p in self.paths}, {str(p) for p in now.paths}),
        ):
            found += [f"{kind} added: {item}" for item in sorted(is_ - was)]
            found += [f"{kind} gone: {item}" for item in sorted(was - is_)]
        return found

    def now(self) -> HostState:
        """The same parts of the host, read again."""
        return HostState.read(self.bridge, self.roots)

    @property
    def roots(self) -> tuple[Path, ...]:
        return tuple(Path(scope) for scope in self.mount_scopes[len(MOUNT_SCOPES) :])

    def restore(self) -> list[str]:
        """Put the host back as this state had it and return what still differs (nothing, if
        all went well). The node's processes must be gone."""
        errors: list[str] = []
        for step in (
            self._unmount,
            self._remove_links,
            self._remove_cgroups,
            self._restore_iptables,
            self._restore_sysctls,
            self._remove_paths,
        ):
            try:
                step()
            except (OSError, HostStateError) as error:
                errors.append(str(error))
        return errors + self.differences(self.now())

    def _unmount(self) -> None:
        before = set(self.mounts)
        # Last mounted first, and only what this state had not.
        for point in reversed(_mount_points(self.mount_scopes)):
            if point not in before:
                subprocess.run(["umount", "-l", point], capture_output=True, check=False)
                # A pod's network namespace is bind-mounted on an empty file containerd made
                # (the CNI teardown removes it; a pod killed with its node does not get one).
                if point.startswith(NETNS_FILES):
                    with contextlib.suppress(OSError):
                        os.unlink(point)

    def _remove_links(self) -> None:
        """The bridge and what is left on it; its routes go with it."""
        for link in sorted(_links(self.bridge) - self.links):
            subprocess.run(["ip", "link", "delete", link], capture_output=True, check=False)

    def _remove_cgroups(self) -> None:
        # Deepest first: a cgroup goes only once its children have.
        for directory in sorted(_cgroups() - self.cgroups, key=len, reverse=True):
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(directory)

    def _restore_iptables(self) -> None:
        for family, saved in (("iptables", self.iptables), ("ip6tables", self.ip6tables)):
            now = _iptables_save(f"{family}-save")
            for table in now:
                if now[table] == saved.get(table, ""):
                    continue
                if table in saved:
                    # The table's whole contents as they were: its chains, rules, policies.
                    _run(f"{family}-restore", "--table", table, stdin=_as_restore(table, saved))
                else:
                    _run(family, "-t", table, "-F")
                    _run(family, "-t", table, "-X")

    def _restore_sysctls(self) -> None:
        for name, value in self.sysctls.items():
            path = SYSCTL_ROOT / name
            if path.read_text().strip() != value:
                path.write_text(value)

    def _remove_paths(self) -> None:
        for path in CREATED_PATHS:
            if path in self.paths or not os.path.lexists(path):
                continue
            if path in SHARED_PATHS:
                with contextlib.suppress(OSError):  # another program's namespace is there
                    path.rmdir()
            else:
                subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=False)


def _as_restore(table: str, saved: dict[str, str]) -> str:
    lines = []
    for line in saved[table].splitlines():
        lines.append(f"{line} [0:0]" if line.startswith(":") else line)
    return f"*{table}\n" + "\n".join(lines) + "\nCOMMIT\n"
