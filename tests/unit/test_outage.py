"""The outage log follows the error: a line when its kind changes and a reminder while it
lasts (issue 25: after the API came back with another CA the log kept only "API unreachable
since …" while every call failed on the certificate)."""

from __future__ import annotations

import logging

import pytest

from drain_guard.kube.call import KubeError
from drain_guard.kube.retry import OUTAGE_REMINDER, Outage, failure_kind

REFUSED = KubeError(0, "read_node: ClientConnectorError: Cannot connect to host api:6443")
UNTRUSTED = KubeError(
    0,
    "read_node: ClientConnectorCertificateError: Cannot connect to host api:6443 ssl:True"
    " [SSLCertVerificationError: (1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify"
    " failed: self-signed certificate in certificate chain')]",
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_kind_is_the_status_or_the_transport_errors_type() -> None:
    assert failure_kind(KubeError(503, "ServiceUnavailable")) == "HTTP 503"
    assert failure_kind(REFUSED) == "ClientConnectorError"
    assert failure_kind(UNTRUSTED) == "ClientConnectorCertificateError"
    assert failure_kind(TimeoutError()) == "TimeoutError"


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_new_kind_of_failure_and_a_lasting_one_are_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    outage = Outage("watch of node", logging.getLogger("test.outage"), clock=clock)
    with caplog.at_level(logging.DEBUG, "test.outage"):
        outage.failed("watch", REFUSED, 1.0)
        clock.now += 5
        outage.failed("watch", REFUSED, 2.0)  # the same: DEBUG only
        clock.now += 5
        outage.failed("watch", UNTRUSTED, 4.0)  # the API is back with another CA
        clock.now += 5
        outage.failed("watch", UNTRUSTED, 8.0)
        clock.now += OUTAGE_REMINDER
        outage.failed("watch", UNTRUSTED, 8.0)  # still failing: a reminder
        clock.now += 1
        outage.failed("watch", UNTRUSTED, 8.0)
        outage.ended()
    warnings = _warnings(caplog)
    assert len(warnings) == 4, warnings
    assert warnings[0].startswith("watch of node: API unreachable since ")
    assert "ClientConnectorError" in warnings[0]
    assert "(10s, 3 retries); now watch failed: " in warnings[1]
    assert "CERTIFICATE_VERIFY_FAILED" in warnings[1]
    assert f"({int(OUTAGE_REMINDER + 15) // 60}m" in warnings[2]
    assert "; still: watch failed: " in warnings[2]
    assert warnings[3].startswith("watch of node: API reachable again after ")
    assert sum(r.levelno == logging.DEBUG for r in caplog.records) == 3


def test_a_failing_or_refusing_admission_webhook_is_named_not_the_api(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 35: behind a slow webhook the log said "API unreachable"; the API server was
    answering, and said which webhook failed."""
    timed_out = KubeError(
        500,
        'Internal error occurred: failed calling webhook "agents.drain-guard.io": failed to'
        ' call webhook: Post "https://127.0.0.1:1/validate": context deadline exceeded',
    )
    denied = KubeError(403, 'admission webhook "agents.drain-guard.io" denied the request: no')
    for error, words in (
        (timed_out, ("failing", "answering again")),
        (denied, ("refusing it", "accepting it again")),
    ):
        caplog.clear()
        outage = Outage("decisions on node w", logging.getLogger("test.outage"), clock=Clock())
        with caplog.at_level(logging.WARNING, "test.outage"):
            outage.failed("node write", error, 1.0)
            outage.ended()
        began, ended = _warnings(caplog)
        assert began.startswith(
            f"decisions on node w: admission webhook agents.drain-guard.io {words[0]} since "
        ), began
        assert ended.startswith(
            f"decisions on node w: admission webhook agents.drain-guard.io {words[1]} after "
        ), ended
