"""drain-guard preflight makes every row of docs/rights.md (or says why it cannot), and picks
the overlay by the Kubernetes the cluster runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from drain_guard.commands.preflight.rows import REQUESTS, UNMADE
from drain_guard.confine.rights import fitting_overlay, table_rows
from tests.controlplane import (
    test_node_proxy,
    test_rights,
    test_shield_confinement,
    test_shield_webhook,
    test_webhook,
    test_webhook_rights,
)

RIGHTS = Path(__file__).resolve().parents[2] / "docs" / "rights.md"


#: Rows the preflight does not prove (it impersonates an agent's service account): the
#: central shield's and the webhook's accounts (their tests make them with their tokens), and
#: the systemd agent, which has no account (test_node_proxy sends them through the proxy), and
#: the node's identity the proxy holds (test_node_proxy, with a node's certificate).
NOT_PREFLIGHTS = {
    test_shield_confinement.INSTALL,
    test_shield_webhook.INSTALL,
    test_shield_webhook.WEBHOOK_INSTALL,
    test_webhook_rights.INSTALL,
    test_node_proxy.INSTALL,
    test_node_proxy.NODE_INSTALL,
}


def test_every_row_of_the_rights_table_is_made_or_says_why_not() -> None:
    rows = table_rows(RIGHTS.read_text())
    requests = {row.request for row in rows if row.install not in NOT_PREFLIGHTS}
    assert len(requests) > 40
    assert requests - set(REQUESTS) == set(UNMADE)
    assert not set(REQUESTS) - requests, "requests no row names"


@pytest.mark.parametrize(
    ("minor", "openshift", "overlay"),
    [
        (28, "4.15.3", "openshift-4.15"),
        (29, "4.16.0", "openshift-4.15"),
        (30, "4.17.1", "openshift"),
        (31, "4.18.0", "openshift"),
        (30, None, "kubernetes"),
        (34, None, "kubernetes"),
        (29, None, None),
    ],
)
def test_the_overlay_that_fits(minor: int, openshift: str | None, overlay: str | None) -> None:
    assert fitting_overlay(minor, openshift)[0] == overlay


def test_every_install_of_the_rights_table_is_made_on_the_real_api_server() -> None:
    """Each install of docs/rights.md is one a control-plane test applies and makes every row
    of, holding the table to the API server's answers (a row that lies fails there): the
    agents' by preflight's makers with their real token (test_rights), openshift-4.15's with
    its webhook running (test_webhook), the central shield's with its token
    (test_shield_confinement; on 4.15/4.16's admission, test_shield_webhook), the webhook's
    account's with its token (test_webhook_rights), the systemd agent's through its node
    proxy (test_node_proxy). A row of an install none of them makes fails here."""
    installs = {row.install for row in table_rows(RIGHTS.read_text())}
    checked = {*test_rights.INSTALLS, test_webhook.INSTALL, *NOT_PREFLIGHTS}
    assert installs == checked
