"""The components of the opt-in rights, rendered from docs/install.md's kustomizations as
written: ``blocking-pods`` (an opted-in namespace's pod read) and ``thanos-querier-alerts``
(the Thanos querier's alerts). Each grants its one rule and nothing else; on the real API
server: tests/controlplane/test_blocking.py and test_components.py."""

from __future__ import annotations

from pathlib import Path

from tests.deploy.tools import DAEMONSET_DIR, key, one, relative, render, render_dir
from tests.deploy.tools import documented_kustomization as documented

AGENT = {"kind": "ServiceAccount", "name": "drain-guard", "namespace": "drain-guard"}


def test_blocking_pods_is_a_role_and_its_binding_in_the_namespace_named(tmp_path: Path) -> None:
    objects = render_dir(documented("Blocking pods", tmp_path, "batch"))
    assert sorted(key(o) for o in objects) == [
        ("Role", "batch", "drain-guard-blocking-pods"),
        ("RoleBinding", "batch", "drain-guard-blocking-pods"),
    ]
    role = one(objects, "Role")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}]
    binding = one(objects, "RoleBinding")
    assert binding["roleRef"]["name"] == "drain-guard-blocking-pods"
    assert binding["subjects"] == [AGENT]  # the agent's account stays in its namespace


def test_blocking_pods_without_a_namespace_names_none_that_exists(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text(
        f"components:\n  - {relative(DAEMONSET_DIR / 'components' / 'blocking-pods', tmp_path)}\n"
    )
    namespaces = {o["metadata"]["namespace"] for o in render_dir(tmp_path)}
    assert namespaces == {"blocking-pod-namespace"}


def test_thanos_querier_alerts_adds_get_namespaces_and_nothing_else(tmp_path: Path) -> None:
    plain = render("openshift")
    objects = render_dir(documented("Alert gating", tmp_path))
    assert [o for o in objects if o in plain] == plain  # the overlay unchanged
    added = [o for o in objects if o not in plain]
    assert sorted(key(o) for o in added) == [
        ("ClusterRole", "", "drain-guard-alerts"),
        ("ClusterRoleBinding", "", "drain-guard-alerts"),
    ]
    rules = one(added, "ClusterRole")["rules"]
    assert rules == [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]}]
    assert one(added, "ClusterRoleBinding")["subjects"] == [AGENT]


def test_thanos_querier_alerts_follows_an_install_in_another_namespace(tmp_path: Path) -> None:
    written = documented("Alert gating", tmp_path / "user")
    kustomization = (written / "kustomization.yaml").read_text()
    transformer = relative(DAEMONSET_DIR / "transformers" / "renamed-namespace", written)
    (written / "kustomization.yaml").write_text(
        f"namespace: platform-drain-guard\n{kustomization}transformers:\n  - {transformer}\n"
    )
    binding = one(render_dir(written), "ClusterRoleBinding", "drain-guard-alerts")
    assert binding["subjects"] == [{**AGENT, "namespace": "platform-drain-guard"}]
