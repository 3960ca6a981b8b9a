"""What the cluster-side commands share: the connection with the caller's own credentials
(their exit codes are every program's, ``drain_guard.core.exitcodes``)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from drain_guard.kube.client import Kube

# The API client (aiohttp, kubernetes_asyncio) is imported by the commands that talk to the
# API, when they run.


async def connect(kubeconfig: str | None, command: str) -> Kube | None:
    from drain_guard.kube.client import Kube
    from drain_guard.kube.kubeclient import ConfigException

    try:
        return await Kube.connect(kubeconfig)
    except (ConfigException, OSError, ValueError) as exc:
        print(
            f"drain-guard {command}: error: cannot load Kubernetes config: {exc}", file=sys.stderr
        )
        return None
