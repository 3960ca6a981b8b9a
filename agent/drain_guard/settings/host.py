"""``drain-guard run``'s host group: where and how the agent reads the booted OS image
(``node.host.BootedImageReader`` is given this group, and nothing else of the settings)."""

from __future__ import annotations

import enum
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from drain_guard.config.options import Option, SettingsGroup, env_name
from drain_guard.config.values import SettingsError


class BootedImageSource(enum.StrEnum):
    OSTREE = "ostree"
    RPM_OSTREE = "rpm-ostree"


HOST_OPTIONS: tuple[Option, ...] = (
    Option("--host-root", env_name("--host-root"), "/", "where the host's / is mounted"),
    Option(
        "--cmdline-file",
        env_name("--cmdline-file"),
        "/proc/cmdline",
        "kernel command line naming the booted ostree deployment (read as is, not under"
        " --host-root); read once per boot",
    ),
    Option(
        "--boot-id-file",
        env_name("--boot-id-file"),
        "/proc/sys/kernel/random/boot_id",
        "the kernel's boot id: a new one is a new boot, whose booted image is read again",
    ),
    Option(
        "--booted-image-source",
        env_name("--booted-image-source"),
        BootedImageSource.OSTREE.value,
        "where the booted image comes from",
        choices=tuple(s.value for s in BootedImageSource),
    ),
    Option(
        "--rpm-ostree-command",
        env_name("--rpm-ostree-command"),
        "rpm-ostree",
        "command (shell words) for --booted-image-source rpm-ostree",
    ),
)


@dataclass(frozen=True)
class HostSettings:
    """Where the host's files are and how its booted image is read."""

    host_root: str = "/"
    cmdline_file: str = "/proc/cmdline"
    boot_id_file: str = "/proc/sys/kernel/random/boot_id"
    booted_image_source: BootedImageSource = BootedImageSource.OSTREE
    rpm_ostree_command: tuple[str, ...] = ("rpm-ostree",)


def host_settings(raw: Mapping[str, object]) -> HostSettings:
    """The host group from the merged values of :data:`HOST_OPTIONS`."""
    return HostSettings(
        host_root=str(raw["host_root"]),
        cmdline_file=str(raw["cmdline_file"]),
        boot_id_file=str(raw["boot_id_file"]),
        booted_image_source=BootedImageSource(str(raw["booted_image_source"])),
        rpm_ostree_command=_split_command(str(raw["rpm_ostree_command"])),
    )


def _split_command(text: str) -> tuple[str, ...]:
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise SettingsError(f"invalid --rpm-ostree-command {text!r}: {exc}") from None
    if not words:
        raise SettingsError("--rpm-ostree-command is empty")
    return tuple(words)


HOST = SettingsGroup("host", HOST_OPTIONS, host_settings)
