"""Mem0's metadata-filter grammar, checked and parsed into a backend-neutral tree.

``parse_filters(filters)`` checks a Mem0-style filter dict and returns it as a
tree of the small frozen nodes below (``None`` when there is nothing to filter).
The tree holds no query text of any database: each storage backend compiles it
to its own (``store/sqlite/filters.py`` for SQLite). Every value is typed once,
here (``Text``, ``Number``, ``Boolean``, ``Null``), so a compiler never has to
tell ``True`` from ``1`` again.

Grammar (the one Mem0 1.x documents for its open-source ``filters=``)
-------------------------------------------------------------------
``{"category": "work"}``
    Plain equality. Several top-level keys are ANDed.
``{"priority": {"gte": 3, "lt": 8}}``
    Operator dict; several operators in one dict are ANDed. Operators:
    ``eq ne gt gte lt lte in nin contains icontains``.
``{"category": "*"}``
    Wildcard: the key exists and its value is not JSON ``null``.
``{"AND": [f, ...]}``, ``{"OR": [f, ...]}``, ``{"NOT": [f, ...]}`` / ``{"NOT": f}``
    Logical combinators, nestable (``$and``/``$or``/``$not`` are accepted as
    aliases: Mem0 passes ``$or``/``$not`` through to its vector stores). ``NOT``
    of a list means *none* of the entries match. A logical key may sit beside
    ordinary keys; everything at one level is ANDed.

Semantics chosen
----------------
* **Typed comparisons, no coercion.** A string only matches JSON strings, a
  number only JSON numbers (integer and real compare numerically, so ``1``
  equals ``1.0``), a boolean only JSON ``true``/``false``. So ``{"flag": true}``
  does *not* match ``{"flag": 1}`` and ``{"n": 1}`` does not match
  ``{"n": true}`` or ``{"n": "1"}``.
* ``gt gte lt lte`` take a number (numeric order against JSON numbers) or a
  string (binary/codepoint order against JSON strings, useful for ISO dates).
* ``eq``/plain value ``None`` matches a missing key *or* JSON ``null``;
  ``ne: None`` therefore means "present and not null" (same as ``"*"``).
* **Missing keys:** every atomic condition is two-valued (true or false, never
  unknown), and ``ne`` is exactly ``NOT eq``, ``nin`` exactly ``NOT in``. Hence a
  memory that lacks the key (or has ``null``, or a value of another type)
  *matches* ``ne``/``nin``. (Mem0's own behaviour differs per vector store —
  pgvector's ``->> !=`` drops missing keys, Qdrant's ``must_not`` keeps them — so
  we pick the one that makes ``NOT`` a true complement.)
* ``in``/``nin`` take a non-empty list of scalars (strings, numbers, booleans,
  ``None``); each element is compared with the typed rules above. Arrays in the
  metadata are not searched by ``in`` (use ``contains``).
* ``contains``: for a JSON string field and a string value, case-sensitive
  substring (``%`` and ``_`` are literal characters, not patterns). For a JSON
  array field, membership: some element equals the value under the typed rules
  (value may be a string, number or boolean).
* ``icontains``: the value must be a string; case-insensitive substring for
  string fields, case-insensitive element equality for arrays of strings.
  Identical text always matches; how far case folding reaches beyond ASCII is
  the backend's (its compiler says).
* Empty filters or ``None`` → ``None``: no filter, every memory matches. An
  empty ``AND`` list is also true; ``OR``/``NOT`` need at least one entry, and
  every entry of a logical list must be a non-empty dict.

Keys
----
Any non-blank string key is allowed, including dots, spaces, quotes and
non-ASCII text: the key always names one top-level metadata field, never a
nested path. The scope keys ``user_id``, ``agent_id`` and ``run_id`` are
refused anywhere in the filter: they are passed as the scope argument instead.
Keys starting with ``$`` other than the logical aliases are refused (they are
almost always a misspelt operator). ``created_at`` and ``updated_at`` name the
memory's own UTC timestamps, not metadata keys: they take ``eq ne gt gte lt lte``
(or a plain value, for ``eq``) with an ISO date or time at any precision, and
compare the timestamp cut to that precision, so
``{"created_at": {"gte": "2026-12-01", "lte": "2026-12-31"}}`` is December.

Limits: logical nesting deeper than ``MAX_DEPTH`` levels (the top-level dict is
level 1) or more than ``MAX_CONDITIONS`` atomic conditions (one per plain
value, wildcard, or operator inside an operator dict) raise
:class:`store.errors.InvalidArgument`, as does every malformed input; messages
name the problem and what to send instead.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from store.errors import InvalidArgument, shown
from store.scope import SCOPE_KEYS
from store.validation import MAX_SQL_INTEGER

__all__ = [
    "MAX_CONDITIONS",
    "MAX_DEPTH",
    "OPERATORS",
    "TIMESTAMP_KEYS",
    "All",
    "AnyOf",
    "Boolean",
    "Compare",
    "Contains",
    "Equals",
    "Exists",
    "Filter",
    "IsNull",
    "Not",
    "Null",
    "Number",
    "OneOf",
    "Order",
    "Text",
    "TimeCompare",
    "TimeOperator",
    "Value",
    "parse_filters",
]

MAX_DEPTH = 8
MAX_CONDITIONS = 64

OPERATORS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "contains", "icontains")
TIMESTAMP_KEYS = ("created_at", "updated_at")
"""Filter keys that name a memory's own timestamps (stored as UTC ISO text) instead of metadata."""

