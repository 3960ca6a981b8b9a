"""Chaos seeds on the real control plane (``drain_guard_sim.harness.realchaos``): a rollout
with one real agent per node on kube-apiserver and kube-controller-manager, agents killed and
restarted and daemons restarted at times drawn from the seed, and the invariant checker over
the API server's audit log. One seed (MCO 4.15, the seed report's) in the plain run, about
30 s; one per other version and a dozen more with ``make chaos`` (``-m slow``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from drain_guard_sim.harness.controlplane import ControlPlane, default_bin_dir, missing_binaries
from drain_guard_sim.harness.realchaos import run_real_chaos
from tests.helpers import require_or_skip

pytestmark = pytest.mark.controlplane

#: The plain run's seed: 4.15 (``realchaos.VERSIONS``: seeds cycle 4.15, 4.16, 4.18).
CI_SEEDS = (0,)
LONG_SEEDS = range(1, 13)


@pytest.fixture(scope="module")
def audited_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of the module's own whose API server keeps an audit log."""
    bin_dir = default_bin_dir()
    missing = missing_binaries(bin_dir)
    if missing:
        require_or_skip(f"{', '.join(missing)} not built in {bin_dir} (make control-plane)")
    workdir = tmp_path_factory.mktemp("control-plane-audited")
    with ControlPlane.start(bin_dir, workdir, audit=True) as plane:
        yield plane


@pytest.mark.parametrize(
    "seed", [*CI_SEEDS, *(pytest.param(s, marks=pytest.mark.slow) for s in LONG_SEEDS)]
)
async def test_real_chaos_seed_keeps_every_invariant(
    audited_plane: ControlPlane, tmp_path: Path, seed: int
) -> None:
    report = await run_real_chaos(audited_plane, tmp_path, seed)
    assert report.checked.ok, "\n".join(str(v) for v in report.checked.violations)
    # The checker saw the run: the agents' holds and the drains' requests are in the log.
    assert report.checked.requests > 0
    assert report.writes > 0
    if report.stalled:  # the build failed: only an eviction the checker excused may do that
        assert report.checked.build_pod_evictions > 0
        assert sum(report.checked.evictions_excused.values()) > 0
