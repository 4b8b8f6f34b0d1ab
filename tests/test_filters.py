"""Tests for store.filters: Mem0 filter grammar -> parameterised SQLite JSON1 SQL.

Everything runs against a real in-memory SQLite (apsw), so the generated SQL is
executed, not just inspected.
"""

from __future__ import annotations

import json
import re
from typing import Any

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store.errors import InvalidArgument
from store.filters import MAX_CONDITIONS, MAX_DEPTH, filters_sql

# --------------------------------------------------------------------------- fixture data

QUOTE_KEY = 'say "hi".now'  # dot and double quote in one key
ROWS: dict[int, dict[str, Any] | None] = {
    1: {"category": "work", "priority": 3, "score": 0.5, "flag": True,
        "tags": ["a", "b"], "title": "Quarterly Report"},
    2: {"category": "personal", "priority": 5, "score": 1.5, "flag": False,
        "tags": ["b", "c"], "title": "grocery list 100%"},
    3: {"category": "work", "priority": 1, "flag": 1, "title": "under_score"},
    4: {"category": "Work", "priority": "3", "tags": [], "title": "École notes"},
    5: {"priority": 10, "note": None, "tags": [1, 2.5, True, "A"]},
    6: {},
    7: {"a.b": "dotted", QUOTE_KEY: "quoted", "ключ": "значение", "tags": "a,b",
        "back\\slash": "bs"},
    8: {"category": "work", "priority": 3.0, "flag": True, "title": "'; DROP TABLE m; --"},
    9: {"category": None, "score": -2, "title": "100% _done_"},
    10: {"category": "personal", "priority": 7, "title": "ÉCOLE"},
    11: None,  # a row whose metadata column is SQL NULL
}
ALL = set(ROWS)


def _make_conn() -> apsw.Connection:
    conn = apsw.Connection(":memory:")
    conn.execute("CREATE TABLE m(id INTEGER PRIMARY KEY, metadata TEXT)")
    for rid, meta in ROWS.items():
        conn.execute("INSERT INTO m(id, metadata) VALUES (?, ?)",
                     (rid, None if meta is None else json.dumps(meta)))
    return conn


CONN = _make_conn()


def ids(filters: Any) -> set[int]:
    sql, params = filters_sql(filters)
    assert sql.count("?") == len(params)
    return {row[0] for row in CONN.execute(f"SELECT id FROM m WHERE {sql}", params)}


# --------------------------------------------------------------------------- basics


def test_empty_and_none_are_always_true():
    assert filters_sql(None) == ("1", [])
    assert filters_sql({}) == ("1", [])
    assert ids(None) == ALL


def test_plain_equality():
    assert ids({"category": "work"}) == {1, 3, 8}
    assert ids({"category": "Work"}) == {4}  # case-sensitive
    assert ids({"priority": 3}) == {1, 8}  # 3 == 3.0; the string "3" does not match
    assert ids({"priority": "3"}) == {4}
    assert ids({"score": -2}) == {9}


def test_top_level_keys_are_anded():
    assert ids({"category": "work", "priority": 3}) == {1, 8}
    assert ids({"category": "work", "flag": True}) == {1, 8}


def test_booleans_match_only_json_booleans():
    assert ids({"flag": True}) == {1, 8}  # not row 3, whose flag is the number 1
    assert ids({"flag": False}) == {2}
    assert ids({"flag": 1}) == {3}
    assert ids({"flag": {"ne": True}}) == ALL - {1, 8}


def test_none_matches_missing_or_null():
    assert ids({"category": None}) == {5, 6, 7, 9, 11}
    assert ids({"note": None}) == ALL
    assert ids({"category": {"ne": None}}) == {1, 2, 3, 4, 8, 10}


def test_wildcard():
    assert ids({"category": "*"}) == {1, 2, 3, 4, 8, 10}  # null (row 9) excluded
    assert ids({"note": "*"}) == set()  # present but null
    assert ids({"tags": "*"}) == {1, 2, 4, 5, 7}
    assert ids({"category": {"eq": "*"}}) == set()  # inside an operator "*" is literal


# --------------------------------------------------------------------------- operators


