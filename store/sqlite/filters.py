"""Compile a parsed metadata filter (``store.filters``) into a parameterised SQLite expression.

``filter_sql(parsed, alias)`` turns the tree ``store.filters.parse_filters`` returns into
``(sql, params)``: a boolean SQL expression over the memory's JSON metadata in
``{alias}.metadata`` (SQLite JSON1: ``json_type``, ``json_extract``, ``json_each``) and its
timestamps in ``{alias}.created_at`` / ``{alias}.updated_at``, with the positional ``?``
parameters it needs. No user-supplied text is ever pasted into the SQL: values *and* JSON
paths are bound parameters. The only identifier spliced in is ``alias``, which the engine
chooses (and which is checked to be a plain identifier, or ``""`` for bare column names).

How the neutral semantics are met here:

* **Typed comparisons.** ``json_extract`` alone would conflate ``true`` with ``1`` and
  ``1`` with ``"1"``, so every comparison checks ``json_type`` first.
* **Two-valued.** Every expression evaluates to 0 or 1 for every row, never NULL (a
  missing key's ``json_type`` is NULL, hence the ``coalesce`` and ``IS``), so ``NOT`` is a
  true complement and parts combine freely.
* ``contains`` on a string is ``instr``, so ``%`` and ``_`` are literal.
* ``icontains`` folds case with SQLite's built-in ``lower()`` on *both* sides, which folds
  ASCII letters only: ``"ÉCOLE"`` icontains ``"école"`` does not match (``"É"`` and ``"é"``
  differ), but identical non-ASCII text always matches. If the engine registers a
  Unicode-aware scalar function named ``lower`` on its connection (SQLite lets
  applications override built-ins), icontains becomes Unicode-aware with no change here.
* **Keys** are always a single JSON object label (``$."key"``), never a nested path.
  ``"`` and ``\\`` and control characters are written as ``\\uXXXX`` escapes inside the
  quoted label, which SQLite >= 3.45 resolves (apsw bundles a newer SQLite).
* No filter (``None``) is the expression ``"1"`` (always true).
"""

from __future__ import annotations

import json
import re
from typing import Any

from store.filters import (
    All,
    AnyOf,
    Boolean,
    Compare,
    Contains,
    Equals,
    Exists,
    Filter,
    IsNull,
    Not,
    Null,
    Number,
    OneOf,
    Text,
    TimeCompare,
    Value,
)

__all__ = ["filter_sql"]

Sql = tuple[str, list[Any]]
"""A SQL fragment and its parameters, in the order of its ``?`` placeholders."""

