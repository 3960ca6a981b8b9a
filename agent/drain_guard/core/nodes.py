"""The Node model: the parts of a Node the agent reads (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class NodeObj:
    """The parts of a Node the agent reads."""

    name: str
    resource_version: str
    annotations: Mapping[str, str]
    unschedulable: bool
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> NodeObj:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        return cls(
            name=str(meta.get("name", "")),
            resource_version=str(meta.get("resourceVersion", "")),
            annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
            unschedulable=bool(spec.get("unschedulable", False)),
            uid=str(meta.get("uid", "")),
            labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        )
