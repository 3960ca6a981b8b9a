"""The kubelet's client credential on a scratch host, as the kubelet keeps it rotated."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from drain_guard_sim.apiserver.nodeauth import NODES_GROUP
from drain_guard_sim.apiserver.server import SimApiServer
from tests.deploy.tools import KUBELET_CLIENT, kubelet_kubeconfig, under

NODE_USER_PREFIX = "system:node:"


class Kubelet:
    """``/var/lib/kubelet`` under ``root`` as the kubelet keeps it: its kubeconfig naming the
    current pair by its host path, and in ``pki`` the pairs ``kubelet-client-<n>.pem`` (0600)
    and the ``kubelet-client-current.pem`` link. A rotation is client-go's certificate store's:
    a new file, a ``-updated`` link to it, the ``-current`` link removed and ``-updated``
    renamed over it. (client-go's links name the pair by absolute path; here by its name, so
    that they resolve on a scratch host.)"""

    def __init__(self, api: SimApiServer, node: str, root: Path) -> None:
        self.api, self.node, self.root = api, node, root
        self.current = Path(under(root, KUBELET_CLIENT))
        self.current.parent.mkdir(parents=True)
        self.rotations = 0
        self.pem = self.rotate()
        config = kubelet_kubeconfig(api.url)
        cluster = config["clusters"][0]["cluster"]  # type: ignore[index]
        assert api.tls is not None
        cluster["certificate-authority-data"] = base64.b64encode(
            api.tls.ca_file.read_bytes()
        ).decode()
        self.kubeconfig = root / "var/lib/kubelet/kubeconfig"
        self.kubeconfig.write_text(yaml.safe_dump(config))
        self.kubeconfig.chmod(0o600)

    def rotate(self) -> bytes:
        self.rotations += 1
        pem = self.api.client_certificate(NODE_USER_PREFIX + self.node, [NODES_GROUP])
        pair = self.current.with_name(f"kubelet-client-{self.rotations}.pem")
        pair.touch(mode=0o600)
        pair.write_bytes(pem)
        updated = self.current.with_name("kubelet-client-updated.pem")
        updated.symlink_to(pair.name)
        self.current.unlink(missing_ok=True)
        updated.rename(self.current)
        self.pem = pem
        return pem

    def moved(self) -> None:
        """Rewrite the kubeconfig naming the pair under the scratch root, where a process
        that reads it (as the node proxy does) finds it."""
        config = yaml.safe_load(self.kubeconfig.read_text())
        for entry in config["users"]:
            for key in ("client-certificate", "client-key"):
                entry["user"][key] = under(self.root, entry["user"][key])
        self.kubeconfig.write_text(yaml.safe_dump(config))
