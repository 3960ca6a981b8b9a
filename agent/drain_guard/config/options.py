"""The env-or-flag mechanism: a table of :class:`Option` per program, declared as argparse
flags and merged with the environment and the defaults."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from drain_guard.config.values import BOOL_HELP, SettingsError, named, parse_bool

ENV_PREFIX = "DRAIN_GUARD_"
# Environment lists of selectors are split on ";" because a selector itself contains commas.
SELECTOR_ENV_SEPARATOR = ";"

_T = TypeVar("_T")


@dataclass(frozen=True)
class Option:
    """One flag: its environment variable and default; the single table the docs test reads."""

    flag: str
    env: str
    default: str | None
    help: str
    choices: tuple[str, ...] | None = None
    repeatable: bool = False
    boolean: bool = False


@dataclass(frozen=True)
class OptionGroup:
    """A group of a program's options, as one group of its settings and of its ``--help``."""

    title: str
    options: tuple[Option, ...]


@dataclass(frozen=True)
class SettingsGroup(OptionGroup, Generic[_T]):
    """A group of options and the typed settings it is built into, once, from the merged
    values of its options (by their ``dest``; a bad one is a ``SettingsError``)."""

    build: Callable[[Mapping[str, object]], _T]


def options_of(groups: tuple[OptionGroup, ...]) -> tuple[Option, ...]:
    """Every option of ``groups``, in their order."""
    return tuple(option for group in groups for option in group.options)


def add_groups(parser: argparse.ArgumentParser, groups: tuple[OptionGroup, ...]) -> None:
    """Declare ``groups`` as argparse groups (``--help`` lists each under its title)."""
    for group in groups:
        add_arguments(parser.add_argument_group(group.title), group.options)


def env_name(flag: str) -> str:
    return ENV_PREFIX + flag.removeprefix("--").replace("-", "_").upper()


def add_arguments(parser: argparse._ActionsContainer, options: tuple[Option, ...]) -> None:
    for opt in options:
        dest = opt.flag.removeprefix("--").replace("-", "_")
        default_text = f" (default: {opt.default})" if opt.default is not None else ""
        # The tables hold plain text: a "%" (as in "±10 %") is not argparse's format.
        helptext = f"{opt.help}{default_text} [env {opt.env}]".replace("%", "%%")
        if opt.boolean and opt.default is None:  # a switch: present means true
            parser.add_argument(
                opt.flag, dest=dest, action="store_true", default=None, help=helptext
            )
        elif opt.boolean:
            parser.add_argument(
                opt.flag, dest=dest, default=None, metavar="BOOL", help=f"{helptext} ({BOOL_HELP})"
            )
        elif opt.repeatable:
            parser.add_argument(opt.flag, dest=dest, action="append", default=None, help=helptext)
        else:
            metavar = None if opt.choices is None else "{" + ",".join(opt.choices) + "}"
            parser.add_argument(opt.flag, dest=dest, default=None, metavar=metavar, help=helptext)


def _flag_pattern(flag: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w-]){re.escape(flag)}(?![\w-])")


def validated(
    options: tuple[Option, ...],
    args: argparse.Namespace,
    environ: Mapping[str, str],
    build: Callable[[Mapping[str, object]], _T],
) -> _T:
    from_env: list[Option] = []
    try:
        return build(_merge(options, args, environ, from_env))
    except SettingsError as exc:
        message = str(exc)
        for opt in from_env:
            message = _flag_pattern(opt.flag).sub(opt.env, message)
        raise SettingsError(message) from None


def _merge(
    options: tuple[Option, ...],
    args: argparse.Namespace,
    environ: Mapping[str, str],
    from_env: list[Option],
) -> dict[str, object]:
    """Each option's value: the flag, else the variable, else the default (checked choices,
    parsed booleans); the options taken from the environment are added to ``from_env``."""
    raw: dict[str, object] = {}
    for opt in options:
        dest = opt.flag.removeprefix("--").replace("-", "_")
        value: object = getattr(args, dest, None)
        if value is None and environ.get(opt.env, "") != "":  # empty: as if unset
            from_env.append(opt)
            env_text = environ[opt.env]
            if opt.repeatable:
                value = [s.strip() for s in env_text.split(SELECTOR_ENV_SEPARATOR) if s.strip()]
            else:
                value = env_text
        if value is None:
            value = opt.default
        if opt.boolean and isinstance(value, str):
            value = named(opt.flag, parse_bool, value)
        if opt.choices is not None and value is not None:
            wanted = str(value).upper() if opt.flag == "--log-level" else str(value)
            if wanted not in opt.choices:
                raise SettingsError(
                    f"invalid {opt.flag} {value!r} (choose from {', '.join(opt.choices)})"
                )
            value = wanted
        raw[dest] = value
    return raw
