"""A memory ``add`` stores names the older memories it may make out of date (``store.updates``):
the nearest in meaning of exactly its scope, live, above the floor, at most three, nearest first.
Real models, on each backend."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable

import numpy as np
import pytest
import test_cli  # pytest puts tests/ on sys.path (prepend import mode)

from store import Engine, MemoryInput
from store.analysis.embeddings import OnnxEmbedder
from store.records import short_id
from store.updates import MOST_SUPERSEDED, SUPERSEDE_SIMILARITY

run = test_cli.run
"""The fixture ``run(*args)``: ``trimem`` in process on the test's store."""


def named(engine: Engine, text: str, **scope: str) -> list[str]:
    """The texts of the older memories that adding ``text`` names, nearest first."""
    (added,) = engine.add(text, **scope)
    assert added.event == "ADD"
    return [older.text for older in added.may_supersede]


def test_a_move_names_the_old_home_and_nothing_else_does(engine: Engine) -> None:
    (paris,) = engine.add("I live in Paris", user_id="ana")
    assert paris.may_supersede == []  # nothing older
    (berlin,) = engine.add("I moved to Berlin", user_id="ana")
    assert berlin.may_supersede == [engine.get(paris.memory.id, user_id="ana")]
    assert named(engine, "I am allergic to peanuts", user_id="ana") == []
    (again,) = engine.add("i live in  paris", user_id="ana")
    assert again.event == "DUPLICATE" and again.may_supersede == []


def test_only_memories_of_exactly_the_same_scope_are_named(engine: Engine) -> None:
    for scope in ({"user_id": "bob"}, {"user_id": "ana", "run_id": "r1"}, {"user_id": "ana", "agent_id": "planner"}):
        engine.add("I live in Paris", **scope)
    assert named(engine, "I moved to Berlin", user_id="ana") == []  # another user's, and narrower scopes'
    assert named(engine, "I moved to Berlin", user_id="ana", run_id="r2") == []  # another run's, and the user's own
    (in_run,) = engine.add("I moved to Berlin", user_id="ana", run_id="r1")
    assert [(m.text, m.user_id, m.agent_id, m.run_id) for m in in_run.may_supersede] == [
        ("I live in Paris", "ana", None, "r1")]


def test_the_exact_scope_is_found_behind_nearer_memories_of_narrower_scopes(engine: Engine) -> None:
    """A user's nearest memories include its runs'; the read goes further until the user's own are found."""
    engine.add("I live in Paris", user_id="ana")
    for number in range(2 * MOST_SUPERSEDED):
        engine.add("I moved to Berlin", user_id="ana", run_id=f"r{number}")  # the same text: nearer than Paris
    assert named(engine, "I moved to Berlin", user_id="ana") == ["I live in Paris"]


def test_expired_memories_are_not_named(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    today = dt.datetime.now(dt.UTC).date()
    engine.add("I live in Paris", user_id="ana", expiration_date=today.isoformat())
    monkeypatch.setattr("store.clock.today", lambda: (today + dt.timedelta(days=1)).isoformat())
    assert named(engine, "I moved to Berlin", user_id="ana") == []


def test_at_most_three_are_named_nearest_first_and_above_the_floor(engine: Engine, embedder: OnnxEmbedder) -> None:
    older = ["I live in Paris", "I live in a flat in Paris", "My home is in Paris", "Paris is where I live",
             "I like Paris in the spring"]
    for text in older:
        engine.add(text, user_id="ana")
    new = "I moved to Berlin"
    names = named(engine, new, user_id="ana")
    vectors = embedder.embed_batch([new, *older])
    similarity = dict(zip(older, vectors[1:] @ vectors[0]))
    expected = sorted((text for text in older if similarity[text] >= SUPERSEDE_SIMILARITY), key=similarity.get,
                      reverse=True)[:MOST_SUPERSEDED]
    assert len(expected) == MOST_SUPERSEDED  # so the cap is what is tested
    assert names == expected
    assert np.isclose(similarity[names[0]], max(similarity.values()))


def test_memories_sent_together_do_not_name_each_other(engine: Engine) -> None:
    engine.add("I live in Paris", user_id="ana")
    results = engine.add([{"role": "user", "content": "I moved to Berlin"},
                          {"role": "assistant", "content": "Noted: you moved to Berlin"}], user_id="ana")
    sent = {r.memory.id for r in results}  # the two say the same, so each would be the other's nearest
    assert [m.text for m in results[0].may_supersede] == ["I live in Paris"]
    assert [m for r in results for m in r.may_supersede if m.id in sent] == []


def test_bulk_adds_name_nothing(engine: Engine) -> None:
    """``add_many`` (imports, ``trimem add --file``, the benchmarks) skips the extra read."""
    engine.add("I live in Paris", user_id="ana")
    (berlin,) = engine.add_many([MemoryInput("I moved to Berlin")], user_id="ana")
    assert berlin.event == "ADD" and berlin.may_supersede == []


def test_trimem_add_names_them_as_the_tool_does(run: Callable, engine: Engine) -> None:
    run("add", "I live in Paris")
    [paris] = engine.list(user_id="default")
    [berlin] = json.loads(run("add", "I moved to Berlin", "--format", "json").stdout)["results"]
    assert [older["id"] for older in berlin["may_supersede"]] == [paris.id]  # whole records, as the memory's
    engine.delete(berlin["memory"]["id"], user_id="default")
    table = run("add", "I moved to Berlin", "--format", "table").stdout
    assert table.splitlines()[-1] == f"  may update: {short_id(paris.id)} I live in Paris"
