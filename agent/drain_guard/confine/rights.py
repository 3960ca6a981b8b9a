"""docs/rights.md's table, read: the one list of what each install's agent may and may not do.

The control-plane tests (tests/controlplane/test_rights.py) and ``drain-guard preflight``
both read the table itself, so the rows and the answers they expect are written once; and
which of those installs fits a cluster. Pure: the callers read the file and the cluster.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

#: The answers the table gives besides a policy's or a webhook's name.
ALLOWED = "allowed"
RBAC = "denied: RBAC"


@dataclass(frozen=True)
class Row:
    """One row: in ``install`` (an overlay's name), ``request`` is answered ``answer``."""

    install: str
    request: str
    answer: str


def table_rows(text: str) -> Iterator[Row]:
    """Each row of the rights table in ``text`` (a Markdown table of three cells)."""
    for line in text.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        header = cells[0] == "install" or set(cells[0]) <= {"-", ":"}
        if line.startswith("|") and len(cells) == 3 and not header:
            yield Row(*cells)


def expected(text: str, install: str) -> dict[str, str]:
    """The table's answer to each request in ``install``, in the table's order."""
    return {row.request: row.answer for row in table_rows(text) if row.install == install}


def fitting_overlay(minor: int, openshift: str | None) -> tuple[str | None, str]:
    """The overlay for Kubernetes 1.``minor`` (OpenShift ``openshift``): the admission policies
    and the token's node-name claim need 1.30 (OpenShift 4.17); before, OpenShift has the
    webhook, plain Kubernetes nothing."""
    if openshift is not None:
        if minor >= 30:
            return "openshift", "admission policies, Kubernetes 1.30+"
        return "openshift-4.15", "admission webhook: no policies before Kubernetes 1.30"
    if minor >= 30:
        return "kubernetes", "admission policies, Kubernetes 1.30+; not OpenShift"
    return None, "plain Kubernetes before 1.30 cannot confine the agent to its node"