_ALIAS_RE = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_]*)?")
_JE = "_tm_je"  # alias for json_each rows; unlikely to clash with the engine's names
_SYMBOLS = {"eq": "=", "ne": "<>", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
_JSON_TYPES = {Text: ("text",), Number: ("integer", "real")}
"""The ``json_type`` names a text or number value compares with."""


def _json_path(key: str) -> str:
    """``$."key"`` with characters that would end or break the label escaped."""
    out = []
    for ch in key:
        if ch in '"\\' or ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '$."' + "".join(out) + '"'


def _flag(value: bool) -> str:
    """The ``json_type`` of a boolean."""
    return "true" if value else "false"


def _join(parts: list[Sql], op: str) -> Sql:
    if not parts:
        return "1", []
    if len(parts) == 1:
        return parts[0]
    params: list[Any] = []
    for _, p in parts:
        params.extend(p)
    return "(" + f" {op} ".join(sql for sql, _ in parts) + ")", params


def _not(part: Sql) -> Sql:
    return f"(NOT {part[0]})", part[1]


class _Compiler:
    """Builds SQL fragments over one table alias; each atom is two-valued (0 or 1, never NULL)."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.col = self._column("metadata")

    def _column(self, name: str) -> str:
        return f"{self.alias}.{name}" if self.alias else name

    def compile(self, node: Filter) -> Sql:
        match node:
            case All(parts):
                return _join([self.compile(part) for part in parts], "AND")
            case AnyOf(parts):
                return _join([self.compile(part) for part in parts], "OR")
            case Not(part):
                return _not(self.compile(part))
            case IsNull(key):
                return self._null(_json_path(key))
            case Exists(key):
                return f"coalesce(json_type({self.col}, ?), 'null') <> 'null'", [_json_path(key)]
            case Equals(key, Boolean(value)):
                return self._type_is(_json_path(key), _flag(value))
            case Equals(key, value):
                return self._typed_cmp(_json_path(key), value, "=")
            case Compare(key, op, value):
                return self._typed_cmp(_json_path(key), value, _SYMBOLS[op])
            case OneOf(key, values):
                return self._one_of(_json_path(key), values)
            case Contains(key, value, ignore_case):
                return self._contains(_json_path(key), value, ignore_case)
            case TimeCompare(field, op, prefix):
                return f"substr({self._column(field)}, 1, ?) {_SYMBOLS[op]} ?", [len(prefix), prefix]
        raise AssertionError(f"not a filter node: {node!r}")

    # ---- atoms

    def _type_is(self, path: str, *types: str) -> Sql:
        if len(types) == 1:
            return f"json_type({self.col}, ?) IS '{types[0]}'", [path]
        listed = ", ".join(f"'{t}'" for t in types)
        return f"coalesce(json_type({self.col}, ?), '') IN ({listed})", [path]

    def _typed_cmp(self, path: str, value: Text | Number, sym: str) -> Sql:
        guard, gp = self._type_is(path, *_JSON_TYPES[type(value)])
        return f"({guard} AND json_extract({self.col}, ?) {sym} ?)", [*gp, path, value.value]

    def _null(self, path: str) -> Sql:
        return f"coalesce(json_type({self.col}, ?), 'null') = 'null'", [path]

    def _one_of(self, path: str, values: tuple[Value, ...]) -> Sql:
        """Texts and numbers each as one JSON list searched with ``json_each``, then each boolean
        and null: the same parts, in the same order, whatever the order of ``values``."""
        parts: list[Sql] = []
        for kind in (Text, Number):
            group = [v.value for v in values if isinstance(v, kind)]
            if group:
                guard, gp = self._type_is(path, *_JSON_TYPES[kind])
                parts.append((
                    f"({guard} AND json_extract({self.col}, ?) IN (SELECT value FROM json_each(?)))",
                    [*gp, path, json.dumps(group, ensure_ascii=False)],
                ))
        for flag in (True, False):
            if Boolean(flag) in values:
                parts.append(self._type_is(path, _flag(flag)))
        if Null() in values:
            parts.append(self._null(path))
        return _join(parts, "OR")

    def _contains(self, path: str, value: Text | Number | Boolean, ignore_case: bool) -> Sql:
        arr_guard, ap = self._type_is(path, "array")
        each = f"json_each({self.col}, ?) AS {_JE}"
        if isinstance(value, Boolean):
            elem, ep = f"{_JE}.type = '{_flag(value.value)}'", []
        elif isinstance(value, Number):
            elem, ep = f"{_JE}.type IN ('integer', 'real') AND {_JE}.atom = ?", [value.value]
        elif ignore_case:
            elem, ep = f"{_JE}.type = 'text' AND lower({_JE}.atom) = lower(?)", [value.value]
        else:
            elem, ep = f"{_JE}.type = 'text' AND {_JE}.atom = ?", [value.value]
        member = (f"({arr_guard} AND EXISTS (SELECT 1 FROM {each} WHERE {elem}))", [*ap, path, *ep])
        if not isinstance(value, Text):
            return member
        text_guard, tp = self._type_is(path, "text")
        if ignore_case:
            sub = f"({text_guard} AND instr(lower(json_extract({self.col}, ?)), lower(?)) > 0)"
        else:
            sub = f"({text_guard} AND instr(json_extract({self.col}, ?), ?) > 0)"
        return _join([(sub, [*tp, path, value.value]), member], "OR")


def filter_sql(parsed: Filter | None, alias: str = "m") -> Sql:
    """Return ``(sql_expression, params)`` for a parsed metadata filter.

    ``sql_expression`` is a boolean SQL expression over the columns of table ``alias``
    (``metadata``, ``created_at``, ``updated_at``; ``alias=""`` names them bare) using
    positional ``?`` placeholders; ``params`` lists their values in order (JSON paths,
    compared values, JSON-encoded ``in`` lists). It evaluates to 0 or 1 for every row
    (never NULL), so it can be negated or combined freely. ``None`` gives ``("1", [])``.

    ``alias`` is a trusted identifier chosen by the engine.
    """
    if not isinstance(alias, str) or not _ALIAS_RE.fullmatch(alias):
        raise AssertionError(f"alias must be a plain identifier or empty, got {alias!r}")
    if parsed is None:
        return "1", []
    sql, params = _Compiler(alias).compile(parsed)
    return sql, list(params)
