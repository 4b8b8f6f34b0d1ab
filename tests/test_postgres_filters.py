"""Tests for store.postgres.filters: the parsed filter tree -> parameterised PostgreSQL jsonb SQL.

Every filter runs on a real PostgreSQL and on SQLite over the same rows, and the two must keep
the same rows (``Twin.ids``). The cases are test_sqlite_filters.py's own: its tests that run
filters are imported below and run here with its ``ids`` (and timestamp lookup) answered by both
backends, so each of their expected sets holds for PostgreSQL too. The tests after them cover
what its fixture rows do not reach: the numbers at the edges of 64 bits and of doubles, strings
PostgreSQL cannot hold, and the one documented difference.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import sys
from collections.abc import Iterator, Mapping
from decimal import Decimal
from functools import partial
from typing import Any

import apsw
import psycopg
import pytest
import test_sqlite_filters as sqlite_cases  # pytest puts tests/ on sys.path (prepend import mode)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sqlite_filters import (  # noqa: F401  (rerun here with both backends answering)
    test_awkward_keys,
    test_booleans_match_only_json_booleans,
    test_contains_substring_and_membership,
    test_contains_treats_like_wildcards_literally,
    test_dollar_spellings,
    test_empty_and_none_are_always_true,
    test_eq_ne,
    test_filter_at_max_depth_runs,
    test_icontains,
    test_in_nin,
    test_keys_and_values_never_enter_the_sql,
    test_logical_beside_plain_keys_is_and,
    test_matches_reference_model,
    test_max_conditions_run,
    test_nested_logic,
    test_none_matches_missing_or_null,
    test_not_is_a_complement,
    test_numeric_ordering,
    test_or_and_not,
    test_plain_equality,
    test_several_operators_in_one_dict_and,
    test_string_ordering,
    test_timestamps_compare_cut_to_precision,
    test_top_level_keys_are_anded,
    test_wildcard,
)

from store.errors import InvalidArgument
from store.filters import parse_filters
from store.postgres.filters import filter_sql
from store.sqlite import filters as sqlite_filters

_TABLES = itertools.count()
_LITERALS = {"string", "number", "boolean", "array", "null", "{}", "UTF8"}


def _structure_ok(sql: str, params: list[Any]) -> None:
    """Only the compiler's own words are in the SQL: every value is a ``%s`` parameter."""
    assert sql.count("%s") == len(params) and "%" not in sql.replace("%s", "")
    assert ";" not in sql and "--" not in sql
    assert set(re.findall(r"'([^']*)'", sql)) <= _LITERALS
    assert set(re.findall(r'"([^"]*)"', sql)) <= {"C"}


class Twin:
    """The same rows in a PostgreSQL temporary table and an in-memory SQLite table."""

    def __init__(self, pg: psycopg.Connection, rows: Mapping[Any, dict[str, Any] | None],
                 stamps: Mapping[Any, tuple[str, str]] | None = None) -> None:
        self.pg = pg
        self.table = f"m_{next(_TABLES)}"
        self.sqlite = apsw.Connection(":memory:")
        self.sqlite.execute(f"CREATE TABLE {self.table}(id INTEGER PRIMARY KEY, metadata TEXT, "
                            "created_at TEXT, updated_at TEXT)")
        pg.execute(f"CREATE TEMPORARY TABLE {self.table}(id int, metadata jsonb, created_at text, updated_at text)")
        self.load(rows, stamps)

    def load(self, rows: Mapping[Any, dict[str, Any] | None],
             stamps: Mapping[Any, tuple[str, str]] | None = None) -> None:
        """Replace the rows of both tables: metadata (``None`` for SQL NULL) and, from ``stamps``,
        created_at and updated_at, under labels that ``ids`` answers with."""
        self.labels = list(rows)
        values = [(i, None if meta is None else json.dumps(meta, ensure_ascii=False),
                   *(stamps or {}).get(label, ("", "")))
                  for i, (label, meta) in enumerate(rows.items())]
        self.sqlite.execute(f"DELETE FROM {self.table}")
        self.sqlite.executemany(f"INSERT INTO {self.table} VALUES (?, ?, ?, ?)", values)
        self.pg.execute(f"DELETE FROM {self.table}")
        self.pg.cursor().executemany(f"INSERT INTO {self.table} VALUES (%s, %s::jsonb, %s, %s)", values)

    def answers(self, filters: Any, alias: str = "m") -> tuple[set[Any], set[Any]]:
        """The labels of the rows ``filters`` keeps: PostgreSQL's, then SQLite's."""
        parsed = parse_filters(filters)
        source = f"{self.table} AS {alias}" if alias else self.table
        pg_sql, pg_params = filter_sql(parsed, alias)
        _structure_ok(pg_sql, pg_params)
        sqlite_sql, sqlite_params = sqlite_filters.filter_sql(parsed, alias)
        pg_rows = self.pg.execute(f"SELECT id FROM {source} WHERE {pg_sql}", pg_params)
        sqlite_rows = self.sqlite.execute(f"SELECT id FROM {source} WHERE {sqlite_sql}", sqlite_params)
        return {self.labels[i] for i, in pg_rows}, {self.labels[i] for i, in sqlite_rows}

    def ids(self, filters: Any, alias: str = "m") -> set[Any]:
        """The labels of the rows ``filters`` keeps, the same on both backends."""
        pg, sqlite = self.answers(filters, alias)
        assert pg == sqlite, filters
        return pg


