"""Compile Mem0's metadata-filter grammar into a parameterised SQLite expression.

``filters_sql(filters, column)`` turns a Mem0-style filter dict into
``(sql, params)``: a boolean SQL expression over the JSON text held in
``column`` (SQLite JSON1: ``json_type``, ``json_extract``, ``json_each``) and the
positional ``?`` parameters it needs. No user-supplied text is ever pasted into
the SQL: values *and* JSON paths are bound parameters. The only identifier
spliced in is ``column``, which the engine chooses (and which is checked
against ``^[A-Za-z_][A-Za-z0-9_.]*$``).

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
  ``{"n": true}`` or ``{"n": "1"}`` (SQLite's ``json_extract`` alone would
  conflate these; we check ``json_type`` first).
* ``gt gte lt lte`` take a number (numeric order against JSON numbers) or a
  string (binary/codepoint order against JSON strings, useful for ISO dates).
* ``eq``/plain value ``None`` matches a missing key *or* JSON ``null``;
  ``ne: None`` therefore means "present and not null" (same as ``"*"``).
* **Missing keys:** every atomic condition is two-valued (never SQL NULL), and
  ``ne`` is exactly ``NOT eq``, ``nin`` exactly ``NOT in``. Hence a memory that
  lacks the key (or has ``null``, or a value of another type) *matches*
  ``ne``/``nin``. (Mem0's own behaviour differs per vector store — pgvector's
  ``->> !=`` drops missing keys, Qdrant's ``must_not`` keeps them — so we pick
  the one that makes ``NOT`` a true complement.)
* ``in``/``nin`` take a non-empty list of scalars (strings, numbers, booleans,
  ``None``); each element is compared with the typed rules above. Arrays in the
  metadata are not searched by ``in`` (use ``contains``).
* ``contains``: for a JSON string field and a string value, case-sensitive
  substring (``instr``, so ``%`` and ``_`` are literal). For a JSON array
  field, membership: some element equals the value under the typed rules
  (value may be a string, number or boolean).
* ``icontains``: the value must be a string; case-insensitive substring for
  string fields, case-insensitive element equality for arrays of strings.
  Case folding uses SQLite's built-in ``lower()`` on *both* sides, which folds
  ASCII letters only: ``"ÉCOLE"`` icontains ``"école"`` does not match (``"É"``
  and ``"é"`` differ), but identical non-ASCII text always matches. If the
  engine registers a Unicode-aware scalar function named ``lower`` on its
  connection (SQLite lets applications override built-ins), icontains becomes
  Unicode-aware with no change here.
* Empty filters or ``None`` → ``("1", [])`` (always true). An empty ``AND``
  list is also true; ``OR``/``NOT`` need at least one entry, and every entry
  of a logical list must be a non-empty dict.

Keys
----
Any non-blank string key is allowed, including dots, spaces, quotes and
non-ASCII text: the key is always a single JSON object label (``$."key"``),
never a nested path. ``"`` and ``\\`` and control characters are written as
``\\uXXXX`` escapes inside the quoted label, which SQLite >= 3.45 resolves
(apsw bundles a newer SQLite). The scope keys ``user_id``, ``agent_id`` and
``run_id`` are refused anywhere in the filter: they are passed as the scope
argument instead. Keys starting with ``$`` other than the logical aliases are
refused (they are almost always a misspelt operator). ``created_at`` and
``updated_at`` name the memory's own UTC timestamps, not metadata keys: they take
``eq ne gt gte lt lte`` (or a plain value, for ``eq``) with an ISO date or time at
any precision, and compare the timestamp cut to that precision, so
``{"created_at": {"gte": "2026-12-01", "lte": "2026-12-31"}}`` is December.

Limits: logical nesting deeper than ``MAX_DEPTH`` levels (the top-level dict is
level 1) or more than ``MAX_CONDITIONS`` atomic conditions (one per plain
value, wildcard, or operator inside an operator dict) raise
:class:`store.errors.InvalidArgument`, as does every malformed input; messages
name the problem and what to send instead.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from store import validation
from store.errors import InvalidArgument, shown

__all__ = ["MAX_DEPTH", "MAX_CONDITIONS", "OPERATORS", "SCOPE_KEYS", "filters_sql"]

MAX_DEPTH = 8
MAX_CONDITIONS = 64

OPERATORS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "contains", "icontains")
SCOPE_KEYS = frozenset(validation.SCOPE_KEYS)

_LOGICAL = {"AND": "AND", "OR": "OR", "NOT": "NOT", "$and": "AND", "$or": "OR", "$not": "NOT"}
_COLUMN_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
_JE = "_tm_je"  # alias for json_each rows; unlikely to clash with the engine's names

_OPS_TEXT = ", ".join(OPERATORS)
_EXAMPLES = (
    'e.g. {"category": "work"}, {"priority": {"gte": 3}}, {"tag": "*"}, '
    '{"OR": [{"a": 1}, {"b": 2}]}'
)


# --------------------------------------------------------------------------- helpers


def _fail(msg: str) -> InvalidArgument:
    return InvalidArgument(f"invalid filters: {msg}")


def _desc(value: Any) -> str:
    return shown(value)


def _check_text(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _fail(f"{what} {_desc(text)} is not valid Unicode text (lone surrogate); "
                    "send plain UTF-8 text") from None


def _json_path(key: str) -> str:
    """``$."key"`` with characters that would end or break the label escaped."""
    out = []
    for ch in key:
        if ch in '"\\' or ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '$."' + "".join(out) + '"'


def _kind(value: Any) -> str:
    """Classify a scalar filter value: 'null', 'bool', 'num', 'text'; raise otherwise."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise _fail(f"integer {_desc(value)} is outside the 64-bit range SQLite can "
                        "compare; send a smaller integer or a float")
        return "num"
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _fail(f"number {_desc(value)} is not finite; send a finite number")
        return "num"
    if isinstance(value, str):
        _check_text(value, "string")
        return "text"
    if isinstance(value, Mapping):
        raise _fail(f"got a dict {_desc(value)} where a single value is needed; "
                    "send a string, number, boolean or null")
    if isinstance(value, (list, tuple)):
        raise _fail(f"got a list {_desc(value)} where a single value is needed; "
                    'to match any of several values use {"in": [...]}')
    raise _fail(f"unsupported value type {type(value).__name__} ({_desc(value)}); "
                "send a string, number, boolean or null")