def test_eq_ne():
    assert ids({"category": {"eq": "work"}}) == {1, 3, 8}
    # missing key / null / other type all count as "not equal"
    assert ids({"category": {"ne": "work"}}) == ALL - {1, 3, 8}


def test_numeric_ordering():
    assert ids({"priority": {"gt": 3}}) == {2, 5, 10}
    assert ids({"priority": {"gte": 3}}) == {1, 2, 5, 8, 10}  # "3" (string) excluded
    assert ids({"priority": {"lt": 3}}) == {3}
    assert ids({"priority": {"lte": 3}}) == {1, 3, 8}
    assert ids({"score": {"gt": 0.4, "lt": 1.5}}) == {1}  # several ops = AND
    assert ids({"score": {"gte": -2.0, "lte": 1.5}}) == {1, 2, 9}
    assert ids({"priority": {"gte": 3, "lte": 7}}) == {1, 2, 8, 10}


def test_string_ordering():
    assert ids({"category": {"gt": "Work"}}) == {1, 2, 3, 8, 10}  # binary order: "W" < "p" < "w"
    assert ids({"category": {"lt": "work"}}) == {2, 4, 10}
    assert ids({"priority": {"gte": "3"}}) == {4}  # strings only compare with strings


def test_in_nin():
    assert ids({"category": {"in": ["work", "personal"]}}) == {1, 2, 3, 8, 10}
    assert ids({"priority": {"in": [1, 7.0]}}) == {3, 10}
    assert ids({"priority": {"in": [3, "3"]}}) == {1, 4, 8}
    assert ids({"flag": {"in": [True]}}) == {1, 8}
    assert ids({"flag": {"in": [False, 1]}}) == {2, 3}
    assert ids({"category": {"in": [None, "Work"]}}) == {4, 5, 6, 7, 9, 11}
    assert ids({"category": {"nin": ["work", "personal"]}}) == {4, 5, 6, 7, 9, 11}
    # nin is exactly NOT in, so missing keys match it
    assert ids({"priority": {"nin": [3]}}) == ALL - {1, 8}
    assert ids({"tags": {"in": ["a"]}}) == set()  # `in` does not look inside arrays


def test_contains_substring_and_membership():
    assert ids({"title": {"contains": "Report"}}) == {1}
    assert ids({"title": {"contains": "report"}}) == set()
    assert ids({"tags": {"contains": "b"}}) == {1, 2, 7}  # arrays 1, 2 and the string "a,b"
    assert ids({"tags": {"contains": "a"}}) == {1, 7}  # "A" in row 5 is another case
    assert ids({"tags": {"contains": 1}}) == {5}
    assert ids({"tags": {"contains": 2.5}}) == {5}
    assert ids({"tags": {"contains": True}}) == {5}
    assert ids({"tags": {"contains": False}}) == set()
    assert ids({"title": {"contains": 1}}) == set()  # numbers only look inside arrays


def test_contains_treats_like_wildcards_literally():
    assert ids({"title": {"contains": "%"}}) == {2, 9}
    assert ids({"title": {"contains": "_"}}) == {3, 9}
    assert ids({"title": {"contains": "0% _"}}) == {9}
    assert ids({"title": {"contains": "a%b"}}) == set()
    assert ids({"title": {"icontains": "%"}}) == {2, 9}


def test_icontains():
    assert ids({"title": {"icontains": "REPORT"}}) == {1}
    assert ids({"title": {"icontains": "quarterly report"}}) == {1}
    assert ids({"tags": {"icontains": "a"}}) == {1, 5, 7}  # array element "A" matches
    # SQLite lower() folds ASCII only (on both sides): "ÉCOLE" and "École" both fold to
    # "École", but "É" never equals "é"
    assert ids({"title": {"icontains": "ÉCOLE"}}) == {4, 10}
    assert ids({"title": {"icontains": "École"}}) == {4, 10}
    assert ids({"title": {"icontains": "école"}}) == set()


def test_several_operators_in_one_dict_and():
    assert ids({"title": {"contains": "o", "ne": "ÉCOLE", "icontains": "NOTES"}}) == {4}


# --------------------------------------------------------------------------- keys


