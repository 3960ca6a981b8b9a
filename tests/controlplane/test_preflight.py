"""``drain-guard preflight`` against each overlay installed on the real control plane (the
rights test's installs): with the admin's kubeconfig it impersonates the agent's account with
its pod's claims, finds every row of docs/rights.md answered as the table says, and changes
nothing; on three broken installs it exits non-zero and names the row that gave it away."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kubernetes_asyncio import client

from drain_guard import protocol
from drain_guard_sim.harness.controlplane import ControlPlane
from tests.controlplane import test_rights
from tests.controlplane.nodes import DRAIN_B, mcd_request, until
from tests.controlplane.test_rights import (
    AGENT_NS,
    Installed,
    budget,
    installed,
    node_annotations,
)
from tests.helpers import MCO_NS, run_cli

__all__ = ["installed"]  # the rights test's installs: each overlay, an agent pod on its Node
#: The rows no state of this test lets the preflight make without writing (a release needs a
#: held drain, which a pending drain is not; the cleanup a stale released-by marker).
UNTRIED = {
    "release its own Node's hold (the agent's JSON Patch)",
    "remove drain-guard.io/released-by with the released marker (the agent's cleanup)",
}


async def preflight(setup: Installed, *args: str) -> tuple[int, str, str]:
    return await run_cli(
        "preflight",
        "--kubeconfig",
        str(setup.plane.admin_kubeconfig),
        "--namespace",
        AGENT_NS,
        "--node-name",
        setup.node,
        *args,
    )


async def pending_drain_and_budgets(setup: Installed) -> None:
    """A drain request on the agent's Node (so its hold is tried) and a shield's budget on a
    build pod of each Node (so their deletion is)."""
    await mcd_request(setup.admin, setup.node, DRAIN_B)
    for node in (setup.node, setup.other):
        body = await budget(setup, node)
        await client.PolicyV1Api(setup.admin).create_namespaced_pod_disruption_budget(MCO_NS, body)


async def state(setup: Installed) -> Any:
    """What the preflight must leave as it found: both Nodes and the budgets."""
    budgets = await client.PolicyV1Api(setup.admin).list_namespaced_pod_disruption_budget(MCO_NS)
    nodes = [await client.CoreV1Api(setup.admin).read_node(n) for n in (setup.node, setup.other)]
    return (
        sorted(b.metadata.name for b in budgets.items),
        [(n.metadata.resource_version, n.spec.unschedulable) for n in nodes],
    )


async def test_the_preflight_proves_every_row_of_each_overlay(installed: Installed) -> None:
    await pending_drain_and_budgets(installed)
    before = await state(installed)
    code, out, err = await preflight(installed, "--install", installed.install)
    assert (code, err) == (0, ""), out + err
    assert "install that fits: kubernetes (admission policies" in out, out
    # What build APIs are served depends on which tests this worker ran (the simulator's
    # RealCluster serves Builds, others MachineOSConfigs): layering is off either way;
    # test_the_preflight_says_which_install_fits_openshift reads them.
    assert re.search(r"on-cluster layering: off( \(no MachineOSConfig\))?\nbuild-pod forms", out)
    rows = test_rights.documented(installed.install)
    for request, answer in rows.items():
        (line,) = [ln for ln in out.splitlines() if ln.strip().startswith(request + "  ")]
        if request in UNTRIED:
            assert "not tried:" in line, line
        else:
            assert line.endswith(f"expected {answer!r}, got {answer!r}: OK"), line
    assert f"{len(rows) - len(UNTRIED)} of {len(rows)} rows tried, 0 surprises" in out
    assert await state(installed) == before
    assert protocol.HOLD_REQUEST not in await node_annotations(installed, installed.node)


async def delete_node_policy(setup: Installed) -> None:
    test_rights.kubectl(
        setup.plane, "delete", "validatingadmissionpolicy", "drain-guard-node-confinement"
    )


async def delete_cluster_binding(setup: Installed) -> None:
    test_rights.kubectl(setup.plane, "delete", "clusterrolebinding", "drain-guard")


async def audit_budget_policy(setup: Installed) -> None:
    """The binding kept, its policy's verdict only audited: nothing refused."""
    test_rights.kubectl(
        setup.plane,
        "patch",
        "validatingadmissionpolicybinding",
        "drain-guard-budget-confinement",
        "--type=merge",
        "-p",
        '{"spec": {"validationActions": ["Audit"]}}',
    )