TIMESTAMP_KEYS = ("created_at", "updated_at")
"""Filter keys that name a memory's own timestamps (stored as UTC ISO text) instead of metadata."""
_TIME_OPERATORS = {"eq": "=", "ne": "<>", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
_TIMESTAMP_RE = re.compile(r"^\d{4}(-\d{2}(-\d{2}([T ]\d{2}(:\d{2}(:\d{2}(\.\d{1,6})?)?)?)?)?)?$")


class _Compiler:
    """Builds SQL fragments; every fragment is ``(sql, params)`` with params in SQL order."""

    def __init__(self, column: str) -> None:
        self.col = column
        self.conditions = 0

    # ---- atoms (each a two-valued SQL expression: 0 or 1, never NULL)

    def _type_is(self, path: str, *types: str) -> tuple[str, list[Any]]:
        if len(types) == 1:
            return f"json_type({self.col}, ?) IS '{types[0]}'", [path]
        listed = ", ".join(f"'{t}'" for t in types)
        return f"coalesce(json_type({self.col}, ?), '') IN ({listed})", [path]

    def _typed_cmp(self, path: str, kind: str, sym: str, value: Any) -> tuple[str, list[Any]]:
        guard, gp = self._type_is(path, "text") if kind == "text" else self._type_is(path, "integer", "real")
        return f"({guard} AND json_extract({self.col}, ?) {sym} ?)", [*gp, path, value]

    def _null(self, path: str) -> tuple[str, list[Any]]:
        return f"coalesce(json_type({self.col}, ?), 'null') = 'null'", [path]

    def _exists(self, path: str) -> tuple[str, list[Any]]:
        return f"coalesce(json_type({self.col}, ?), 'null') <> 'null'", [path]

    def _eq(self, path: str, value: Any) -> tuple[str, list[Any]]:
        kind = _kind(value)
        if kind == "null":
            return self._null(path)
        if kind == "bool":
            return self._type_is(path, "true" if value else "false")
        return self._typed_cmp(path, kind, "=", value)

    def _order(self, path: str, op: str, value: Any) -> tuple[str, list[Any]]:
        kind = _kind(value)
        if kind not in ("num", "text"):
            raise _fail(f'operator "{op}" needs a number or a string, got {_desc(value)}')
        sym = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}[op]
        return self._typed_cmp(path, kind, sym, value)

    def _in(self, path: str, op: str, values: Any) -> tuple[str, list[Any]]:
        if not isinstance(values, (list, tuple)):
            raise _fail(f'operator "{op}" needs a list of values, got {_desc(values)}; '
                        f'send e.g. {{"{op}": ["a", "b"]}}')
        if not values:
            raise _fail(f'operator "{op}" needs a non-empty list; send at least one value')
        texts: list[str] = []
        nums: list[int | float] = []
        flags: set[str] = set()
        for v in values:
            kind = _kind(v)
            if kind == "text":
                texts.append(v)
            elif kind == "num":
                nums.append(v)
            elif kind == "bool":
                flags.add("true" if v else "false")
            else:
                flags.add("null")
        parts: list[tuple[str, list[Any]]] = []
        for kind, group in (("text", texts), ("num", nums)):
            if group:
                guard, gp = self._type_is(path, "text") if kind == "text" else self._type_is(path, "integer", "real")
                parts.append((
                    f"({guard} AND json_extract({self.col}, ?) IN (SELECT value FROM json_each(?)))",
                    [*gp, path, json.dumps(group, ensure_ascii=False)],
                ))
        for flag in ("true", "false"):
            if flag in flags:
                parts.append(self._type_is(path, flag))
        if "null" in flags:
            parts.append(self._null(path))
        return _join(parts, "OR")

    def _contains(self, path: str, op: str, value: Any) -> tuple[str, list[Any]]:
        kind = _kind(value)
        if op == "icontains" and kind != "text":
            raise _fail(f'operator "icontains" needs a string, got {_desc(value)}')
        if kind == "null":
            raise _fail('operator "contains" needs a string, number or boolean, got None; '
                        'to find missing/null keys use {"eq": null}')
        arr_guard, ap = self._type_is(path, "array")
        each = f"json_each({self.col}, ?) AS {_JE}"
        if kind == "bool":
            elem, ep = f"{_JE}.type = '{'true' if value else 'false'}'", []
        elif kind == "num":
            elem, ep = f"{_JE}.type IN ('integer', 'real') AND {_JE}.atom = ?", [value]
        elif op == "icontains":
            elem, ep = f"{_JE}.type = 'text' AND lower({_JE}.atom) = lower(?)", [value]
        else:
            elem, ep = f"{_JE}.type = 'text' AND {_JE}.atom = ?", [value]
        member = (f"({arr_guard} AND EXISTS (SELECT 1 FROM {each} WHERE {elem}))", [*ap, path, *ep])
        if kind != "text":
            return member
        text_guard, tp = self._type_is(path, "text")
        if op == "icontains":
            sub = f"({text_guard} AND instr(lower(json_extract({self.col}, ?)), lower(?)) > 0)"
        else:
            sub = f"({text_guard} AND instr(json_extract({self.col}, ?), ?) > 0)"
        return _join([(sub, [*tp, path, value]), member], "OR")

    # ---- structure

    def _count(self) -> None:
        self.conditions += 1
        if self.conditions > MAX_CONDITIONS:
            raise _fail(f"more than {MAX_CONDITIONS} conditions; split the query or use "
                        '{"in": [...]} instead of many equalities on one key')

    def _key(self, key: Any) -> str:
        if not isinstance(key, str):
            raise _fail(f"key {_desc(key)} is not a string; metadata keys are strings")
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

    def _timestamp(self, key: str, value: Any) -> tuple[str, list[Any]]:
        """``created_at`` / ``updated_at``: the memory's own UTC timestamps, not metadata keys.

        Each value is an ISO date or time at any precision ("2026", "2026-12", "2026-12-01",
        "2026-12-01T09:30"), and the timestamp is compared cut to that length, so a day
        means all of it: ``{"lte": "2026-12-01"}`` keeps memories of December 1st.
        """
        column = f"{self.col.rpartition('.')[0]}.{key}".lstrip(".")
        operators = value if isinstance(value, Mapping) else {"eq": value}
        if not operators:
            raise _fail(f'empty operator dict for {key}; send e.g. {{"{key}": {{"gte": "2026-12-01"}}}}')
        parts = []
        for op, operand in operators.items():
            if op not in _TIME_OPERATORS:
                raise _fail(f"unknown operator {_desc(op)} for {key}; valid operators: "
                            f"{', '.join(_TIME_OPERATORS)}")
            if not (isinstance(operand, str) and _TIMESTAMP_RE.match(operand)):
                raise _fail(f"{key} compares with a date or time such as \"2026-12-01\" or "
                            f"\"2026-12-01T09:30\", got {_desc(operand)}")
            self._count()
            parts.append((f"substr({column}, 1, ?) {_TIME_OPERATORS[op]} ?", [len(operand), operand.replace(" ", "T")]))
        return _join(parts, "AND")

    def _field(self, key: str, value: Any) -> tuple[str, list[Any]]:
        if key in TIMESTAMP_KEYS:
            return self._timestamp(key, value)
        path = _json_path(key)
        if not isinstance(value, Mapping):
            self._count()
            if isinstance(value, str) and value == "*":
                return self._exists(path)
            return self._eq(path, value)
        if not value:
            raise _fail(f'empty operator dict for key {shown(key)}; send e.g. '
                        '{"key": {"eq": "value"}} or {"key": "value"}')
        parts = []
        for op, operand in value.items():
            if not (isinstance(op, str) and op in OPERATORS):
                hint = ""
                if isinstance(op, str) and op.startswith("$") and op[1:] in OPERATORS:
                    hint = f' (write "{op[1:]}" without the "$")'
                raise _fail(f'unknown operator {_desc(op)} for key {shown(key)}{hint}; '
                            f"valid operators: {_OPS_TEXT}")
            self._count()
            if op == "eq":
                parts.append(self._eq(path, operand))
            elif op == "ne":
                parts.append(_not(self._eq(path, operand)))
            elif op in ("gt", "gte", "lt", "lte"):
                parts.append(self._order(path, op, operand))
            elif op == "in":
                parts.append(self._in(path, op, operand))
            elif op == "nin":
                parts.append(_not(self._in(path, op, operand)))
            else:
                parts.append(self._contains(path, op, operand))
        return _join(parts, "AND")

    def compile(self, filters: Any, depth: int) -> tuple[str, list[Any]]:
        if depth > MAX_DEPTH:
            raise _fail(f"logical operators nested deeper than {MAX_DEPTH} levels; "
                        "flatten the filter")
        if not isinstance(filters, Mapping):
            raise _fail(f"a filter must be a dict, got {type(filters).__name__} "
                        f"({_desc(filters)}); " + _EXAMPLES)
        parts = []
        for key, value in filters.items():
            if isinstance(key, str) and key in _LOGICAL:
                parts.append(self._logical(key, _LOGICAL[key], value, depth))
            else:
                parts.append(self._field(self._key(key), value))
        return _join(parts, "AND")

    def _logical(self, spelled: str, op: str, value: Any, depth: int) -> tuple[str, list[Any]]:
        if op == "NOT" and isinstance(value, Mapping):
            value = [value]
        if not isinstance(value, (list, tuple)):
            shape = "a list of filter dicts (or a single dict)" if op == "NOT" else "a list of filter dicts"
            raise _fail(f'"{spelled}" needs {shape}, got {_desc(value)}; '
                        f'send e.g. {{"{spelled}": [{{"a": 1}}, {{"b": 2}}]}}')
        if not value and op != "AND":
            raise _fail(f'"{spelled}" needs at least one filter dict in its list')
        subs = []
        for sub in value:
            if not isinstance(sub, Mapping):
                raise _fail(f'each entry of "{spelled}" must be a filter dict, got '
                            f"{_desc(sub)}; " + _EXAMPLES)
            if not sub:
                raise _fail(f'entries of "{spelled}" must be non-empty filter dicts, got {{}}')
            subs.append(self.compile(sub, depth + 1))
        if op == "AND":
            return _join(subs, "AND")
        joined = _join(subs, "OR")
        return _not(joined) if op == "NOT" else joined


