"""The node the ``node`` tests share: one per session (containerd, a kubelet, kube-scheduler
and kube-proxy beside a control plane of its own, ``drain_guard_sim.harness.node``).

``make test`` runs these tests in a pytest process of their own after the rest (one node per
machine: its sysctls, bridge and guard are host-wide). Teardown fails the session if the
host is not as it was before the node started.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from drain_guard_sim.harness.controlplane import default_bin_dir
from drain_guard_sim.harness.node import Node, missing_node_tools
from tests.helpers import require_or_skip

#: Stops the node and checks the host: last, after every other test on the node.
RESTORE_TEST = "test_stopping_the_node_puts_the_host_back"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test on the node ``node``, and run the restore check last."""
    for item in items:
        if "node" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.node)
    items.sort(key=lambda item: item.name == RESTORE_TEST)  # stable: the rest keep order


@pytest.fixture(scope="session")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    bin_dir = default_bin_dir()
    missing = missing_node_tools(bin_dir)
    if missing:
        require_or_skip(f"the node needs {', '.join(missing)} (make system-deps control-plane)")
    started = Node.start(bin_dir, tmp_path_factory.mktemp("node"))
    yield started
    if not started.stopped:
        left = started.stop()
        assert not left, "the node left the host changed:\n" + "\n".join(left)
