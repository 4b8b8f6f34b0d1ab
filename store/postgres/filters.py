"""Compile a parsed metadata filter (``store.filters``) into a parameterised PostgreSQL expression.

``filter_sql(parsed, alias)`` turns the tree ``store.filters.parse_filters`` returns into
``(sql, params)``: a boolean SQL expression over the memory's ``jsonb`` metadata in
``{alias}.metadata`` and its timestamps in ``{alias}.created_at`` / ``{alias}.updated_at``
(ISO text), with the positional ``%s`` parameters (psycopg's) it needs. No user-supplied text
is ever pasted into the SQL: keys and values are bound parameters, and the SQL holds no ``%``
of its own. The only identifier spliced in is ``alias``, which the engine chooses (and which is
checked to be a plain identifier, or ``""`` for bare column names).

The semantics are those of the SQLite compiler (``store/sqlite/filters.py``), row for row; how
they are met here:

* **Typed comparisons.** Each test of a value is a ``CASE`` on its ``jsonb_typeof`` (which also
  fixes the order of evaluation, so no cast ever sees a value of another type).
* **Two-valued.** A missing key, JSON ``null`` and SQL NULL metadata fall to ``ELSE FALSE`` (or
  to the ``coalesce`` of ``IsNull``/``Exists``), so ``NOT`` is a true complement.
* **Strings** compare as their UTF-8 bytes (``convert_to(..., 'UTF8')`` against ``bytea``
  parameters): the byte order of SQLite's binary collation. A filter string holding NUL (which
  no PostgreSQL text can hold) thus binds and orders like any other, and equals nothing.
* **Numbers** are read the way SQLite reads JSON: written without fraction digits and within 64
  bits, an integer, compared exactly (``numeric``; a filter float at its exact binary value);
  otherwise a double, compared as ``float8`` (a filter integer that no double equals moves the
  bound to the double beside it, since SQLite compares a real with an integer exactly). Numbers
  beyond the double range (SQLite's +-inf) compare exactly, above or below every filter value.
  jsonb keeps ``1.0`` apart from ``1`` but not ``1e+17`` from ``100000000000000000``, so the one
  difference left is a float that Python writes in exponent form between ``1e16`` and ``2**63``
  whose shortest decimal is not its exact value: it reads as the integer that decimal spells
  (``2.0**60``, stored as ``1.152921504606847e+18``, equals ``2**60`` in SQLite, not here).
* ``contains`` on a string is a byte ``position``, so ``%`` and ``_`` are literal.
* ``icontains`` folds ASCII letters only, like SQLite's ``lower()``: ``lower()`` under
  ``COLLATE "C"`` in the SQL, ``bytes.lower()`` for the value. ``"ÉCOLE"`` icontains
  ``"école"`` does not match; identical text always does.
* **Keys** are always a single object label (``-> %s``), never a path. A key holding NUL is
  read up to its first NUL, as SQLite reads such a label in its JSON path (no jsonb key holds NUL).
* Timestamps compare cut to the filter's precision under ``COLLATE "C"`` (byte order).
* No filter (``None``) is the expression ``"TRUE"``.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from store.filters import Boolean, Null, Number, Text
from store.sql.dialect import Sql
from store.sql.filter_compiler import SYMBOLS, FilterCompiler

__all__ = ["filter_sql"]

_SLOT_RE = re.compile(r"\{(\w+)\}")
_ELEMENT = "_tm_e"  # alias for jsonb_array_elements rows; unlikely to clash with the engine's names
_JSON_TYPES = {Text: "string", Number: "number", Boolean: "boolean"}
_EXACT = "scale({n}) = 0 AND abs({n}) < 9223372036854775808 OR abs({n}) > 1.7976931348623158e308"
"""The JSON numbers ``n`` compared exactly: those SQLite reads as 64-bit integers (``-2**63`` is
a double too, of the same value), and those past the largest double (SQLite's +-inf, above or
below every filter value just as they are), which ``float8`` would refuse."""


def _compose(template: str, **parts: Sql) -> Sql:
    """``template`` with each ``{name}`` replaced by that part's SQL, the parameters in the order they appear."""
    params: list[Any] = []

    def fill(slot: re.Match[str]) -> str:
        sql, part_params = parts[slot[1]]
        params.extend(part_params)
        return sql

    return _SLOT_RE.sub(fill, template), params


def _param(value: Any) -> Sql:
    return "%s", [value]


def _when(value: Sql, json_type: str, test: Sql) -> Sql:
    """``test`` where the jsonb ``value`` is of ``json_type``, else false."""
    return _compose(f"CASE WHEN jsonb_typeof({{value}}) = '{json_type}' THEN {{test}} ELSE FALSE END",
                    value=value, test=test)


def _bytes(value: Sql, fold: bool) -> Sql:
    """The UTF-8 bytes of the jsonb string ``value``, ASCII letters lowered if ``fold``."""
    text = "({value} #>> '{}')"
    if fold:
        text = f'lower({text} COLLATE "C")'
    return _compose(f"convert_to({text}, 'UTF8')", value=value)


