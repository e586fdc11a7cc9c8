"""The machinery of the config layer's key declarations (:mod:`zerolab.config.keys` holds the
declarations themselves and re-exports all of this):

* :class:`Key`, one DeepSpeed key as declared once: its status, DeepSpeed's meaning, its inert
  values, and, for a key that is a field of a config dataclass, its reader and default;
* the readers (``as_bool``, ``as_int``, ``one_of``, ...): each checks one value of the DeepSpeed
  JSON and carries what it expects in words (``expected``), the field type it yields (``type``)
  and its JSON Schema (``schema``), so that one reader in a declaration gives the parser's check,
  the dataclass annotation and the editors' schema;
* :func:`read` and :func:`read_fields` (and :func:`zerolab.config.keys.check_keys`), which
  never raise: they record every problem in a :class:`Problems` and hand back the default, so that
  :func:`zerolab.config.load_config` reports all problems at once.

It sits at the bottom of the layer (it imports only :mod:`zerolab.i18n`), so every other config
module can read declarations without an import cycle.
"""
from __future__ import annotations

import difflib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..i18n import catalogue

T = catalogue("config")      # the readers' messages in the edition's language (zerolab/i18n/messages_zh.py)

# Inert marker for a block: {} or {"enabled": false} (also null) asks for nothing.
DISABLED_BLOCK = object()

# A key's status: what zerolab does with it (zerolab.config.keys says what each one means).
IMPLEMENTED = "implemented"
NO_EFFECT = "no effect"
NOT_IMPLEMENTED = "not implemented"
REMOVED = "removed"

NO_FIELD = object()     # Key.default of a key that is not a field of its block's dataclass


@dataclass(frozen=True)
class Key:
    """One DeepSpeed key, declared once (the tables of :mod:`zerolab.config.keys`).

    ``status`` and ``what`` (DeepSpeed's meaning in one line; shown where the status is not
    IMPLEMENTED) and ``inert`` (NOT_IMPLEMENTED: the values that ask for nothing) say what zerolab
    does with the key. A key with a ``default`` is a field of its block's dataclass (generated
    from the table by :mod:`zerolab.config.types`), read by ``read`` (a reader below; None: the
    field keeps its default), with ``type`` when the field's type is not the reader's. ``block``:
    the table of a key whose value is a block. ``alias``: the other name DeepSpeed takes for it.
    ``deepspeed``: DeepSpeed's own default, as the course prints it, where the field holds it
    resolved (``overlap_comm``: None, true at stage 3)."""
    status: str
    what: str = ""
    inert: tuple = ()
    read: Any = None
    default: Any = NO_FIELD
    type: str | None = None
    block: Any = field(default=None, compare=False)
    alias: str = ""
    deepspeed: Any = NO_FIELD

    @property
    def is_field(self) -> bool:
        return self.default is not NO_FIELD

    @property
    def annotation(self) -> str:
        return self.type or getattr(self.read, "type", None) or "Any"

    @property
    def field_default(self) -> Any:
        """The dataclass field's default: ``default``, as a float where the field is one."""
        return float(self.default) if self.type == "float" and self.default is not None else self.default

    @property
    def deepspeed_default(self) -> Any:
        return self.default if self.deepspeed is NO_FIELD else self.deepspeed


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
as_bool.type, as_bool.schema = "bool", {"type": "boolean"}


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
    conv.type, conv.schema = "int", _bounds({"type": "integer"}, lo, hi)
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
    conv.type, conv.schema = "float", _bounds({"type": "number"}, lo, hi)
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
    conv.type = "str"
    conv.schema = {"enum": [*options, *(o.upper() for o in options if lower)]}   # lower: any case, read lowered
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
    conv.type, conv.schema = f"{inner.type} | None", {"anyOf": [inner.schema, {"type": "null"}]}
    return conv


def as_str(v: Any) -> str:
    if isinstance(v, str):
        return v
    raise Bad(T("a string"))


as_str.expected = lambda: T("a string")
as_str.type, as_str.schema = "str", {"type": "string"}


