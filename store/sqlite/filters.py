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

from store.filters import Boolean, Null, Number, Text, Value
from store.sql.dialect import Sql
from store.sql.filter_compiler import SYMBOLS, FilterCompiler

__all__ = ["filter_sql"]

_JE = "_tm_je"  # alias for json_each rows; unlikely to clash with the engine's names
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


class _SQLiteFilters(FilterCompiler):
    """The atoms over JSON1; each is 0 or 1, never NULL."""

    TRUE = "1"

    def __init__(self, alias: str) -> None:
        super().__init__(alias)
        self.col = self.column("metadata")

    def is_null(self, key: str) -> Sql:
        return self._null(_json_path(key))

    def exists(self, key: str) -> Sql:
        return f"coalesce(json_type({self.col}, ?), 'null') <> 'null'", [_json_path(key)]

    def compare(self, key: str, op: str, value: Value) -> Sql:
        if isinstance(value, Boolean):
            return self._type_is(_json_path(key), _flag(value.value))
        return self._typed_cmp(_json_path(key), value, SYMBOLS[op])

    def time_compare(self, field: str, op: str, prefix: str) -> Sql:
        return f"substr({self.column(field)}, 1, ?) {SYMBOLS[op]} ?", [len(prefix), prefix]

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

    def one_of(self, key: str, values: tuple[Value, ...]) -> Sql:
        """Texts and numbers each as one JSON list searched with ``json_each``, then each boolean
        and null: the same parts, in the same order, whatever the order of ``values``."""
        path = _json_path(key)
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
        return self.join(parts, "OR")

    def contains(self, key: str, value: Text | Number | Boolean, ignore_case: bool) -> Sql:
        path = _json_path(key)
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
        return self.join([(sub, [*tp, path, value.value]), member], "OR")


filter_sql = _SQLiteFilters.filter_sql