Order = Literal["gt", "gte", "lt", "lte"]
"""The ordering operators, for numbers and strings alike."""
TimeOperator = Literal["eq", "ne", Order]

_ORDER = get_args(Order)
_TIME_OPERATORS = get_args(TimeOperator)
_LOGICAL = {"AND": "AND", "OR": "OR", "NOT": "NOT", "$and": "AND", "$or": "OR", "$not": "NOT"}
_TIMESTAMP_RE = re.compile(r"^\d{4}(-\d{2}(-\d{2}([T ]\d{2}(:\d{2}(:\d{2}(\.\d{1,6})?)?)?)?)?)?$")

_OPS_TEXT = ", ".join(OPERATORS)
_EXAMPLES = (
    'e.g. {"category": "work"}, {"priority": {"gte": 3}}, {"tag": "*"}, '
    '{"OR": [{"a": 1}, {"b": 2}]}'
)


# --------------------------------------------------------------------------- values


@dataclass(frozen=True)
class Text:
    """A string: matches JSON strings only."""

    value: str


@dataclass(frozen=True)
class Number:
    """An integer (within 64 bits) or a finite float: matches JSON numbers only, ``1`` equals ``1.0``."""

    value: int | float


@dataclass(frozen=True)
class Boolean:
    """``True`` or ``False``: matches JSON ``true`` / ``false`` only, never ``1`` / ``0``."""

    value: bool


@dataclass(frozen=True)
class Null:
    """``None``: matches JSON ``null`` or a missing key (in ``in`` / ``nin`` lists)."""


Value = Text | Number | Boolean | Null


# --------------------------------------------------------------------------- nodes


@dataclass(frozen=True)
class All:
    """Every part holds; no parts (``{"AND": []}``) always holds."""

    parts: tuple[Filter, ...]


@dataclass(frozen=True)
class AnyOf:
    """At least one part holds (one or more parts)."""

    parts: tuple[Filter, ...]


@dataclass(frozen=True)
class Not:
    """The part does not hold: the exact complement, since every node is two-valued."""

    part: Filter


@dataclass(frozen=True)
class Equals:
    """Metadata field ``key`` holds ``value`` under the typed rules (``eq`` or a plain value)."""

    key: str
    value: Text | Number | Boolean


@dataclass(frozen=True)
class IsNull:
    """Metadata field ``key`` is missing or JSON ``null`` (``eq: None``)."""

    key: str


@dataclass(frozen=True)
class Exists:
    """Metadata field ``key`` is present and not JSON ``null`` (the wildcard ``"*"``)."""

    key: str


@dataclass(frozen=True)
class Compare:
    """Metadata field ``key`` is of ``value``'s type and ordered against it by ``op``."""

    key: str
    op: Order
    value: Text | Number


@dataclass(frozen=True)
class OneOf:
    """Metadata field ``key`` equals at least one of ``values`` (``in``; ``nin`` is its ``Not``)."""

    key: str
    values: tuple[Value, ...]


@dataclass(frozen=True)
class Contains:
    """Metadata field ``key`` is a string holding ``value`` (a ``Text``) as a substring, or an array
    with an element equal to ``value``; ``ignore_case`` (``icontains``, ``value`` a ``Text``) folds case."""

    key: str
    value: Text | Number | Boolean
    ignore_case: bool


@dataclass(frozen=True)
class TimeCompare:
    """The memory's own timestamp ``field`` (one of ``TIMESTAMP_KEYS``), cut to the length of
    ``prefix`` (an ISO date or time at any precision, ``T`` between date and time), compared
    with ``prefix`` by ``op``."""

    field: str
    op: TimeOperator
    prefix: str


Filter = All | AnyOf | Not | Equals | IsNull | Exists | Compare | OneOf | Contains | TimeCompare


# --------------------------------------------------------------------------- checks


def _fail(msg: str) -> InvalidArgument:
    return InvalidArgument(f"invalid filters: {msg}")