def _as_doubles(op: str, values: list[int | float]) -> tuple[str, list[float]]:
    """``(op2, doubles)``: a double stands in ``op`` to one of ``values`` (one value unless ``op`` is
    ``eq``) exactly when it stands in ``op2`` to one of ``doubles``. An integer that no double equals
    is equalled by none, and bounds the doubles as the double beside it does from its side."""
    if op == "eq":
        return op, [float(v) for v in values if float(v) == v]
    (value,) = values
    nearest = float(value)
    if nearest == value:
        return op, [nearest]
    above = nearest > value
    if op in ("lt", "lte"):
        return ("lt" if above else "lte"), [nearest]
    return ("gte" if above else "gt"), [nearest]


def _numbers(value: Sql, op: str, numbers: list[int | float]) -> Sql:
    """The jsonb number ``value`` stands in ``op`` to one of ``numbers``, as SQLite compares."""
    double_op, doubles = _as_doubles(op, numbers)
    return _compose(
        f"CASE WHEN {_EXACT} THEN {{n}} {SYMBOLS[op]} ANY({{exact}}::numeric[]) "
        f"ELSE {{n}}::float8 {SYMBOLS[double_op]} ANY({{doubles}}::float8[]) END",
        n=_compose("({value})::numeric", value=value),
        exact=_param([Decimal(v) for v in numbers]),
        doubles=_param(doubles),
    )


def _typed(value: Sql, op: str, values: list[Text | Number | Boolean]) -> Sql:
    """The jsonb ``value`` is of the type of ``values`` (all of one) and stands in ``op`` to one of them."""
    kind = type(values[0])
    raw = [v.value for v in values]
    if kind is Text:
        test = _compose(f"{{text}} {SYMBOLS[op]} ANY({{raw}}::bytea[])",
                        text=_bytes(value, fold=False), raw=_param([s.encode() for s in raw]))
    elif kind is Number:
        test = _numbers(value, op, raw)
    else:
        test = _compose("({value})::boolean = ANY({raw}::boolean[])", value=value, raw=_param(raw))
    return _when(value, _JSON_TYPES[kind], test)


def _member(value: Sql, test: Sql) -> Sql:
    """The jsonb ``value`` is an array with an element (``_tm_e.value``) passing ``test``."""
    return _when(value, "array", _compose(
        f"EXISTS (SELECT 1 FROM jsonb_array_elements({{value}}) AS {_ELEMENT} WHERE {{test}})", value=value, test=test))


def _is_null(value: Sql) -> Sql:
    return _compose("coalesce(jsonb_typeof({value}), 'null') = 'null'", value=value)


class _PostgresFilters(FilterCompiler):
    """The atoms over jsonb; each is TRUE or FALSE, never NULL."""

    TRUE = "TRUE"

    def _field(self, key: str) -> Sql:
        """The jsonb value of metadata field ``key``, SQL NULL when missing."""
        return f"{self.column('metadata')} -> %s", [key.partition("\x00")[0]]

    def is_null(self, key: str) -> Sql:
        return _is_null(self._field(key))

    def exists(self, key: str) -> Sql:
        return _compose("coalesce(jsonb_typeof({value}), 'null') <> 'null'", value=self._field(key))

    def compare(self, key: str, op: str, value: Text | Number | Boolean) -> Sql:
        return _typed(self._field(key), op, [value])

    def time_compare(self, field: str, op: str, prefix: str) -> Sql:
        return f'substr({self.column(field)}, 1, %s) COLLATE "C" {SYMBOLS[op]} %s', [len(prefix), prefix]

    def one_of(self, key: str, values: tuple[Text | Number | Boolean | Null, ...]) -> Sql:
        """Texts, numbers and booleans each as one array, then null: the same parts, in the same
        order, whatever the order of ``values``."""
        value = self._field(key)
        parts = [_typed(value, "eq", group)
                 for kind in _JSON_TYPES if (group := [v for v in values if isinstance(v, kind)])]
        if Null() in values:
            parts.append(_is_null(value))
        return self.join(parts, "OR")

    def contains(self, key: str, needle: Text | Number | Boolean, ignore_case: bool) -> Sql:
        value = self._field(key)
        element = (f"{_ELEMENT}.value", [])
        if not isinstance(needle, Text):
            return _member(value, _typed(element, "eq", [needle]))
        raw = needle.value.encode()
        if ignore_case:
            raw = raw.lower()
        substring = _compose("position({raw} IN {text}) > 0", raw=_param(raw), text=_bytes(value, ignore_case))
        equal = _compose("{text} = {raw}", text=_bytes(element, ignore_case), raw=_param(raw))
        return self.join([_when(value, "string", substring), _member(value, _when(element, "string", equal))], "OR")


filter_sql = _PostgresFilters.filter_sql
