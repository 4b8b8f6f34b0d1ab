"""Issue 9 through the MCP tools (in-memory client): every tool answers correctly or says why.

The fixtures are ``test_mcp``'s: the real server on a temporary database with the session's models.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, get_args, get_origin

import pytest
from mcp import Client
from mcp_client import call, fail
from pydantic import BaseModel

from mcp_server import models
from store import records
from store.ranking.scoring import ScoreBreakdown

pytestmark = pytest.mark.anyio


# --- 1. explain_search with filters; engine records and tool models in step ---------------------------------------


async def test_explain_search_lists_a_filtered_out_neighbour(client: Client) -> None:
    await call(client, "add_memory", text="Ana is allergic to peanuts", metadata={"category": "health"})
    await call(client, "add_memory", text="Ana is allergic to shellfish and never eats prawns",
               metadata={"category": "food"})
    explained = await call(client, "explain_search", query="What is Ana allergic to?",
                           filters={"category": "health"})
    assert [hit["text"] for hit in explained["results"]] == ["Ana is allergic to peanuts"]
    assert [(d["text"], d["reason"]) for d in explained["dropped"]] == [
        ("Ana is allergic to shellfish and never eats prawns", "filtered")
    ]
    assert explained["dropped_total"] == 1


def _literal_values(annotation: Any) -> set[Any] | None:
    """The values a ``Literal`` (possibly inside ``X | None``) allows; None for other types."""
    if get_origin(annotation) is typing.Literal:
        return set(get_args(annotation))
    for arg in get_args(annotation):
        if (values := _literal_values(arg)) is not None:
            return values
    return None


# Each engine record and the tool output model that carries it to the client.
RECORD_MODELS = [
    (records.Memory, models.MemoryOut),
    (records.AddedMemory, models.AddedOut),
    (records.SearchHit, models.ScoredMemory),
    (records.DroppedCandidate, models.DroppedOut),
    (records.HistoryEvent, models.HistoryEventOut),
    (records.Memory, models.MemoryBrief),
    (records.AddedMemory, models.AddedBrief),
    (records.SearchHit, models.ScoredBrief),
    (records.HistoryEvent, models.HistoryEventBrief),
]


@pytest.mark.parametrize(("record", "model"), RECORD_MODELS, ids=[f"{r.__name__}-{m.__name__}" for r, m in RECORD_MODELS])
def test_tool_models_allow_every_value_the_engine_can_produce(record: type, model: type[BaseModel]) -> None:
    hints = typing.get_type_hints(record)
    shared = [f.name for f in dataclasses.fields(record) if f.name in model.model_fields]
    assert shared, f"{model.__name__} shares no field with {record.__name__}"
    for name in shared:
        engine_values = _literal_values(hints[name])
        if engine_values is not None:
            assert _literal_values(model.model_fields[name].annotation) == engine_values, (record.__name__, name)


def _memory() -> records.Memory:
    return records.Memory("m1", "Ana likes tea", "ana", None, None, None, None, {}, "t0", "t0", None)


def _analysis() -> records.QueryAnalysis:
    return records.QueryAnalysis(["tea"], 1, 5.0, 0.7, [], ["semantic"], 1.0, 60, "semantic", 0.1, True)


@pytest.mark.parametrize("reason", get_args(records.DropReason))
def test_explain_output_accepts_every_drop_reason(reason: str) -> None:
    explanation = records.Explanation(hits=[], analysis=_analysis(),
                                      dropped=[records.DroppedCandidate("m1", "Ana likes tea", 0.4, reason)])
    assert models.ExplainOutput.of(explanation, 100, max_dropped=5).dropped[0].reason == reason


@pytest.mark.parametrize("event", get_args(records.AddEvent))
def test_add_output_accepts_every_add_event(event: str) -> None:
    added = records.AddedMemory(event, _memory())
    assert models.AddedOut(event=added.event, memory=models.MemoryOut.of(added.memory, 100)).event == event
    assert models.AddBrief.of([added], {"user_id": "ana"}, 100).results[0].event == event


@pytest.mark.parametrize("event", get_args(records.HistoryEventKind))
def test_history_output_accepts_every_history_event(event: str) -> None:
    history = [records.HistoryEvent("m1", event, "a", "b", {}, {}, "t0")]
    assert models.HistoryOutput.of(history, 100).events[0].event == event
    assert models.HistoryBrief.of(history, 100).events[0].event == event


def test_explained_hit_carries_the_engine_breakdown_unchanged() -> None:
    breakdown = ScoreBreakdown(0.5, 0.0, 0.0, 0.0, 0.5, 1.0, 0.5, 0.1)
    hit = records.SearchHit(_memory(), 0.5, breakdown, None)
    out = models.ExplainOutput.of(records.Explanation([hit], _analysis(), []), 100, max_dropped=5)
    assert out.results[0].score_parts == breakdown


# --- 6. messages quote at most an excerpt of what they reject -----------------------------------------------------

HUGE = "ab " * 350_000  # 1 MB, with spaces
HUGE_CALLS = [
    ("get_memory", {"memory_id": HUGE}),
    ("get_memory", {"memory_id": "x" * 1_000_000}),
    ("list_memories", {"user_id": ("u " * 150_000)}),
    ("search_memory", {"query": "tea", "agent_id": "x" * 300_000}),
    ("search_memory", {"query": "tea", "top_k": HUGE}),
    ("search_memory", {"query": "tea", "filters": {HUGE: {"around": 1}}}),
    ("search_memory", {"query": "tea", "filters": {"k": {HUGE: 1}}}),
    ("list_memories", {"filters": {"$" + HUGE: 1}}),
    ("add_memory", {"text": "tea", "expiration_date": "2030-01-01" + " " * 900_000 + "x"}),
    ("add_memory", {"text": "tea", "metadata": {"": HUGE}}),
    ("add_memory", {"messages": [{"role": "user", "content": "tea", "name": HUGE}]}),
    ("memory_history", {"memory_id": HUGE}),
]


@pytest.mark.parametrize(("tool", "arguments"), HUGE_CALLS, ids=[f"{t}-{i}" for i, (t, _) in enumerate(HUGE_CALLS)])
async def test_an_error_never_echoes_a_huge_value(client: Client, tool: str, arguments: dict[str, Any]) -> None:
    message = await fail(client, tool, **arguments)
    assert 0 < len(message) < 600, f"{len(message)} characters: {message[:300]}"


# --- 7. an offset SQLite cannot bind ------------------------------------------------------------------------------


async def test_list_with_an_offset_beyond_sqlite_integers_says_why(client: Client) -> None:
    message = await fail(client, "list_memories", offset=2**63)
    assert "offset must be a whole number from 0 to 9223372036854775807, got 9223372036854775808" in message


# --- 9. garbage is refused, dropped metadata keys are reported -----------------------------------------------------

INVISIBLE = ["\x00", "\x00\x00\x00", "\u200b\u200c\u200d", "\x01\x02\x7f", "\ufeff\u2060\x00", "\u00a0\x00\u200b"]


@pytest.mark.parametrize("text", INVISIBLE, ids=[t.encode("unicode_escape").decode() for t in INVISIBLE])
async def test_text_or_query_without_a_visible_character_is_refused(client: Client, text: str) -> None:
    invisible = "no visible character (only control, zero-width or blank ones)"
    assert f"text has {invisible}; send the fact to remember as a sentence" in await fail(
        client, "add_memory", text=text
    )
    await call(client, "add_memory", text="Ana is allergic to peanuts")
    assert f"query has {invisible}; send what to recall, in words" in await fail(client, "search_memory", query=text)
    assert (await call(client, "list_memories"))["memories"][0]["text"] == "Ana is allergic to peanuts"
    assert len((await call(client, "list_memories"))["memories"]) == 1


@pytest.mark.parametrize("date", ["0001-01-01", "2020-02-29"])
async def test_an_expiration_date_in_the_past_is_refused(client: Client, date: str) -> None:
    message = await fail(client, "add_memory", text="Ana's flight is on Friday", expiration_date=date)
    assert f"expiration_date {date} is in the past (today is " in message
    assert "send today or a later date, or omit it" in message
    assert (await call(client, "list_memories", show_expired=True))["memories"] == []


async def test_scope_keys_inside_metadata_are_reported(client: Client) -> None:
    added = await call(client, "add_memory", text="Likes jazz", metadata={"user_id": "mallory", "run_id": "r",
                                                                           "genre": "jazz"})
    [result] = added["results"]
    assert result["ignored_metadata_keys"] == ["user_id", "run_id"]
    assert result["metadata"] == {"genre": "jazz"} and "run_id" not in result
    whole = await call(client, "get_memory", memory_id=result["id"])
    assert (whole["user_id"], whole["run_id"], whole["metadata"]) == ("default", None, {"genre": "jazz"})
    message = await fail(client, "update_memory", memory_id=result["id"], metadata={"agent_id": "x"})
    assert "metadata holds the scope key(s) agent_id; update never moves a memory" in message


# --- 10. agent and run ids narrow within the (default) user ---------------------------------------------------------


async def test_an_agent_id_alone_never_reaches_another_users_memories(client: Client) -> None:
    ids = {}
    for user in ("ana", "bob", None):
        added = await call(client, "add_memory", text=f"The planner booked a train for {user or 'me'}",
                           agent_id="planner", **({"user_id": user} if user else {}))
        ids[user] = added["results"][0]["id"]
    mine = (await call(client, "list_memories", agent_id="planner"))["memories"]
    assert [m["id"] for m in mine] == [ids[None]]
    whole = await call(client, "get_memory", memory_id=ids[None], agent_id="planner")
    assert (whole["user_id"], whole["agent_id"]) == ("default", "planner")
    found = (await call(client, "search_memory", query="train booking", agent_id="planner", threshold=0))["results"]
    assert [hit["id"] for hit in found] == [ids[None]]
    assert "not found" in await fail(client, "get_memory", memory_id=ids["ana"], agent_id="planner")
    assert "not found" in await fail(client, "delete_memory", memory_id=ids["bob"], agent_id="planner")
    assert (await call(client, "delete_all_memories", agent_id="planner")) == {"deleted_count": 1}  # main: 3
    for user in ("ana", "bob"):
        assert len((await call(client, "list_memories", user_id=user, agent_id="planner"))["memories"]) == 1