#: Each broken install: how it is broken, and a row that must come out a surprise.
BREAKS: dict[str, tuple[Callable[[Installed], Awaitable[None]], str]] = {
    "the node-confinement policy deleted": (delete_node_policy, "hold another Node's drain"),
    "the ClusterRoleBinding missing": (delete_cluster_binding, "get its own Node"),
    "the budget policy's binding only auditing": (
        audit_budget_policy,
        "create a budget on another Node's build pod",
    ),
}


@pytest.mark.parametrize("installed", ["kubernetes"], indirect=True)
@pytest.mark.parametrize("broken", list(BREAKS))
async def test_the_preflight_catches_a_broken_install(installed: Installed, broken: str) -> None:
    """The API server takes a deleted policy or binding in the background: the preflight is
    run again until it sees the change, and must then name the row."""
    breaking, row = BREAKS[broken]
    await mcd_request(installed.admin, installed.node, DRAIN_B)
    await breaking(installed)

    async def caught() -> tuple[int, str] | None:
        code, out, _ = await preflight(installed)
        return (code, out) if f"SURPRISE: {row}" in out else None

    code, out = await until(caught)
    assert code == 1, out
    (line,) = [ln for ln in out.splitlines() if ln.strip().startswith(row + "  ")]
    assert line.endswith(": SURPRISE"), line


def crd(group: str, plural: str, kind: str) -> dict[str, Any]:
    """A cluster-scoped CRD of OpenShift's, its contents unchecked: what the preflight reads
    is whether the API is served and the fields it names."""
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Cluster",
            "names": {"plural": plural, "kind": kind, "singular": kind.lower()},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": schema}],
        },
    }


OPENSHIFT_APIS = (
    crd("config.openshift.io", "clusterversions", "ClusterVersion"),
    crd("machineconfiguration.openshift.io", "machineosconfigs", "MachineOSConfig"),
    crd("machineconfiguration.openshift.io", "machineosbuilds", "MachineOSBuild"),
    crd("build.openshift.io", "builds", "Build"),
)


async def test_the_preflight_says_which_install_fits_openshift(
    control_plane: ControlPlane, admin: client.ApiClient
) -> None:
    """OpenShift's APIs served (CRDs of this test's own where none is served yet, removed
    after it: each test worker has its control plane to itself): its version from the
    ClusterVersion, layering on from a MachineOSConfig, both build-pod forms, and the openshift
    overlay; with no agent installed, it says so and exits 1 before any row."""
    extensions = client.ApiextensionsV1Api(admin)
    custom = client.CustomObjectsApi(admin)
    served = {c.metadata.name for c in (await extensions.list_custom_resource_definition()).items}
    # The simulator's RealCluster serves Builds too: kept as found.
    mine = [d for d in OPENSHIFT_APIS if d["metadata"]["name"] not in served]
    try:
        for definition in mine:
            body: Any = definition  # the typed API takes the manifest as a dict
            await extensions.create_custom_resource_definition(body)
        for definition in OPENSHIFT_APIS:
            test_rights.kubectl(
                control_plane,
                "wait",
                "--for=condition=Established",
                f"crd/{definition['metadata']['name']}",
            )
        version = {
            "apiVersion": "config.openshift.io/v1",
            "kind": "ClusterVersion",
            "metadata": {"name": "version"},
            "status": {"desired": {"version": "4.17.9"}},
        }
        await custom.create_cluster_custom_object(
            "config.openshift.io", "v1", "clusterversions", version
        )
        layering = {
            "apiVersion": "machineconfiguration.openshift.io/v1",
            "kind": "MachineOSConfig",
            "metadata": {"name": "worker"},
        }
        await custom.create_cluster_custom_object(
            "machineconfiguration.openshift.io", "v1", "machineosconfigs", layering
        )
        code, out, err = await run_cli(
            "preflight",
            "--kubeconfig",
            str(control_plane.admin_kubeconfig),
            "--namespace",
            "drain-guard-absent",
        )
    finally:
        for definition in mine:
            await extensions.delete_custom_resource_definition(definition["metadata"]["name"])

        async def removed() -> bool:
            found = await extensions.list_custom_resource_definition()
            names = {c.metadata.name for c in found.items}
            return not names & {d["metadata"]["name"] for d in mine}

        await until(removed)
    assert code == 1, out + err
    assert "OpenShift 4.17.9" in out, out
    assert "on-cluster layering: MachineOSConfig worker" in out, out
    forms = "build-pod forms served: OpenShift Builds (build.openshift.io), MachineOSBuild jobs"
    assert forms in out, out
    assert "install that fits: openshift (admission policies" in out, out
    assert "expected" not in out, out  # no row tried
    assert err == (
        "drain-guard preflight: error: no pod of service account drain-guard-absent/drain-guard:"
        " is the overlay applied?\n"
    ), err