def as_betas(v: Any) -> tuple:
    if (isinstance(v, (list, tuple)) and len(v) == 2 and
            all(not isinstance(b, bool) and isinstance(b, (int, float)) and 0 <= b < 1 for b in v)):
        return (float(v[0]), float(v[1]))
    raise Bad(T("two numbers in [0, 1), like [0.9, 0.999]"))


as_betas.expected = lambda: T("two numbers in [0, 1)")
as_betas.type = "tuple"
as_betas.schema = {"type": "array", "minItems": 2, "maxItems": 2,
                   "items": {"type": "number", "minimum": 0, "exclusiveMaximum": 1}}


def _bounds(schema: dict, lo: Any, hi: Any) -> dict:
    if lo is not None:
        schema["minimum"] = lo
    if hi is not None:
        schema["maximum"] = hi
    return schema


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


# ---- reading a block by its table (used by zerolab.config.parse) ------------------------------

# Old spellings that difflib cannot guess.
RENAMED = {"thread_count": "intra_op_parallelism", "bf16_enabled": "bf16", "fp16_enabled": "fp16"}


def is_inert(value: Any, inert: tuple) -> bool:
    """True when ``value`` is one of ``inert`` (``True`` is not ``1`` here) or a disabled block."""
    for ok in inert:
        if ok is DISABLED_BLOCK:
            if value is None or (isinstance(value, dict) and (not value or value.get("enabled") is False)):
                return True
        elif value is None or ok is None:
            if value is ok:
                return True
        elif isinstance(ok, bool) or isinstance(value, bool):
            if value is ok:
                return True
        elif value == ok:
            return True
    return False


def nearest(key: Any, names: list) -> str | None:
    """The known name the user most likely meant: an old spelling, a case slip, or difflib's pick."""
    key = str(key)
    if RENAMED.get(key) in names:
        return RENAMED[key]
    same_case = [n for n in names if n.lower() == key.lower()]
    return (same_case or difflib.get_close_matches(key, names, n=1, cutoff=0.6) or [None])[0]


def read_fields(p: Problems, block: Mapping | None, path: str, table: dict, given: Mapping = {},
                readers: Mapping = {}, sub=None) -> dict:
    """Every field of ``table``, in declaration order (the order problems are listed in): a value
    in ``given`` as it is (read by the caller), a block key by ``sub(key)``, a key with a reader
    by it (or by ``readers[key]``, one that depends on other values), else the declared default."""
    out = {}
    for name, key in table.items():
        if not key.is_field:
            continue
        if name in given:
            out[name] = given[name]
        elif key.block is not None and sub is not None:
            out[name] = sub(name)
        elif key.read is not None:
            out[name] = read(p, block, path, name, readers.get(name, key.read), key.field_default)
        else:
            out[name] = key.field_default
    return out


def defaults(table: dict) -> dict:
    """``{key: default}`` of a table's fields, as declared (DeepSpeed 0.19.8's code defaults)."""
    return {name: key.default for name, key in table.items() if key.is_field and key.block is None}


def json_schema(table: dict) -> dict:
    """A JSON Schema (draft 2020-12) of a block, from its declarations: every key known (a typo is
    flagged, as the parser does), each field typed and bounded by its reader, with DeepSpeed's
    default; the status and meaning in the description. Advisory, for editors: the parser is the
    judge (an inert value of a refused key, the batch arithmetic)."""
    props = {}
    for name, key in table.items():
        prop = json_schema(key.block) if key.block is not None else dict(getattr(key.read, "schema", {}))
        what = f" {key.what}" if key.what else ""
        prop["description"] = f"[{key.status}]{what}" if key.status != REMOVED else f"[removed from DeepSpeed]{what}"
        if key.is_field and key.block is None and key.deepspeed is NO_FIELD and key.default is not None:
            prop["default"] = list(key.default) if isinstance(key.default, tuple) else key.default
        props[name] = prop
        if key.alias:
            props[key.alias] = {**prop, "description": f"DeepSpeed's other name for '{name}'"}
    return {"type": "object", "properties": props, "additionalProperties": False}
