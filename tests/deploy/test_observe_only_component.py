"""The observe-only component: one line in a kustomization makes every overlay's agent run
``--observe-only``, and nothing else changes."""

from __future__ import annotations

import argparse
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import yaml

from drain_guard.settings import agent as config
from tests.deploy.tools import DAEMONSET_DIR, RENDER_TIMEOUT, Obj, agent_container
from tests.helpers import require_tool

COMPONENT = DAEMONSET_DIR / "components" / "observe-only"


def _render_with_component(overlay: str, tmp_path: Path) -> list[Obj]:
    """A user's kustomization: the overlay plus the one ``components:`` line."""
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(DAEMONSET_DIR / "overlays" / overlay, tmp_path)],
        "components": [os.path.relpath(COMPONENT, tmp_path)],
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    proc = subprocess.run(
        [require_tool("kubectl"), "kustomize", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=RENDER_TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc is not None]


def test_component_switches_the_agent_to_observe_only_and_changes_nothing_else(
    rendered: Callable[[str], list[Obj]], overlay: str, tmp_path: Path
) -> None:
    plain = rendered(overlay)
    observing = _render_with_component(overlay, tmp_path)
    env = {e["name"]: e for e in agent_container(observing)["env"]}
    assert env["DRAIN_GUARD_OBSERVE_ONLY"] == {"name": "DRAIN_GUARD_OBSERVE_ONLY", "value": "true"}
    # The agent reads the variable as --observe-only.
    parser = argparse.ArgumentParser()
    config.add_run_arguments(parser)
    settings = config.settings_from(
        parser.parse_args([]), {"NODE_NAME": "n", "DRAIN_GUARD_OBSERVE_ONLY": "true"}
    )
    assert settings.hold.observe_only
    # Without the env entry, the rendering is the overlay's own.
    agent_container(observing)["env"] = [
        e for e in agent_container(observing)["env"] if e["name"] != "DRAIN_GUARD_OBSERVE_ONLY"
    ]
    assert observing == plain