def test_awkward_keys():
    assert ids({"a.b": "dotted"}) == {7}  # a dot is part of the key, not a path step
    assert ids({"a.b": "*"}) == {7}
    assert ids({QUOTE_KEY: "quoted"}) == {7}
    assert ids({QUOTE_KEY: {"contains": "uot"}}) == {7}
    assert ids({"ключ": "значение"}) == {7}
    assert ids({"back\\slash": "bs"}) == {7}
    assert ids({"a": "*"}) == set()
    assert ids({"say \"hi\"": "*"}) == set()


def test_keys_and_values_never_enter_the_sql():
    sql, params = filters_sql({QUOTE_KEY: "'; DROP TABLE m; --",
                               "x'); DROP TABLE m; --": {"contains": '"'}})
    assert "DROP" not in sql and '"' not in sql and ";" not in sql
    assert "'; DROP TABLE m; --" in params
    assert ids({"title": "'; DROP TABLE m; --"}) == {8}
    assert ids({"title": {"contains": "DROP TABLE"}}) == {8}
    assert ids({"title": {"in": ["'; DROP TABLE m; --", '"']}}) == {8}
    assert ids({"x'); DROP TABLE m; --": "*"}) == set()
    assert CONN.execute("SELECT count(*) FROM m").fetchall() == [(len(ROWS),)]


# --------------------------------------------------------------------------- logic


def test_or_and_not():
    assert ids({"OR": [{"category": "personal"}, {"priority": {"lt": 2}}]}) == {2, 3, 10}
    assert ids({"AND": [{"category": "work"}, {"flag": True}]}) == {1, 8}
    assert ids({"NOT": [{"category": "work"}]}) == ALL - {1, 3, 8}
    assert ids({"NOT": {"category": "work"}}) == ALL - {1, 3, 8}  # single dict accepted
    # NOT of a list = none of them match
    assert ids({"NOT": [{"category": "work"}, {"category": "personal"}]}) == {4, 5, 6, 7, 9, 11}
    # NOT of a multi-key dict = not (both)
    assert ids({"NOT": {"category": "work", "priority": 3}}) == ALL - {1, 8}
    assert ids({"AND": []}) == ALL


def test_dollar_spellings():
    assert ids({"$or": [{"category": "personal"}, {"priority": 1}]}) == {2, 3, 10}
    assert ids({"$and": [{"category": "work"}, {"priority": 1}]}) == {3}
    assert ids({"$not": [{"category": "work"}]}) == ALL - {1, 3, 8}


def test_nested_logic():
    f = {
        "OR": [
            {"AND": [{"category": "work"}, {"NOT": [{"priority": {"gte": 3}}]}]},
            {"AND": [{"tags": {"contains": "c"}}, {"OR": [{"flag": False}, {"flag": True}]}]},
        ],
        "title": "*",
    }
    assert ids(f) == {2, 3}
    assert ids({"NOT": [f]}) == ALL - {2, 3}


def test_logical_beside_plain_keys_is_and():
    assert ids({"category": "work", "OR": [{"priority": 1}, {"priority": 3}]}) == {1, 3, 8}


def test_max_depth():
    f: dict[str, Any] = {"priority": 3}
    for _ in range(MAX_DEPTH - 1):
        f = {"AND": [f]}
    assert ids(f) == {1, 8}
    with pytest.raises(InvalidArgument, match="deeper than 8"):
        filters_sql({"AND": [f]})


def test_max_conditions():
    ok = {f"k{i}": {"ne": i} for i in range(MAX_CONDITIONS)}
    assert ids(ok) == ALL
    with pytest.raises(InvalidArgument, match="more than 64 conditions"):
        filters_sql({**ok, "extra": 1})
    with pytest.raises(InvalidArgument, match="more than 64"):
        filters_sql({"OR": [{"a": {"gt": 1, "lt": 2}} for _ in range(33)]})


# --------------------------------------------------------------------------- validation


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
        ([{"a": 1}], "must be a dict"),
        ("a=1", "must be a dict"),
    ],
)
def test_invalid(filters, message):
    with pytest.raises(InvalidArgument, match=message):
        filters_sql(filters)


@pytest.mark.parametrize("key", ["user_id", "agent_id", "run_id"])
def test_scope_keys_rejected_anywhere(key):
    for f in ({key: "alice"}, {"OR": [{"a": 1}, {key: {"eq": "x"}}]}, {"NOT": {key: "*"}}):
        with pytest.raises(InvalidArgument, match=f"pass {key} as the scope argument, not inside filters"):
            filters_sql(f)


