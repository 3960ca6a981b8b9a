"""``drain-guard node-proxy``'s settings, typed: its flags, and the value the program is given
instead of the parsed command line."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass

from drain_guard.config.values import SettingsError

NODE_PROXY_SOCKET = "/run/drain-guard-node-proxy/api.sock"
KUBELET_KUBECONFIG = "/var/lib/kubelet/kubeconfig"


@dataclass(frozen=True)
class NodeProxySettings:
    """The Node whose agent it serves, the node's own kubeconfig, the socket it serves on,
    and the one user (name or UID) whose requests it passes on."""

    node_name: str
    kubeconfig: str = KUBELET_KUBECONFIG
    socket: str = NODE_PROXY_SOCKET
    agent_user: str = "drain-guard"


def add_node_proxy_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node-name", help="the Node whose agent this serves (default: NODE_NAME)")
    parser.add_argument(
        "--kubeconfig",
        default=KUBELET_KUBECONFIG,
        help=f"the node's own kubeconfig, system:node:NAME (default: {KUBELET_KUBECONFIG})",
    )
    parser.add_argument(
        "--socket",
        default=NODE_PROXY_SOCKET,
        help=f"the Unix socket to serve the agent on (default: {NODE_PROXY_SOCKET})",
    )
    parser.add_argument(
        "--agent-user",
        default="drain-guard",
        help="the one user (name or UID) whose requests are served (default: drain-guard)",
    )


def node_proxy_settings(args: argparse.Namespace, environ: Mapping[str, str]) -> NodeProxySettings:
    """The settings from the flags, ``NODE_NAME`` standing in for ``--node-name``."""
    node_name = args.node_name or environ.get("NODE_NAME") or ""
    if not node_name:
        raise SettingsError("--node-name (NODE_NAME) is required")
    return NodeProxySettings(node_name, args.kubeconfig, args.socket, args.agent_user)