def _check_text(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _fail(f"{what} {shown(text)} is not valid Unicode text (lone surrogate); "
                    "send plain UTF-8 text") from None


def _value(value: Any) -> Value:
    """The typed form of a scalar filter value; raise for anything else."""
    if value is None:
        return Null()
    if isinstance(value, bool):
        return Boolean(value)
    if isinstance(value, int):
        if not -(MAX_SQL_INTEGER + 1) <= value <= MAX_SQL_INTEGER:
            raise _fail(f"integer {shown(value)} is outside the 64-bit range SQLite can "
                        "compare; send a smaller integer or a float")
        return Number(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _fail(f"number {shown(value)} is not finite; send a finite number")
        return Number(value)
    if isinstance(value, str):
        _check_text(value, "string")
        return Text(value)
    if isinstance(value, Mapping):
        raise _fail(f"got a dict {shown(value)} where a single value is needed; "
                    "send a string, number, boolean or null")
    if isinstance(value, (list, tuple)):
        raise _fail(f"got a list {shown(value)} where a single value is needed; "
                    'to match any of several values use {"in": [...]}')
    raise _fail(f"unsupported value type {type(value).__name__} ({shown(value)}); "
                "send a string, number, boolean or null")


def _key(key: Any) -> str:
    if not isinstance(key, str):
        raise _fail(f"key {shown(key)} is not a string; metadata keys are strings")
    if not key.strip():
        raise _fail(f"empty metadata key {shown(key)}; send the name of a metadata field, " + _EXAMPLES)
    if key in SCOPE_KEYS:
        raise InvalidArgument(f"pass {key} as the scope argument, not inside filters")
    if key.startswith("$"):
        raise _fail(f'unknown logical operator {shown(key)}; use AND, OR or NOT '
                    "(or $and, $or, $not); comparison operators go inside a key, "
                    'e.g. {"priority": {"gte": 3}}')
    _check_text(key, "key")
    return key


# --------------------------------------------------------------------------- atoms


def _all(parts: list[Filter]) -> Filter:
    """``All`` of ``parts``, or the one part itself."""
    return parts[0] if len(parts) == 1 else All(tuple(parts))


def _any(parts: list[Filter]) -> Filter:
    """``AnyOf`` ``parts``, or the one part itself."""
    return parts[0] if len(parts) == 1 else AnyOf(tuple(parts))


def _equals(key: str, operand: Any) -> Filter:
    value = _value(operand)
    return IsNull(key) if isinstance(value, Null) else Equals(key, value)


def _compare(key: str, op: Order, operand: Any) -> Compare:
    value = _value(operand)
    if not isinstance(value, (Text, Number)):
        raise _fail(f'operator "{op}" needs a number or a string, got {shown(operand)}')
    return Compare(key, op, value)


def _one_of(key: str, op: str, operands: Any) -> OneOf:
    if not isinstance(operands, (list, tuple)):
        raise _fail(f'operator "{op}" needs a list of values, got {shown(operands)}; '
                    f'send e.g. {{"{op}": ["a", "b"]}}')
    if not operands:
        raise _fail(f'operator "{op}" needs a non-empty list; send at least one value')
    return OneOf(key, tuple(_value(v) for v in operands))


def _contains(key: str, op: str, operand: Any) -> Contains:
    value = _value(operand)
    if op == "icontains" and not isinstance(value, Text):
        raise _fail(f'operator "icontains" needs a string, got {shown(operand)}')
    if isinstance(value, Null):
        raise _fail('operator "contains" needs a string, number or boolean, got None; '
                    'to find missing/null keys use {"eq": null}')
    return Contains(key, value, ignore_case=op == "icontains")


def _operator(key: str, op: str, operand: Any) -> Filter:
    """One operator of an operator dict, e.g. ``("gte", 3)`` of ``{"priority": {"gte": 3}}``."""
    if op == "eq":
        return _equals(key, operand)
    if op == "ne":
        return Not(_equals(key, operand))
    if op in _ORDER:
        return _compare(key, op, operand)
    if op == "in":
        return _one_of(key, op, operand)
    if op == "nin":
        return Not(_one_of(key, op, operand))
    return _contains(key, op, operand)


# --------------------------------------------------------------------------- structure


class _Parser:
    """Walks a filter dict depth first, counting atomic conditions against ``MAX_CONDITIONS``."""

    def __init__(self) -> None:
        self.conditions = 0

    def _count(self) -> None:
        self.conditions += 1
        if self.conditions > MAX_CONDITIONS:
            raise _fail(f"more than {MAX_CONDITIONS} conditions; split the query or use "
                        '{"in": [...]} instead of many equalities on one key')

    def _timestamp(self, key: str, value: Any) -> Filter:
        """``created_at`` / ``updated_at``: the memory's own UTC timestamps, not metadata keys.

        Each value is an ISO date or time at any precision ("2026", "2026-12", "2026-12-01",
        "2026-12-01T09:30"), and the timestamp is compared cut to that length, so a day
        means all of it: ``{"lte": "2026-12-01"}`` keeps memories of December 1st.
        """
        operators = value if isinstance(value, Mapping) else {"eq": value}
        if not operators:
            raise _fail(f'empty operator dict for {key}; send e.g. {{"{key}": {{"gte": "2026-12-01"}}}}')
        parts: list[Filter] = []
        for op, operand in operators.items():
            if op not in _TIME_OPERATORS:
                raise _fail(f"unknown operator {shown(op)} for {key}; valid operators: "
                            f"{', '.join(_TIME_OPERATORS)}")
            if not (isinstance(operand, str) and _TIMESTAMP_RE.match(operand)):
                raise _fail(f"{key} compares with a date or time such as \"2026-12-01\" or "
                            f"\"2026-12-01T09:30\", got {shown(operand)}")
            self._count()
            parts.append(TimeCompare(key, op, operand.replace(" ", "T")))
        return _all(parts)

    def _field(self, key: str, value: Any) -> Filter:
        if key in TIMESTAMP_KEYS:
            return self._timestamp(key, value)
        if not isinstance(value, Mapping):
            self._count()
            if isinstance(value, str) and value == "*":
                return Exists(key)
            return _equals(key, value)
        if not value:
            raise _fail(f'empty operator dict for key {shown(key)}; send e.g. '
                        '{"key": {"eq": "value"}} or {"key": "value"}')
        parts: list[Filter] = []
        for op, operand in value.items():
            if not (isinstance(op, str) and op in OPERATORS):
                hint = ""
                if isinstance(op, str) and op.startswith("$") and op[1:] in OPERATORS:
                    hint = f' (write "{op[1:]}" without the "$")'
                raise _fail(f'unknown operator {shown(op)} for key {shown(key)}{hint}; '
                            f"valid operators: {_OPS_TEXT}")
            self._count()
            parts.append(_operator(key, op, operand))
        return _all(parts)

    def parse(self, filters: Any, depth: int) -> Filter:
        if depth > MAX_DEPTH:
            raise _fail(f"logical operators nested deeper than {MAX_DEPTH} levels; "
                        "flatten the filter")
        if not isinstance(filters, Mapping):
            raise _fail(f"a filter must be a dict, got {type(filters).__name__} "
                        f"({shown(filters)}); " + _EXAMPLES)
        parts: list[Filter] = []
        for key, value in filters.items():
            if isinstance(key, str) and key in _LOGICAL:
                parts.append(self._logical(key, _LOGICAL[key], value, depth))
            else:
                parts.append(self._field(_key(key), value))
        return _all(parts)

    def _logical(self, spelled: str, op: str, value: Any, depth: int) -> Filter:
        if op == "NOT" and isinstance(value, Mapping):
            value = [value]
        if not isinstance(value, (list, tuple)):
            shape = "a list of filter dicts (or a single dict)" if op == "NOT" else "a list of filter dicts"
            raise _fail(f'"{spelled}" needs {shape}, got {shown(value)}; '
                        f'send e.g. {{"{spelled}": [{{"a": 1}}, {{"b": 2}}]}}')
        if not value and op != "AND":
            raise _fail(f'"{spelled}" needs at least one filter dict in its list')
        subs: list[Filter] = []
        for sub in value:
            if not isinstance(sub, Mapping):
                raise _fail(f'each entry of "{spelled}" must be a filter dict, got '
                            f"{shown(sub)}; " + _EXAMPLES)
            if not sub:
                raise _fail(f'entries of "{spelled}" must be non-empty filter dicts, got {{}}')
            subs.append(self.parse(sub, depth + 1))
        if op == "AND":
            return _all(subs)
        return Not(_any(subs)) if op == "NOT" else _any(subs)


# --------------------------------------------------------------------------- API


def parse_filters(filters: Mapping[str, Any] | None) -> Filter | None:
    """The tree of a Mem0-style metadata filter, or ``None`` when there is nothing to filter.

    ``None`` or ``{}`` gives ``None`` (every memory matches). See the module docstring for
    the grammar and semantics: typed comparisons (``{"flag": true}`` matches only JSON
    ``true``), missing keys match ``ne`` and ``nin``, ``contains`` is substring (strings)
    or membership (arrays), and ``user_id``/``agent_id``/``run_id`` are refused inside
    filters.

    Raises :class:`store.errors.InvalidArgument` for malformed filters.
    """
    if filters is None:
        return None
    if not isinstance(filters, Mapping):
        raise _fail(f"filters must be a dict, got {type(filters).__name__} "
                    f"({shown(filters)}); " + _EXAMPLES)
    if not filters:
        return None
    return _Parser().parse(filters, 1)