def test_column_must_be_identifier():
    assert filters_sql({"a": 1}, column="metadata")[0].count("json_type(metadata, ?)") == 1
    for bad in ("m.metadata; DROP TABLE m", "1abc", "", "m.metadata)"):
        with pytest.raises(AssertionError):
            filters_sql({"a": 1}, column=bad)


def test_custom_column_executes():
    sql, params = filters_sql({"category": "work"}, column="t.meta")
    got = {r[0] for r in CONN.execute(f"SELECT t.id FROM (SELECT id, metadata AS meta FROM m) AS t WHERE {sql}", params)}
    assert got == {1, 3, 8}


# --------------------------------------------------------------------------- reference model

MISSING = object()
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _eq(x: Any, v: Any) -> bool:
    if v is None:
        return x is MISSING or x is None
    if isinstance(v, bool):
        return x is v
    if _num(v):
        return _num(x) and x == v
    return isinstance(x, str) and x == v


def _holds(doc: dict | None, key: str, op: str, v: Any) -> bool:
    x = MISSING if doc is None else doc.get(key, MISSING)
    if op == "eq":
        return _eq(x, v)
    if op == "ne":
        return not _eq(x, v)
    if op == "*":
        return x is not MISSING and x is not None
    if op in ("gt", "gte", "lt", "lte"):
        same = (_num(v) and _num(x)) or (isinstance(v, str) and isinstance(x, str))
        if not same:
            return False
        a, b = (x.encode(), v.encode()) if isinstance(v, str) else (x, v)
        return {"gt": a > b, "gte": a >= b, "lt": a < b, "lte": a <= b}[op]
    if op in ("in", "nin"):
        hit = any(_eq(x, e) for e in v)
        return hit if op == "in" else not hit
    if op == "contains":
        if isinstance(x, list):
            return any(_eq(e, v) for e in x if not (v is None))
        return isinstance(x, str) and isinstance(v, str) and v in x
    if op == "icontains":
        lv = v.translate(_ASCII_LOWER)
        if isinstance(x, list):
            return any(isinstance(e, str) and e.translate(_ASCII_LOWER) == lv for e in x)
        return isinstance(x, str) and lv in x.translate(_ASCII_LOWER)
    raise AssertionError(op)


def reference(f: dict, doc: dict | None) -> bool:
    for key, value in f.items():
        if key in ("AND", "$and"):
            ok = all(reference(s, doc) for s in value)
        elif key in ("OR", "$or"):
            ok = any(reference(s, doc) for s in value)
        elif key in ("NOT", "$not"):
            subs = [value] if isinstance(value, dict) else value
            ok = not any(reference(s, doc) for s in subs)
        elif isinstance(value, dict):
            ok = all(_holds(doc, key, op, v) for op, v in value.items())
        elif value == "*":
            ok = _holds(doc, key, "*", None)
        else:
            ok = _holds(doc, key, "eq", value)
        if not ok:
            return False
    return True


# --------------------------------------------------------------------------- hypothesis

FIELD_KEYS = ["category", "priority", "score", "flag", "tags", "title", "note", "a.b",
              QUOTE_KEY, "ключ", "missing"]
scalars = st.one_of(
    st.sampled_from(["work", "personal", "Work", "a", "b", "A", "3", "", "%", "_", "o",
                     "ÉCOLE", "école", "'; DROP TABLE m; --", "dotted"]),
    st.sampled_from([0, 1, 2, 3, 5, 7, 10, -2, 0.5, 1.5, 2.5, 3.0]),
    st.booleans(),
    st.none(),
)
ordered = st.one_of(st.sampled_from([0, 1, 3, 5, 0.5, 1.5, -3]), st.sampled_from(["W", "p", "work", "A", ""]))
op_value = st.one_of(
    st.tuples(st.sampled_from(["eq", "ne"]), scalars),
    st.tuples(st.sampled_from(["gt", "gte", "lt", "lte"]), ordered),
    st.tuples(st.sampled_from(["in", "nin"]), st.lists(scalars, min_size=1, max_size=4)),
    st.tuples(st.just("contains"), scalars.filter(lambda v: v is not None)),
    st.tuples(st.just("icontains"), st.sampled_from(["a", "A", "work", "école", "É", "%", "REPORT"])),
)
leaf = st.dictionaries(
    st.sampled_from(FIELD_KEYS),
    st.one_of(scalars, st.just("*"), st.lists(op_value, min_size=1, max_size=3).map(dict)),
    min_size=1, max_size=3,
)


