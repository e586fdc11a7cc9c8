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
        here = "" if isinstance(value, (Mapping, list)) else f"it is {show(value)} here; "
        fix = f"remove it or set it to {show(simple[0])}" if simple else "remove it"
        self.items.append(f"'{path}' is a DeepSpeed key that zerolab does not implement yet ({what}): {here}{fix}")


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
    raise Bad("true or false")


as_bool.expected = "true or false"


def as_int(lo: int | None = None, hi: int | None = None, note: str = ""):
    expected = ("an integer" + (f" in {lo}..{hi}" if hi is not None else " > 0" if lo == 1
                else f" >= {lo}" if lo is not None else "") + note)

    def conv(v: Any) -> int:  # JSON's 5e8 is a float: take it when it is a whole number
        if isinstance(v, float) and math.isfinite(v) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or (lo is not None and v < lo) or (hi is not None and v > hi):
            raise Bad(expected)
        return v
    conv.expected = expected
    return conv


def as_num(lo: float | None = None, hi: float | None = None):
    expected = "a number" + (f" in [{lo:g}, {hi:g}]" if hi is not None else f" >= {lo:g}" if lo is not None else "")

    def conv(v: Any) -> float:
        if (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                or (lo is not None and v < lo) or (hi is not None and v > hi)):
            raise Bad(expected)
        return float(v)
    conv.expected = expected
    return conv


def one_of(*options: str, lower: bool = False):
    expected = "one of " + ", ".join(f'"{o}"' for o in options)

    def conv(v: Any) -> str:
        s = v.lower() if lower and isinstance(v, str) else v
        if s not in options:
            raise Bad(expected)
        return s
    conv.expected = expected
    return conv


def optional(inner):
    expected = inner.expected + " or null"

    def conv(v: Any) -> Any:
        try:
            return None if v is None else inner(v)
        except Bad:
            raise Bad(expected) from None
    conv.expected = expected
    return conv


def as_str(v: Any) -> str:
    if isinstance(v, str):
        return v
    raise Bad("a string")


as_str.expected = "a string"


def as_betas(v: Any) -> tuple:
    if (isinstance(v, (list, tuple)) and len(v) == 2 and
            all(not isinstance(b, bool) and isinstance(b, (int, float)) and 0 <= b < 1 for b in v)):
        return (float(v[0]), float(v[1]))
    raise Bad("two numbers in [0, 1), like [0.9, 0.999]")


as_betas.expected = "two numbers in [0, 1)"



def read(p: Problems, block: Mapping | None, path: str, key: str, conv, default: Any) -> Any:
    if block is None or key not in block:
        return default
    value, full = block[key], join_path(path, key)
    if isinstance(value, str) and value.strip().lower() == "auto":
        p.bad.add(full)
        p.add(f"'{full}' is \"auto\": \"auto\" is filled in by the Hugging Face Trainer before DeepSpeed sees "
              f"the config, and zerolab reads the config as DeepSpeed does; give {conv.expected} instead")
        return default
    try:
        return conv(value)
    except Bad as e:
        p.bad.add(full)
        p.add(f"'{full}' must be {e}, got {show(value)}")
        return default


def read_block(p: Problems, parent: Mapping, key: str, path: str) -> dict | None:
    value = parent.get(key)
    if value is None or isinstance(value, Mapping):
        return value
    p.add(f"'{path}' must be a JSON object ({{...}}), got {show(value)}")
    return None
