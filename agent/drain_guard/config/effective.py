"""The settings in force, as a program's start-up line shows them: derived from the settings'
own fields, so that a new setting shows there with no second list to keep.

Every field, named in camelCase, its value as a flag takes it: durations as ``45m``, enums by
value, addresses, selectors and references by their text, sequences as lists, a group of
settings (a dataclass without a text of its own) as its own mapping. A field whose value reads
otherwise says how in its metadata (:func:`shown_by`).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from drain_guard.config.values import format_duration

_SHOWN_BY = "drain_guard.shown_by"


def shown_by(show: Callable[[Any], object]) -> Mapping[str, object]:
    """The metadata of a field whose value the start-up line shows as ``show(value)``."""
    return {_SHOWN_BY: show}


def effective(settings: object) -> dict[str, object]:
    """``settings`` (a dataclass instance) as its start-up line shows it."""
    assert dataclasses.is_dataclass(settings)
    assert not isinstance(settings, type)
    shown: dict[str, object] = {}
    for field in dataclasses.fields(settings):
        value = getattr(settings, field.name)
        show = field.metadata.get(_SHOWN_BY)
        shown[_camel(field.name)] = show(value) if show is not None else _value(value)
    return shown


def _value(value: object) -> object:
    if isinstance(value, enum.Enum):  # before str: a StrEnum is one, and prints as its member
        return value.value
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, frozenset | set):
        return sorted(str(_value(v)) for v in value)
    if isinstance(value, tuple | list):
        return [_value(v) for v in value]
    if type(value).__str__ is object.__str__ and dataclasses.is_dataclass(value):
        return effective(value)  # a group of settings
    return str(value)


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(word.capitalize() for word in rest)
