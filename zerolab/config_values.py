"""The small readers of :mod:`zerolab.config`'s parser: each checks one value of the DeepSpeed
JSON (``as_bool``, ``as_int``, ``one_of``, ...) and :func:`read` records a bad one in a
:class:`Problems` and hands back the default, never raising, so that
:func:`zerolab.config.load_config` reports all problems at once. The table of keys and their
statuses is :mod:`zerolab.config_keys`, which re-exports these names.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .i18n import catalogue

T = catalogue("config")      # the readers' messages in the edition's language (zerolab/messages_zh.py)

# Inert marker for a block: {} or {"enabled": false} (also null) asks for nothing.
DISABLED_BLOCK = object()


@dataclass(frozen=True)
class Refusal:
    """A DeepSpeed feature the config asks for that zerolab does not implement."""
    path: str
    value: Any
    what: str


class Problems:
    """Every problem found so far; ``bad`` holds the paths whose value was unusable.

    ``items``: every message, in order. ``errors``: those that are not a refusal of a known but
    unimplemented feature (typos, bad values, batch arithmetic). ``refusals``: the refused keys."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.errors: list[str] = []
        self.refusals: list[Refusal] = []
        self.bad: set[str] = set()

    @property
    def not_implemented(self) -> list[str]:
        return [r.path for r in self.refusals]

    def add(self, msg: str) -> None:
        self.items.append(msg)
        self.errors.append(msg)

    def refuse(self, path: str, value: Any, what: str, inert: tuple) -> None:
        self.refusals.append(Refusal(path, value, what))
        simple = [v for v in inert if v is not DISABLED_BLOCK and v is not None]
        here = "" if isinstance(value, (Mapping, list)) else T("it is {value} here; ", value=show(value))
        fix = T("remove it or set it to {value}", value=show(simple[0])) if simple else T("remove it")
        self.items.append(T("'{path}' is a DeepSpeed key that zerolab does not implement yet ({what}): {here}{fix}",
                            path=path, what=T.text(what), here=here, fix=fix))


class Bad(Exception):
    """Carries what a value must be."""


def show(v: Any) -> str:
    try:
        return json.dumps(v)
    except (TypeError, ValueError):
        return repr(v)


def join_path(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def as_bool(v: Any) -> bool:
    if isinstance(v, bool):  # not 1, not "true": DeepSpeed's JSON booleans are booleans
        return v
    raise Bad(T("true or false"))


as_bool.expected = lambda: T("true or false")


def as_int(lo: int | None = None, hi: int | None = None, note: str = ""):
    def expected() -> str:     # in the language of the moment the message is written
        return (T("an integer") + (T(" in {lo}..{hi}", lo=lo, hi=hi) if hi is not None else T(" > 0") if lo == 1
                                   else T(" >= {lo}", lo=lo) if lo is not None else "") + note)

    def conv(v: Any) -> int:  # JSON's 5e8 is a float: take it when it is a whole number
        if isinstance(v, float) and math.isfinite(v) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or (lo is not None and v < lo) or (hi is not None and v > hi):
            raise Bad(expected())
        return v
    conv.expected = expected          # a function: the words in the language of the moment
    return conv


def as_num(lo: float | None = None, hi: float | None = None):
    def expected() -> str:
        return T("a number") + (T(" in [{lo:g}, {hi:g}]", lo=lo, hi=hi) if hi is not None
                                else T(" >= {lo:g}", lo=lo) if lo is not None else "")

    def conv(v: Any) -> float:
        if (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                or (lo is not None and v < lo) or (hi is not None and v > hi)):
            raise Bad(expected())
        return float(v)
    conv.expected = expected
    return conv


def one_of(*options: str, lower: bool = False):
    def expected() -> str:
        return T("one of {options}", options=", ".join(f'"{o}"' for o in options))

    def conv(v: Any) -> str:
        s = v.lower() if lower and isinstance(v, str) else v
        if s not in options:
            raise Bad(expected())
        return s
    conv.expected = expected
    return conv


def optional(inner):
    def expected() -> str:
        return inner.expected() + T(" or null")

    def conv(v: Any) -> Any:
        try:
            return None if v is None else inner(v)
        except Bad:
            raise Bad(expected()) from None
    conv.expected = expected
    return conv


def as_str(v: Any) -> str:
    if isinstance(v, str):
        return v
    raise Bad(T("a string"))


as_str.expected = lambda: T("a string")


def as_betas(v: Any) -> tuple:
    if (isinstance(v, (list, tuple)) and len(v) == 2 and
            all(not isinstance(b, bool) and isinstance(b, (int, float)) and 0 <= b < 1 for b in v)):
        return (float(v[0]), float(v[1]))
    raise Bad(T("two numbers in [0, 1), like [0.9, 0.999]"))


as_betas.expected = lambda: T("two numbers in [0, 1)")



def read(p: Problems, block: Mapping | None, path: str, key: str, conv, default: Any) -> Any:
    if block is None or key not in block:
        return default
    value, full = block[key], join_path(path, key)
    if isinstance(value, str) and value.strip().lower() == "auto":
        p.bad.add(full)
        p.add(T("'{key}' is \"auto\": \"auto\" is filled in by the Hugging Face Trainer before DeepSpeed sees the "
                "config, and zerolab reads the config as DeepSpeed does; give {expected} instead", key=full,
                expected=conv.expected()))
        return default
    try:
        return conv(value)
    except Bad as e:
        p.bad.add(full)
        p.add(T("'{key}' must be {expected}, got {value}", key=full, expected=e, value=show(value)))
        return default


def read_block(p: Problems, parent: Mapping, key: str, path: str) -> dict | None:
    value = parent.get(key)
    if value is None or isinstance(value, Mapping):
        return value
    p.add(T("'{key}' must be a JSON object ({{...}}), got {value}", key=path, value=show(value)))
    return None
