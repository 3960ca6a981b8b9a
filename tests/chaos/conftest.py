"""Options of the chaos runs: ``--chaos-seeds=N`` (the long run's size), ``--chaos-seed=S``.

The long run (``make chaos``) is marked ``slow`` and only runs when ``-m slow`` selects it;
the CI-sized run is unmarked and part of plain ``pytest``.
"""

from __future__ import annotations

import pytest

#: The seeds of the CI-sized run (each 15-25 s of wall time, little CPU): two per MCO version
#: (``ChaosConfig.mco_version``: 4.15, 4.16-early, 4.16, 4.18-early, 4.18), one of them racing
#: the MCC (a multiple of 3).
CI_SEEDS = (1, 3, 8, 9, 12, 13, 19, 21, 24, 25)
#: The long run's seeds start here, away from the CI seeds.
LONG_FIRST = 1000


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaos")
    group.addoption(
        "--chaos-seeds", type=int, default=200, help="seeds of the long (slow) chaos run"
    )
    group.addoption(
        "--chaos-seed", type=int, default=None, help="run this one chaos seed (reproduce it)"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "chaos_seed" not in metafunc.fixturenames:
        return
    one = metafunc.config.getoption("chaos_seed", None)
    if one is not None:
        seeds: list[int] = [one]
    elif metafunc.definition.get_closest_marker("slow") is not None:
        n = metafunc.config.getoption("chaos_seeds", 200) if _long(metafunc.config) else 1
        seeds = list(range(LONG_FIRST, LONG_FIRST + n))
    else:
        seeds = list(CI_SEEDS)
    metafunc.parametrize("chaos_seed", seeds)


def _long(config: pytest.Config) -> bool:
    return "slow" in (config.getoption("markexpr", "") or "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the long run unless ``-m`` names ``slow`` (plain ``pytest`` is CI-sized)."""
    if _long(config):
        return
    skip = pytest.mark.skip(reason="long chaos run: make chaos (pytest -m slow tests/chaos)")
    for item in items:
        if item.get_closest_marker("slow") is not None and "chaos" in item.nodeid:
            item.add_marker(skip)
