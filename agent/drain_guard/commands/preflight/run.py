"""``drain-guard preflight``: which install fits a cluster, and the installed confinement proven
on it, with the admin's own credentials.

It reads the cluster's versions (``/version``, OpenShift's ClusterVersion, MCO's API) and says
which overlay of ``daemonset/overlays`` fits. Then it impersonates the agent's service account
with the claims the kubelet's bound token carries for the agent's pod on a node (user, groups,
and the ``authentication.kubernetes.io/node-name``, ``pod-name`` and ``pod-uid`` extras), makes
the requests of docs/rights.md's rows for that install, every write with ``dryRun=All``, and
prints one line a row: the request, the table's answer, the API server's, and OK or SURPRISE.
A row it cannot make without changing the cluster (a release needs a held drain) is reported
as not tried, with why. Nothing is written.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING

from drain_guard import protocol
from drain_guard.commands.base import connect
from drain_guard.commands.preflight.probe import Agent, Probe, find_agent, impersonate
from drain_guard.commands.preflight.rows import REQUESTS, UNMADE
from drain_guard.commands.preflight.survey import MCO_GROUP, survey
from drain_guard.confine.rights import expected
from drain_guard.core.exitcodes import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from drain_guard.settings.commands import PreflightCommand

if TYPE_CHECKING:
    from drain_guard.kube.client import Kube

PROG = "drain-guard preflight"
#: The table, as the package ships it (docs/rights.md itself: the package's rights.md is a
#: symlink to it that building the wheel resolves), so that an installed drain-guard (the
#: image, a pip install) finds it with no checkout.
DEFAULT_RIGHTS = Path(str(files("drain_guard").joinpath("rights.md")))


def run_preflight(command: PreflightCommand) -> int:
    """Read the table, then survey and prove (a missing table is a usage error, before any
    request)."""
    rights = Path(command.rights)
    try:
        table = rights.read_text(encoding="utf-8")
    except OSError as exc:
        print(
            f"{PROG}: error: --rights {rights}: {exc.strerror or exc}"
            " (docs/rights.md of the drain-guard release whose overlay you applied)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    return asyncio.run(_preflight(command, rights, table))


async def _preflight(command: PreflightCommand, rights: Path, table: str) -> int:
    from drain_guard.kube.call import KubeError

    admin = await connect(command.kubeconfig, "preflight")
    if admin is None:
        return EXIT_USAGE
    try:
        fit = await survey(admin)
        print(f"Kubernetes {fit.kubernetes}; OpenShift {fit.openshift or 'not served'}")
        mco = ", ".join(sorted(fit.mco_resources)) or "none"
        print(f"MCO's API ({MCO_GROUP}): {mco}; on-cluster layering: {fit.layering}")
        print(f"build-pod forms served: {', '.join(fit.build_forms) or 'none'}")
        print(f"install that fits: {fit.overlay or 'none'} ({fit.why})")
        install = command.install or fit.overlay
        if install is None:
            return EXIT_FAILURE
        rows = expected(table, install)
        if not rows:
            print(f"{PROG}: error: {rights} has no row for install {install}", file=sys.stderr)
            return EXIT_USAGE
        who = await find_agent(admin, command.namespace, command.service_account, command.node_name)
        if isinstance(who, str):
            print(f"{PROG}: error: {who}", file=sys.stderr)
            return EXIT_FAILURE
        print(f"confinement of {install} as {who.user} on node {who.node} (pod {who.pod}):")
        return await prove(admin, command.kubeconfig, who, rows)
    except KubeError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        await admin.close()


async def prove(admin: Kube, kubeconfig: str | None, who: Agent, rows: Mapping[str, str]) -> int:
    """Make each row's request as ``who``; print the lines; non-zero on any surprise."""
    from drain_guard.kube.credentials import load_api_client

    agent = type(admin)(impersonate(await load_api_client(kubeconfig), who.headers()))
    unbound = type(admin)(impersonate(await load_api_client(kubeconfig), who.headers(bound=False)))
    try:
        node = await admin.get_node(who.node)
        pool = protocol.pool_of(node.annotations) if node else None
        probe = Probe(admin, agent, unbound, who, pool or "worker")
        surprises, untried = [], 0
        width = max(len(r) for r in rows)
        for request, answer in rows.items():
            make = REQUESTS.get(request)
            got, note = (
                (None, UNMADE.get(request, "preflight makes no such request"))
                if make is None
                else await make(probe)
            )
            if got is None:
                untried += 1
                verdict = f"not tried: {note}"
            elif got == answer:
                verdict = "OK"
            else:
                verdict = "SURPRISE"
                surprises.append(request)
            print(f"  {request:<{width}}  expected {answer!r}, got {got or '-'!r}: {verdict}")
    finally:
        await agent.close()
        await unbound.close()
    tried = len(rows) - untried
    print(f"{tried} of {len(rows)} rows tried, {len(surprises)} surprises")
    for request in surprises:
        print(f"SURPRISE: {request}")
    return EXIT_FAILURE if surprises else EXIT_OK