@pytest.fixture(scope="module")
def pg(postgres_server: str) -> Iterator[psycopg.Connection]:
    """A connection of this module's own; its tables are temporary, so they go with it."""
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        yield conn


@pytest.fixture(scope="module")
def rows(pg: psycopg.Connection) -> Twin:
    """test_sqlite_filters.py's fixture rows."""
    return Twin(pg, sqlite_cases.ROWS)


@pytest.fixture(scope="module")
def stamped(pg: psycopg.Connection) -> Twin:
    """test_sqlite_filters.py's timestamped rows."""
    return Twin(pg, {name: {} for name, _, _ in sqlite_cases.TIMESTAMPED},
                {name: (created, updated) for name, created, updated in sqlite_cases.TIMESTAMPED})


@pytest.fixture(scope="module")
def scratch(pg: psycopg.Connection) -> Twin:
    """Tables for each test (or example) to load rows of its own into."""
    return Twin(pg, {})


@pytest.fixture(autouse=True)
def both_backends(rows: Twin, stamped: Twin, monkeypatch: pytest.MonkeyPatch) -> None:
    """The imported SQLite cases run their filters on both backends."""
    monkeypatch.setattr(sqlite_cases, "ids", rows.ids)
    monkeypatch.setattr(sqlite_cases, "_timestamped", lambda alias: partial(stamped.ids, alias=alias))


# --------------------------------------------------------------------------- the SQL itself


def test_none_is_true():
    assert filter_sql(None) == ("TRUE", [])
    assert filter_sql(parse_filters({})) == ("TRUE", [])


def test_alias_must_be_identifier(rows):
    assert rows.ids({"category": "work"}, alias="t") == {1, 3, 8}
    assert rows.ids({"category": "work"}, alias="") == {1, 3, 8}
    for bad in ("m.metadata; DROP TABLE m", "1abc", "m.metadata", "m)", "m\n", " m", None):
        with pytest.raises(AssertionError):
            filter_sql(parse_filters({"a": 1}), alias=bad)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(sqlite_cases.any_key, sqlite_cases.any_json, max_size=4))
def test_arbitrary_input_is_rejected_or_agrees(rows, f):
    try:
        parse_filters(f)
    except InvalidArgument:
        return
    rows.ids(f)


# --------------------------------------------------------------------------- strings


def _storable(doc: dict[str, Any]) -> bool:
    """PostgreSQL text (so jsonb) holds no NUL."""
    texts = [*doc, *(v for v in doc.values() if isinstance(v, str)),
             *(s for v in doc.values() if isinstance(v, list) for s in v)]
    return not any("\x00" in text for text in texts)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=sqlite_cases.nasty, value=sqlite_cases.nasty,
       op=st.sampled_from(["eq", "ne", "contains", "icontains", "gt", "lte", "in"]))
def test_strings_are_literals(scratch, key, value, op):
    """Keys and values of any text, NUL included, bind as parameters; the rows PostgreSQL can
    hold (NUL dropped from the others) are kept as SQLite keeps them."""
    operand = [value] if op == "in" else value
    f = {key: {op: operand}}
    try:
        parse_filters(f)
    except InvalidArgument:
        return
    plain_key, plain_value = key.replace("\x00", ""), value.replace("\x00", "")
    candidates = [{key: value, "other": 1}, {key: value + "x"}, {"zz": value}, {plain_key: plain_value},
                  {key: [value.upper()]}, {plain_key: plain_value + "\x01"}]
    scratch.load(dict(enumerate(doc for doc in candidates if _storable(doc))))
    scratch.ids(f)
    assert scratch.pg.execute(f"SELECT count(*) FROM {scratch.table}").fetchall() == [(len(scratch.labels),)]


def test_nul(scratch):
    """A value holding NUL equals nothing PostgreSQL holds but orders among the rest by its bytes."""
    scratch.load({"a": {"k": "a"}, "b": {"k": "b"}, "list": {"k": ["a"]}})
    assert scratch.ids({"k": "a\x00"}) == set()
    assert scratch.ids({"k": {"ne": "a\x00"}}) == {"a", "b", "list"}
    assert scratch.ids({"k": {"gt": "a\x00"}}) == {"b"}
    assert scratch.ids({"k": {"lt": "a\x00"}}) == {"a"}
    assert scratch.ids({"k": {"in": ["\x00", "b"]}}) == {"b"}
    assert scratch.ids({"k": {"contains": "\x00"}}) == set()
    assert scratch.ids({"k\x00z": "b"}) == {"b"}  # a key is read up to its NUL, as SQLite does


