"""Tests for store.filters: Mem0's filter grammar, its refusals and the neutral tree it parses to.

No database here: what the tree means on SQLite is tests/test_sqlite_filters.py.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from typing import Any

import pytest

from store.errors import InvalidArgument
from store.filters import (
    MAX_CONDITIONS,
    MAX_DEPTH,
    All,
    AnyOf,
    Boolean,
    Compare,
    Contains,
    Equals,
    Exists,
    IsNull,
    Not,
    Null,
    Number,
    OneOf,
    Text,
    TimeCompare,
    parse_filters,
)
from store.validation import MAX_SQL_INTEGER

# --------------------------------------------------------------------------- the tree


def test_empty_and_none_parse_to_no_filter():
    assert parse_filters(None) is None
    assert parse_filters({}) is None


def test_plain_values_are_typed_once():
    assert parse_filters({"category": "work"}) == Equals("category", Text("work"))
    assert parse_filters({"priority": "3"}) == Equals("priority", Text("3"))
    assert parse_filters({"flag": True}) == Equals("flag", Boolean(True))
    assert parse_filters({"flag": 1}) == Equals("flag", Number(1))
    assert parse_filters({"flag": 1}) != Equals("flag", Boolean(True))  # 1 is not true
    assert parse_filters({"score": -2.5}) == Equals("score", Number(-2.5))
    assert parse_filters({"note": None}) == IsNull("note")
    assert parse_filters({"tag": "*"}) == Exists("tag")
    assert parse_filters({"tag": {"eq": "*"}}) == Equals("tag", Text("*"))  # literal inside an operator


def test_keys_are_kept_as_written():
    assert parse_filters({'say "hi".now': "x"}) == Equals('say "hi".now', Text("x"))
    assert parse_filters({"a.b": "*"}) == Exists("a.b")  # one key, not a path


def test_operator_trees():
    assert parse_filters({"priority": {"gte": 3, "lt": 8.5}}) == All(
        (Compare("priority", "gte", Number(3)), Compare("priority", "lt", Number(8.5)))
    )
    assert parse_filters({"day": {"gt": "2026-01"}}) == Compare("day", "gt", Text("2026-01"))
    assert parse_filters({"category": {"ne": "work"}}) == Not(Equals("category", Text("work")))
    assert parse_filters({"category": {"ne": None}}) == Not(IsNull("category"))
    assert parse_filters({"x": {"in": ["a", 1, True, None]}}) == OneOf(
        "x", (Text("a"), Number(1), Boolean(True), Null())
    )
    assert parse_filters({"x": {"nin": [2.5]}}) == Not(OneOf("x", (Number(2.5),)))
    assert parse_filters({"t": {"contains": "a"}}) == Contains("t", Text("a"), ignore_case=False)
    assert parse_filters({"t": {"contains": 2}}) == Contains("t", Number(2), ignore_case=False)
    assert parse_filters({"t": {"contains": False}}) == Contains("t", Boolean(False), ignore_case=False)
    assert parse_filters({"t": {"icontains": "A"}}) == Contains("t", Text("A"), ignore_case=True)


def test_logical_trees():
    a, b = Equals("a", Number(1)), Exists("b")
    assert parse_filters({"OR": [{"a": 1}, {"b": "*"}]}) == AnyOf((a, b))
    assert parse_filters({"$and": [{"a": 1}, {"b": "*"}]}) == All((a, b))
    assert parse_filters({"NOT": {"a": 1}}) == Not(a)
    assert parse_filters({"$not": [{"a": 1}, {"b": "*"}]}) == Not(AnyOf((a, b)))  # none of them
    assert parse_filters({"NOT": {"a": 1, "b": "*"}}) == Not(All((a, b)))  # not both
    assert parse_filters({"AND": []}) == All(())
    assert parse_filters({"a": 1, "OR": [{"b": "*"}, {"a": 1}]}) == All((a, AnyOf((b, a))))
    # nesting is kept as written, not flattened
    assert parse_filters({"AND": [{"a": {"gt": 1, "lt": 2}}, {"b": "*"}]}) == All(
        (All((Compare("a", "gt", Number(1)), Compare("a", "lt", Number(2)))), b)
    )


def test_timestamp_trees():
    assert parse_filters({"created_at": {"gte": "2026-12-01", "lt": "2026-12-31 09"}}) == All(
        (TimeCompare("created_at", "gte", "2026-12-01"), TimeCompare("created_at", "lt", "2026-12-31T09"))
    )
    assert parse_filters({"updated_at": "2026"}) == TimeCompare("updated_at", "eq", "2026")
    assert parse_filters({"created_at": {"ne": "2026-12-01T09:30:00.5"}}) == TimeCompare(
        "created_at", "ne", "2026-12-01T09:30:00.5"
    )


def test_tree_is_frozen():
    tree = parse_filters({"OR": [{"a": 1}, {"b": "*"}]})
    hash(tree)
    with pytest.raises(dataclasses.FrozenInstanceError):
        tree.parts = ()  # type: ignore[misc]


def test_parsing_imports_no_database():
    probe = "import sys, store.filters; print(sorted(m for m in ('apsw', 'sqlite3', 'sqlite_vec') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# --------------------------------------------------------------------------- limits


def _nested(depth: int) -> dict[str, Any]:
    f: dict[str, Any] = {"priority": 3}
    for _ in range(depth - 1):
        f = {"AND": [f]}
    return f


def test_max_depth():
    tree = parse_filters(_nested(MAX_DEPTH))
    assert tree == Equals("priority", Number(3))  # one-entry ANDs add no node
    with pytest.raises(InvalidArgument, match="deeper than 8"):
        parse_filters({"AND": [_nested(MAX_DEPTH)]})


def test_max_conditions():
    ok = {f"k{i}": {"ne": i} for i in range(MAX_CONDITIONS)}
    assert parse_filters(ok) == All(tuple(Not(Equals(f"k{i}", Number(i))) for i in range(MAX_CONDITIONS)))
    with pytest.raises(InvalidArgument, match="more than 64 conditions"):
        parse_filters({**ok, "extra": 1})
    with pytest.raises(InvalidArgument, match="more than 64"):
        parse_filters({"OR": [{"a": {"gt": 1, "lt": 2}} for _ in range(33)]})
    with pytest.raises(InvalidArgument, match="more than 64"):
        parse_filters({**ok, "created_at": "2026"})
    # a condition is counted before its value is checked
    with pytest.raises(InvalidArgument, match="more than 64"):
        parse_filters({**ok, "x": {"gt": True}})


def test_integer_range_is_sqlite_64_bit():
    low, high = -(MAX_SQL_INTEGER + 1), MAX_SQL_INTEGER
    assert parse_filters({"a": low}) == Equals("a", Number(low))
    assert parse_filters({"a": {"in": [high]}}) == OneOf("a", (Number(high),))
    for outside in (low - 1, high + 1):
        with pytest.raises(InvalidArgument, match="outside the 64-bit range SQLite can compare"):
            parse_filters({"a": outside})


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ({"a": {"like": "x"}}, "valid operators: eq, ne, gt, gte, lt, lte, in, nin, contains, icontains"),
        ({"a": {"$gte": 1}}, 'without the "\\$"'),
        ({"a": {}}, "empty operator dict"),
        ({"": 1}, "empty metadata key"),
        ({"  ": 1}, "empty metadata key"),
        ({1: 1}, "not a string"),
        ({"a": {"in": "x"}}, "needs a list"),
        ({"a": {"nin": 3}}, "needs a list"),
        ({"a": {"in": []}}, "non-empty list"),
        ({"a": {"in": [[1]]}}, "single value"),
        ({"AND": {"a": 1}}, "list of filter dicts"),
        ({"OR": {"a": 1}}, "list of filter dicts"),
        ({"OR": "x"}, "list of filter dicts"),
        ({"OR": []}, "at least one"),
        ({"NOT": []}, "at least one"),
        ({"OR": [1]}, "must be a filter dict"),
        ({"OR": [{}]}, "non-empty filter dicts"),
        ({"a": [1, 2]}, '"in"'),
        ({"a": {"eq": {"b": 1}}}, "single value"),
        ({"a": {"gt": True}}, "number or a string"),
        ({"a": {"lt": None}}, "number or a string"),
        ({"a": {"contains": None}}, "contains"),
        ({"a": {"icontains": 3}}, "needs a string"),
        ({"a": b"x"}, "unsupported value type"),
        ({"a": 2**64}, "64-bit"),
        ({"a": float("nan")}, "finite"),
        ({"a": {"gt": float("inf")}}, "finite"),
        ({"a": "\ud800"}, "surrogate"),
        ({"\ud800": 1}, "surrogate"),
        ({"$where": 1}, "unknown logical operator"),
        ([{"a": 1}], "^invalid filters: filters must be a dict"),
        ("a=1", "^invalid filters: filters must be a dict"),
        ({"AND": [{"OR": [{"a": 1}, ["b"]]}]}, "each entry of \"OR\" must be a filter dict"),
        ({"created_at": {"after": "2026"}}, ("unknown operator 'after' for created_at; valid operators: "
                                            "eq, ne, gt, gte, lt, lte")),
        ({"created_at": {"in": ["2026"]}}, "unknown operator 'in' for created_at"),
        ({"created_at": "yesterday"}, 'created_at compares with a date or time such as "2026-12-01"'),
        ({"updated_at": {"gte": "2026-1"}}, "updated_at compares with a date or time"),
        ({"updated_at": {"lt": 2026}}, "updated_at compares with a date or time"),
        ({"created_at": {}}, "empty operator dict for created_at"),
    ],
)
def test_invalid(filters, message):
    with pytest.raises(InvalidArgument, match=message):
        parse_filters(filters)


@pytest.mark.parametrize("key", ["user_id", "agent_id", "run_id"])
def test_scope_keys_rejected_anywhere(key):
    for f in ({key: "alice"}, {"OR": [{"a": 1}, {key: {"eq": "x"}}]}, {"NOT": {key: "*"}}):
        with pytest.raises(InvalidArgument, match=f"^pass {key} as the scope argument, not inside filters$"):
            parse_filters(f)


def test_first_problem_in_order_is_reported():
    with pytest.raises(InvalidArgument, match="unknown operator 'like'"):
        parse_filters({"a": {"like": 1}, "user_id": "x"})
    with pytest.raises(InvalidArgument, match="pass user_id as the scope argument"):
        parse_filters({"user_id": "x", "a": {"like": 1}})