def _extend(children):
    lists = st.lists(children, min_size=1, max_size=3)
    return st.one_of(
        st.builds(lambda k, v: {k: v}, st.sampled_from(["AND", "OR", "NOT", "$and", "$or", "$not"]), lists),
        st.builds(lambda v: {"NOT": v}, children),
        st.builds(lambda a, b: {**a, **b}, leaf, st.builds(lambda v: {"OR": v}, lists)),
    )


valid_filters = st.recursive(leaf, _extend, max_leaves=6)

FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(valid_filters)
def test_matches_reference_model(f):
    try:
        got = ids(f)
    except InvalidArgument:
        # only legal reason: the generator combined more conditions/levels than allowed
        return
    expected = {rid for rid, doc in ROWS.items() if reference(f, doc)}
    assert got == expected


@FAST
@given(valid_filters)
def test_not_is_a_complement(f):
    try:
        inside, outside = ids(f), ids({"NOT": f})
    except InvalidArgument:
        return
    assert inside | outside == ALL and not inside & outside


_SQL_LITERALS = {"text", "integer", "real", "true", "false", "null", "array", ""}


def _structure_ok(sql: str) -> None:
    assert '"' not in sql and ";" not in sql and "--" not in sql
    assert set(re.findall(r"'([^']*)'", sql)) <= _SQL_LITERALS


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12))
any_key = st.one_of(
    st.sampled_from(["AND", "OR", "NOT", "$and", "$or", "$not", "eq", "in", "contains", "*",
                     "user_id", "", "a.b", QUOTE_KEY, "title", "$gt"]),
    st.text(max_size=8),
)
any_json = st.recursive(
    json_scalars,
    lambda ch: st.one_of(st.lists(ch, max_size=4), st.dictionaries(any_key, ch, max_size=4)),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(any_key, any_json, max_size=4))
def test_arbitrary_input_is_rejected_or_runs(f):
    try:
        sql, params = filters_sql(f)
    except InvalidArgument as exc:
        assert str(exc)
        return
    _structure_ok(sql)
    assert sql.count("?") == len(params)
    list(CONN.execute(f"SELECT id FROM m WHERE {sql}", params))  # must not raise apsw errors


nasty = st.one_of(
    st.sampled_from(["'; DROP TABLE m; --", '"', "%", "_", "%_%", "\\", "' OR 1=1 --",
                     'NEAR("a" b)', "a* OR b", "\x00", "$.a", '$."a"', "[0]", "\u2028"]),
    st.text(max_size=20),
)


@settings(max_examples=150, deadline=None)
@given(key=nasty, value=nasty, op=st.sampled_from(["eq", "ne", "contains", "icontains", "gt", "in"]))
def test_strings_are_literals(key, value, op):
    operand = [value] if op == "in" else value
    f = {key: {op: operand}}
    try:
        sql, params = filters_sql(f)
    except InvalidArgument:
        assert not key.strip() or key.startswith("$") or key in ("user_id", "agent_id", "run_id")
        return
    _structure_ok(sql)
    assert value in params or json.dumps([value], ensure_ascii=False) in params
    rows = [(1, {key: value, "other": 1}), (2, {key: value + "x"}), (3, {"zz": value})]
    conn = apsw.Connection(":memory:")
    conn.execute("CREATE TABLE m(id INTEGER PRIMARY KEY, metadata TEXT)")
    for rid, doc in rows:
        conn.execute("INSERT INTO m VALUES (?, ?)", (rid, json.dumps(doc)))
    got = {r[0] for r in conn.execute(f"SELECT id FROM m WHERE {sql}", params)}
    assert got == {rid for rid, doc in rows if reference(f, doc)}
    assert conn.execute("SELECT count(*) FROM m").fetchall() == [(3,)]
