"""How ``drain-guard run`` is installed: one explicit value (``--install``), which the runner
branches on, instead of a combination of ``--daemonset`` and ``--release-on-exit``.

``--install`` may be left out: it is then the one the older flags imply (``--daemonset``: a
DaemonSet's pod; ``--release-on-exit``: a systemd service; neither: standalone), so every
manifest and unit that passes them keeps working. Where the agent's API requests go
(``--kubeconfig``, or the node proxy's ``--api-socket``) is the credential, not the install.
The rights of each install are ``confine.permissions.INSTALL_MODES`` (``agent_rights``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from drain_guard.config.options import Option, SettingsGroup, env_name
from drain_guard.config.values import SettingsError, WorkloadRef, parse_workload


class InstallKind(enum.StrEnum):
    #: A pod of the agent's DaemonSet: on a stop it releases its holds only if the DaemonSet
    #: is gone or being deleted (an uninstall; a rolling update keeps them).
    DAEMONSET = "daemonset"
    #: A systemd service on the host: a stop releases its holds (there is no DaemonSet).
    SYSTEMD = "systemd"
    #: Neither (a trial, a test): a stop keeps its holds, which the next agent's max-hold ends.
    STANDALONE = "standalone"


INSTALL_OPTIONS: tuple[Option, ...] = (
    Option(
        "--install",
        env_name("--install"),
        None,
        "how this agent is installed: daemonset (needs --daemonset and --pod-name), systemd"
        " (releases holds on stop) or standalone (keeps them); default: what --daemonset or"
        " --release-on-exit imply, else standalone",
        choices=tuple(kind.value for kind in InstallKind),
    ),
    Option(
        "--daemonset",
        env_name("--daemonset"),
        None,
        "NAMESPACE/NAME of the agent's DaemonSet: on SIGTERM holds are released only if it is"
        " gone or being deleted",
    ),
    Option(
        "--pod-name",
        "POD_NAME",
        None,
        "this agent's pod (downward API metadata.name); with --daemonset, checked at start to"
        " be that DaemonSet's",
    ),
    Option(
        "--release-on-exit",
        env_name("--release-on-exit"),
        None,
        "release holds on SIGTERM/SIGINT (for systemd, where there is no DaemonSet)",
        boolean=True,
    ),
)


@dataclass(frozen=True)
class Install:
    """The install, and what only a DaemonSet's pod has: its DaemonSet (checked at start to
    own ``pod_name``, read on a stop to tell an uninstall from a rolling update)."""

    kind: InstallKind
    daemonset: WorkloadRef | None = None
    pod_name: str | None = None

    def on_exit(self) -> str:
        """What a stop by a signal does to the holds, for the start-up line."""
        if self.kind is InstallKind.DAEMONSET:
            return f"release if the DaemonSet {self.daemonset} is deleted, else keep holds"
        return "release" if self.kind is InstallKind.SYSTEMD else "keep holds"


def install_from(raw: Mapping[str, object]) -> Install:
    """The install from ``--install``, ``--daemonset``, ``--pod-name`` and
    ``--release-on-exit`` as merged (flag over environment over default)."""
    daemonset = (
        None if raw["daemonset"] is None else parse_workload("--daemonset", str(raw["daemonset"]))
    )
    release_on_exit = bool(raw["release_on_exit"])
    pod_name = str(raw["pod_name"] or "").strip() or None
    if daemonset is not None and release_on_exit:
        raise SettingsError(
            "--daemonset and --release-on-exit exclude each other (DaemonSet or systemd)"
        )
    implied = (
        InstallKind.DAEMONSET
        if daemonset is not None
        else InstallKind.SYSTEMD
        if release_on_exit
        else InstallKind.STANDALONE
    )
    kind = implied if raw["install"] is None else InstallKind(str(raw["install"]))
    if kind is InstallKind.DAEMONSET:
        if daemonset is None:
            raise SettingsError("--install daemonset needs --daemonset (the agent's DaemonSet)")
        if pod_name is None:
            raise SettingsError(
                "--daemonset needs --pod-name (POD_NAME from the downward API) to check at start"
                " that the DaemonSet owns this pod"
            )
        return Install(kind, daemonset, pod_name)
    if daemonset is not None:
        raise SettingsError(f"--install {kind} excludes --daemonset")
    if release_on_exit and kind is not InstallKind.SYSTEMD:
        raise SettingsError(f"--install {kind} excludes --release-on-exit")
    return Install(kind)


INSTALL = SettingsGroup("install", INSTALL_OPTIONS, install_from)
