"""Kubernetes timestamps (``metav1.Time``: RFC 3339, UTC, to the second), shared by the API
server and the actors so that neither imports the other for them."""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(dt: datetime) -> str:
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