# --------------------------------------------------------------------------- numbers

INT64 = (-(2**63), 2**63 - 1)
EDGES = [0, 1, -2, 3.0, 0.1, -0.0, 2**53, 2**53 + 1, 2.0**53, 9007199254740995, 9007199254740996.0,
         2**63 - 1, -(2**63), 2**63, 2.0**63, 2**63 + 1, -(2**63) - 1, 10**400, -(10**400),
         1e23, 1.5e308, 5e-324, sys.float_info.max, int(sys.float_info.max), int(sys.float_info.max) + 1]


def _spelled_as_integer(x: float) -> bool:
    """A float that Python writes in exponent form, which jsonb keeps as the 64-bit integer its
    shortest decimal spells, not its exact value: the documented difference."""
    if not (isinstance(x, float) and "e" in repr(x)):
        return False
    spelled = Decimal(repr(x))
    return spelled == spelled.to_integral_value() and abs(spelled) < 2**63 and spelled != Decimal(x)


def _filter_number(x: float) -> bool:
    """A number the filter grammar takes: a 64-bit integer or a finite float."""
    return math.isfinite(x) if isinstance(x, float) else INT64[0] <= x <= INT64[1]


stored_numbers = st.one_of(
    st.sampled_from(EDGES), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
).filter(lambda x: not _spelled_as_integer(x))
filter_numbers = st.one_of(
    st.sampled_from([x for x in EDGES if _filter_number(x)]),
    st.integers(*INT64), st.floats(allow_nan=False, allow_infinity=False),
)


def _neighbours(x: float) -> list[float]:
    """``x`` and its twin of the other type (``int(x)`` or ``float(x)``) that the filter grammar
    takes: where an integer and a double tie or all but tie."""
    if isinstance(x, float):
        near = [x, int(x)]
    else:
        near = [x, float(x)] if abs(x) <= sys.float_info.max else [x]
    return [n for n in near if _filter_number(n)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stored=st.lists(stored_numbers, min_size=1, max_size=6), data=st.data())
def test_numbers_compare_as_in_sqlite(scratch, stored, data):
    """64-bit integers exactly, doubles as doubles, integers against doubles exactly, numbers
    beyond the double range above or below everything: the same rows as SQLite."""
    scratch.load({i: {"x": x, "xs": [x]} for i, x in enumerate(stored)})
    near = [n for x in stored for n in _neighbours(x)]
    value = data.draw(st.sampled_from(near) | filter_numbers if near else filter_numbers)
    op = data.draw(st.sampled_from(["eq", "ne", "gt", "gte", "lt", "lte", "in", "contains"]))
    if op == "contains":
        scratch.ids({"xs": {"contains": value}})
    elif op == "in":
        scratch.ids({"x": {"in": [value, data.draw(filter_numbers)]}})
    else:
        scratch.ids({"x": {op: value}})


@pytest.mark.parametrize(("stored", "filters", "expected"), [
    (2**53 + 1, {"gt": 2.0**53}, True),  # an integer against a double: exactly
    (2.0**53 + 4, {"gt": 2**53 + 3}, True),  # a double against an integer: exactly
    (2.0**53 + 4, {"eq": 2**53 + 5}, False),
    (2.0**53 + 4, {"lte": 2**53 + 5}, True),
    (2**63 + 1, {"eq": 2.0**63}, True),  # beyond 64 bits: a double, as SQLite reads it
    (-(2**63) - 1, {"eq": -(2**63)}, True),
    (10**400, {"gt": 1.7976931348623157e308}, True),  # SQLite's +inf
    (1.0, {"eq": 1}, True),
    (1e23, {"eq": 1e23}, True),
    (0.1, {"eq": 0.1}, True),  # a double, not the decimal 0.1 its text spells
    (0.1, {"lt": 0.1}, False),
])
def test_number_edges(scratch, stored, filters, expected):
    scratch.load({"x": {"x": stored}})
    assert scratch.ids({"x": filters}) == ({"x"} if expected else set())


def test_float_in_exponent_form_reads_as_its_decimal(scratch):
    """The one difference: 2.0**60, stored as 1.152921504606847e+18, is that integer in jsonb."""
    scratch.load({"float": {"x": 2.0**60}, "int": {"x": 1152921504606847000}})
    assert scratch.answers({"x": 2**60}) == (set(), {"float"})
    assert scratch.answers({"x": 2.0**60}) == (set(), {"float"})
    assert scratch.answers({"x": 1152921504606847000}) == ({"float", "int"}, {"int"})
