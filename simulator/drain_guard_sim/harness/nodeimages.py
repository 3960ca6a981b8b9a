"""The real node's images, made here with no registry: an OCI archive of a few files (the
pause image), and the user's kustomization that points the agents' image at a local one."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from collections.abc import Mapping
from pathlib import Path

from drain_guard_sim.harness.nodenet import NodeError

PAUSE_IMAGE = "drain-guard.local/pause:1"
#: The image daemonset/components/kube-rbac-proxy pins (by digest).
KUBE_RBAC_PROXY = "quay.io/brancz/kube-rbac-proxy"


def oci_archive(path: Path, name: str, files: Mapping[str, Path], entrypoint: list[str]) -> Path:
    """An OCI image archive (one uncompressed layer of ``files``: path in the image to a file
    here, mode kept) named ``name`` for ``ctr images import``: a tiny image made with no tool
    and no registry."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        for inside, source in sorted(files.items()):
            # A regular file owned by root, dated 1970 (TarInfo's defaults): the same bytes
            # make the same layer.
            info = tarfile.TarInfo(inside.lstrip("/"))
            info.size = source.stat().st_size
            info.mode = source.stat().st_mode & 0o7777
            with source.open("rb") as content:
                tar.addfile(info, content)
    layer_bytes = layer.getvalue()
    layer_digest = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": entrypoint},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }
    config_bytes = json.dumps(config).encode()
    blobs: dict[str, bytes] = {layer_digest: layer_bytes}
    config_digest = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
    blobs[config_digest] = config_bytes
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": len(config_bytes),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": layer_digest,
                "size": len(layer_bytes),
            }
        ],
    }
    manifest_bytes = json.dumps(manifest).encode()
    manifest_digest = "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()
    blobs[manifest_digest] = manifest_bytes
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest,
                "size": len(manifest_bytes),
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
                },
            }
        ],
    }
    entries = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index).encode(),
        **{f"blobs/sha256/{digest.split(':')[1]}": data for digest, data in blobs.items()},
    }
    with tarfile.open(path, "w") as tar:
        for entry, data in entries.items():
            info = tarfile.TarInfo(entry)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _archive_image(archive: Path) -> tuple[str, str]:
    """The name and tag of the one image of an OCI archive (its index's reference name)."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise NodeError(f"{archive}: no index.json")
        (manifest,) = json.load(member)["manifests"]
    name, tag = manifest["annotations"]["org.opencontainers.image.ref.name"].rsplit(":", 1)
    return name, tag


def user_kustomization(
    overlay: Path, archive: Path, directory: Path, proxy_archive: Path | None = None
) -> Path:
    """A user's kustomization in ``directory`` of ``overlay`` with the image ``drain-guard``
    set to ``archive``'s (the name and tag its index gives), and kube-rbac-proxy's to
    ``proxy_archive``'s when given, as docs/install.md writes one."""
    name, tag = _archive_image(archive)
    images = [{"name": "drain-guard", "newName": name, "newTag": tag}]
    if proxy_archive is not None:
        # The pinned name; a newTag drops the pin's digest (docs/install.md).
        proxy_name, proxy_tag = _archive_image(proxy_archive)
        images.append({"name": KUBE_RBAC_PROXY, "newName": proxy_name, "newTag": proxy_tag})
    directory.mkdir(parents=True, exist_ok=True)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(overlay, directory)],  # kustomize: never absolute
        "images": images,
    }
    (directory / "kustomization.yaml").write_text(json.dumps(kustomization))
    return directory
