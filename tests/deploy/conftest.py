"""Fixtures of the deployment tests: each overlay rendered once per session."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

from tests.deploy.tools import OVERLAYS, Obj, render

_cache: dict[str, list[Obj]] = {}


@pytest.fixture(scope="session")
def rendered() -> Callable[[str], list[Obj]]:
    """``rendered(overlay)``: the overlay's objects, a fresh deep copy on every call."""

    def get(overlay: str) -> list[Obj]:
        if overlay not in _cache:
            _cache[overlay] = render(overlay)
        return copy.deepcopy(_cache[overlay])

    return get


@pytest.fixture(params=OVERLAYS)
def overlay(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def objects(rendered: Callable[[str], list[Obj]], overlay: str) -> list[Obj]:
    """The objects of the overlay under test (each overlay in turn)."""
    return rendered(overlay)