def _join(parts: list[tuple[str, list[Any]]], op: str) -> tuple[str, list[Any]]:
    if not parts:
        return "1", []
    if len(parts) == 1:
        return parts[0]
    params: list[Any] = []
    for _, p in parts:
        params.extend(p)
    return "(" + f" {op} ".join(sql for sql, _ in parts) + ")", params


def _not(part: tuple[str, list[Any]]) -> tuple[str, list[Any]]:
    return f"(NOT {part[0]})", part[1]


# --------------------------------------------------------------------------- API


def filters_sql(filters: Mapping[str, Any] | None, column: str = "m.metadata") -> tuple[str, list[Any]]:
    """Return ``(sql_expression, params)`` for a Mem0-style metadata filter.

    ``sql_expression`` is a boolean SQL expression over the JSON text in
    ``column`` using positional ``?`` placeholders; ``params`` lists their
    values in order (JSON paths, compared values, JSON-encoded ``in`` lists).
    The expression evaluates to 0 or 1 for every row (never NULL), so it can
    be negated or combined freely. ``None`` or ``{}`` gives ``("1", [])``.

    See the module docstring for the grammar and semantics: typed comparisons
    (``{"flag": true}`` matches only JSON ``true``), missing keys match ``ne``
    and ``nin``, ``contains`` is substring (strings) or membership (arrays),
    ``icontains`` folds ASCII case only, and ``user_id``/``agent_id``/``run_id``
    are refused inside filters.

    Raises :class:`store.errors.InvalidArgument` for malformed filters.
    ``column`` is a trusted identifier chosen by the engine.
    """
    if not isinstance(column, str) or not _COLUMN_RE.match(column):
        raise AssertionError(f"column must be a plain identifier, got {column!r}")
    if filters is None:
        return "1", []
    if not isinstance(filters, Mapping):
        raise _fail(f"filters must be a dict, got {type(filters).__name__} "
                    f"({_desc(filters)}); " + _EXAMPLES)
    if not filters:
        return "1", []
    sql, params = _Compiler(column).compile(filters, 1)
    return sql, list(params)
