"""A simulated RHCOS host tree: the files the agent reads to know the booted OS image.

Laid out as on a real ostree host, below a per-node directory standing for ``/``:

- ``proc/cmdline`` holds ``ostree=/ostree/boot.<B>/rhcos/<bootcsum>/0``, and
  ``proc/sys/kernel/random/boot_id`` a new id at every boot (the agent reads the command line
  once per boot);
- ``ostree/boot.<B>/rhcos/<bootcsum>/0`` is a symlink with an *absolute* target
  ``/ostree/deploy/rhcos/deploy/<checksum>.0`` (so a reader must resolve it inside its host
  root, never on the machine running the test);
- ``ostree/deploy/rhcos/deploy/<checksum>.0/`` is the deployment and
  ``<checksum>.0.origin`` its origin file with ``container-image-reference``.

:meth:`HostFS.reboot_into` plays an ``rpm-ostree rebase`` plus reboot: a new deployment, the
boot version flipped, the command line switched. Rebooting into the image already booted keeps
the deployment (MCO 4.15 reboots without rebasing when the pullspecs are equal).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Deployment", "HostFS"]

OS_NAME = "rhcos"
TRANSPORT = "ostree-unverified-registry"


@dataclass(frozen=True)
class Deployment:
    """One ostree deployment of a container image."""

    checksum: str
    serial: int
    bootcsum: str
    image: str

    @property
    def name(self) -> str:
        return f"{self.checksum}.{self.serial}"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class HostFS:
    """The host tree of one simulated node, rooted at ``root`` (created if missing)."""

    def __init__(self, root: Path, image: str, kernel_args: str = "rw root=UUID=sim") -> None:
        self.root = root
        self.kernel_args = kernel_args
        self.boot_count = 0
        self._bootversion = 1
        self._deployments: list[Deployment] = []
        self._booted = self._deploy(image)
        self._write_boot()

    # -- paths -------------------------------------------------------------------------------

    @property
    def cmdline_file(self) -> Path:
        return self.root / "proc" / "cmdline"

    @property
    def boot_id_file(self) -> Path:
        return self.root / "proc" / "sys" / "kernel" / "random" / "boot_id"

    def new_boot_id(self) -> None:
        """A new boot id, as the kernel makes one at every boot."""
        self.boot_id_file.parent.mkdir(parents=True, exist_ok=True)
        self.boot_id_file.write_text(f"{uuid.uuid4()}\n")

    @property
    def deploy_dir(self) -> Path:
        return self.root / "ostree" / "deploy" / OS_NAME / "deploy"

    def origin_file(self, deployment: Deployment | None = None) -> Path:
        dep = deployment or self._booted
        return self.deploy_dir / f"{dep.name}.origin"

    # -- state ------------------------------------------------------------------------------

    @property
    def booted(self) -> Deployment:
        return self._booted

    @property
    def booted_image(self) -> str:
        """The booted pullspec, as read back from the origin file (what a real reader sees)."""
        for line in self.origin_file().read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "container-image-reference":
                return value.strip().split(":", 1)[1]
        raise ValueError(f"no container-image-reference in {self.origin_file()}")

    @property
    def deployments(self) -> tuple[Deployment, ...]:
        return tuple(self._deployments)

    def reboot_into(self, image: str) -> Deployment:
        """Boot ``image``: stage a new deployment unless it is already booted, then reboot."""
        if image != self._booted.image:
            self._booted = self._deploy(image)
            # ostree keeps the booted deployment and one rollback.
            for old in self._deployments[:-2]:
                self._remove(old)
            self._deployments = self._deployments[-2:]
        self._bootversion ^= 1
        self.boot_count += 1
        self._write_boot()
        return self._booted

    @property
    def mcd_current_config_file(self) -> Path:
        return self.root / "etc" / "machine-config-daemon" / "currentconfig"

    def read_mcd_current_config(self) -> tuple[str, str] | None:
        """The MCD's on-disk (config, image) of its last completed update, if any."""
        try:
            data = json.loads(self.mcd_current_config_file.read_text())
        except FileNotFoundError:
            return None
        return str(data["config"]), str(data["image"])

    def write_mcd_current_config(self, config: str, image: str) -> None:
        """Written before the reboot, as the MCD's storeCurrentConfigOnDisk does."""
        self.mcd_current_config_file.parent.mkdir(parents=True, exist_ok=True)
        self.mcd_current_config_file.write_text(json.dumps({"config": config, "image": image}))

    def write_rpm_ostree_status(self, path: Path | None = None) -> Path:
        """Write what ``rpm-ostree status --json`` prints and a script printing it.

        Returns the script's path, usable as the agent's ``--rpm-ostree-command``.
        """
        data_path = path or self.root / "run" / "sim" / "rpm-ostree-status.json"
        data_path.parent.mkdir(parents=True, exist_ok=True)
        deployments = [
            {
                "id": f"{OS_NAME}-{d.name}",
                "osname": OS_NAME,
                "serial": d.serial,
                "checksum": d.checksum,
                "booted": d == self._booted,
                "container-image-reference": f"{TRANSPORT}:{d.image}",
                "container-image-reference-digest": d.image.rpartition("@")[2] or None,
            }
            for d in reversed(self._deployments)
        ]
        data_path.write_text(json.dumps({"deployments": deployments, "transaction": None}))
        script = data_path.with_suffix(".sh")
        script.write_text(f"#!/bin/sh\nexec cat '{data_path}'\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return script

    # -- internals --------------------------------------------------------------------------

    def _deploy(self, image: str) -> Deployment:
        checksum = _sha256(f"{image}#{len(self._deployments)}#{self.root}")
        dep = Deployment(checksum, 0, _sha256(f"boot:{checksum}"), image)
        dep_dir = self.deploy_dir / dep.name
        (dep_dir / "etc").mkdir(parents=True, exist_ok=True)
        (dep_dir / "etc" / "os-release").write_text(
            'ID="rhcos"\nNAME="Red Hat Enterprise Linux CoreOS"\n'
        )
        self.origin_file(dep).write_text(
            f"[origin]\ncontainer-image-reference={TRANSPORT}:{image}\n"
        )
        self._deployments.append(dep)
        return dep

    def _remove(self, dep: Deployment) -> None:
        shutil.rmtree(self.deploy_dir / dep.name)
        self.origin_file(dep).unlink()

    def _write_boot(self) -> None:
        dep = self._booted
        boot_dir = self.root / "ostree" / f"boot.{self._bootversion}" / OS_NAME / dep.bootcsum
        boot_dir.mkdir(parents=True, exist_ok=True)
        link = boot_dir / str(dep.serial)
        if link.is_symlink():
            link.unlink()
        link.symlink_to(f"/ostree/deploy/{OS_NAME}/deploy/{dep.name}")
        # The previous boot version's links go, as ostree swaps boot.0 and boot.1.
        stale = self.root / "ostree" / f"boot.{self._bootversion ^ 1}"
        if stale.exists():
            shutil.rmtree(stale)
        self.cmdline_file.parent.mkdir(parents=True, exist_ok=True)
        self.cmdline_file.write_text(
            f"BOOT_IMAGE=(hd0,gpt3)/ostree/{OS_NAME}-{dep.bootcsum}/vmlinuz {self.kernel_args} "
            f"ostree=/ostree/boot.{self._bootversion}/{OS_NAME}/{dep.bootcsum}/{dep.serial}\n"
        )
        self.new_boot_id()
