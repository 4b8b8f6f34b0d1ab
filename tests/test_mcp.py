"""The MCP tools through the in-memory client: schemas, the memory lifecycle, scopes, errors.

The server is the real one (``build_server``) on a temporary database, with the session's
models; ``test_mcp_stdio.py`` runs the same server as a subprocess over stdio.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from mcp import Client
from mcp_client import call, fail  # pytest puts tests/ on sys.path (prepend import mode)

from store import Config, Engine, load_config
from store.records import short_id

pytestmark = pytest.mark.anyio

TOOLS = {
    "add_memory": {"read_only_hint": False, "destructive_hint": False},
    "search_memory": {"read_only_hint": True},
    "explain_search": {"read_only_hint": True},
    "get_memory": {"read_only_hint": True},
    "list_memories": {"read_only_hint": True},
    "update_memory": {"read_only_hint": False, "destructive_hint": True},
    "delete_memory": {"read_only_hint": False, "destructive_hint": True},
    "delete_all_memories": {"read_only_hint": False, "destructive_hint": True},
    "memory_history": {"read_only_hint": True},
    "recall_for_prompt": {"read_only_hint": False, "destructive_hint": False, "idempotent_hint": True},
}


async def test_tools_are_listed_with_schemas_and_hints(client: Client, config: Config) -> None:
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == set(TOOLS)
    for name, hints in TOOLS.items():
        tool = tools[name]
        assert 40 <= len(tool.description) <= 300, f"{name} needs a short description the model can act on"
        assert tool.output_schema is not None, f"{name} has no output schema"
        assert tool.annotations.open_world_hint is False
        for hint, value in hints.items():
            assert getattr(tool.annotations, hint) is value, (name, hint)
    top_k = tools["search_memory"].input_schema["properties"]["top_k"]
    assert (top_k["minimum"], top_k["maximum"]) == (1, config.limits.max_top_k)
    threshold = tools["explain_search"].input_schema["properties"]["threshold"]
    assert (threshold["minimum"], threshold["maximum"]) == (0.0, 1.0)
    assert tools["search_memory"].input_schema["required"] == ["query"]
    assert "score_parts" in str(tools["explain_search"].output_schema)


async def test_memory_lifecycle_and_scopes(client: Client) -> None:
    ana = await call(client, "add_memory", text="Ana is allergic to peanuts", metadata={"category": "health"})
    [added] = ana["results"]
    assert added["event"] == "ADD"
    memory_id = added["id"]  # the short id, which every tool taking an id accepts
    whole = await call(client, "get_memory", memory_id=memory_id)  # the whole record
    assert short_id(whole["id"]) == memory_id
    assert whole["user_id"] == "default"  # no ids: the configured default user
    again = await call(client, "add_memory", text="ana is allergic to  peanuts")
    assert again["results"][0] == {**added, "event": "DUPLICATE"}
    await call(client, "add_memory", text="Bob is allergic to shellfish", user_id="bob")
    await call(
        client, "add_memory", agent_id="planner",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "I fly to Oslo on Friday",
                                                                  "name": "ana"}],
    )

    found = await call(client, "search_memory", query="What is Ana allergic to?")
    assert [hit["id"] for hit in found["results"]] == [memory_id]
    assert 0 < found["results"][0]["score"] <= 1
    bob = await call(client, "search_memory", query="allergies", user_id="bob")
    assert [hit["text"] for hit in bob["results"]] == ["Bob is allergic to shellfish"]
    planner = await call(client, "list_memories", agent_id="planner")
    assert [(m["text"], m["role"], m["actor_id"]) for m in planner["memories"]] == [
        ("I fly to Oslo on Friday", "user", "ana")
    ]
    assert "not found" in await fail(client, "get_memory", memory_id=memory_id, user_id="bob")

    explained = await call(client, "explain_search", query="peanut allergy", filters={"category": "health"})
    [hit] = explained["results"]
    parts = hit["score_parts"]
    assert parts["raw_score"] == pytest.approx(parts["semantic_score"] + parts["bm25_score"] + parts["entity_boost"])
    assert hit["learned"]["score"] == pytest.approx(hit["score"])  # the default: learned fusion
    assert explained["analysis"]["filters_applied"] is True
    assert explained["analysis"]["term_count"] == len(explained["analysis"]["lemmatized_terms"])

    updated = await call(client, "update_memory", memory_id=memory_id, text="Ana is allergic to peanuts and cashews")
    assert updated["text"] == "Ana is allergic to peanuts and cashews"
    assert (await call(client, "get_memory", memory_id=memory_id))["text"] == updated["text"]
    deleted = await call(client, "delete_memory", memory_id=memory_id)
    assert deleted["deleted"]["id"] == memory_id
    assert "not found" in await fail(client, "get_memory", memory_id=memory_id)
    history = await call(client, "memory_history", memory_id=memory_id)
    assert [event["event"] for event in history["events"]] == ["ADD", "UPDATE", "DELETE"]

    assert (await call(client, "delete_all_memories", user_id="bob")) == {"deleted_count": 1}
    assert (await call(client, "list_memories", user_id="bob"))["memories"] == []
    assert len((await call(client, "list_memories", agent_id="planner"))["memories"]) == 1


async def test_text_that_looks_like_json_is_stored_as_text(client: Client) -> None:
    added = await call(client, "add_memory", text='["milk", "eggs"]', metadata='{"list": "shopping"}')
    [memory] = added["results"]
    assert (memory["text"], memory["metadata"]) == ('["milk", "eggs"]', {"list": "shopping"})
    updated = await call(client, "update_memory", memory_id=memory["id"], text='{"milk": 2}')
    assert updated["text"] == '{"milk": 2}'


async def test_list_is_paginated(client: Client) -> None:
    for n in range(5):
        await call(client, "add_memory", text=f"Fact number {n} about the garden")
    first = await call(client, "list_memories", limit=2)
    assert len(first["memories"]) == 2 and first["next_offset"] == 2
    seen = [m["id"] for m in first["memories"]]
    offset = first["next_offset"]
    while offset is not None:
        page = await call(client, "list_memories", limit=2, offset=offset)
        seen += [m["id"] for m in page["memories"]]
        offset = page.get("next_offset")  # absent on the last page
    assert len(seen) == len(set(seen)) == 5


async def test_texts_are_capped_and_flagged(connect: Callable[..., Any], config: Config) -> None:
    async with connect(config.replace("server", max_result_chars=10)) as client:
        added = await call(client, "add_memory", text="Ana keeps bees on the roof of her flat in Porto")
        [memory] = added["results"]
        assert (memory["text"], memory["truncated"]) == ("Ana keeps ", True)
        hit = (await call(client, "search_memory", query="bees"))["results"][0]
        assert (hit["text"], hit["truncated"]) == ("Ana keeps ", True)


async def test_explain_under_learned_order_says_what_moved_each_memory(
    connect: Callable[..., Any], config: Config
) -> None:
    assert config.search.ranking == "learned"  # the default
    async with connect(config) as client:
        for text in ("Ana works as a nurse in Lisbon", "Ana started the night shift last week", "Bob is a carpenter"):
            await call(client, "add_memory", text=text)
        query = "When did Ana start the night shift?"
        found = (await call(client, "search_memory", query=query))["results"]
        explained = (await call(client, "explain_search", query=query))["results"]
    assert [short_id(hit["id"]) for hit in explained] == [hit["id"] for hit in found]
    assert found[0]["text"] == "Ana started the night shift last week"
    for hit, shown in zip(explained, found):
        learned, parts = hit["learned"], hit["score_parts"]
        assert learned["score"] == learned["probability"] == pytest.approx(hit["score"])
        assert shown["score"] == round(hit["score"], 2)  # search_memory's brief: 2 decimals
        assert parts["final_score"] == pytest.approx(min(parts["raw_score"] / parts["max_possible_score"], 1))
        assert [set(pull) for pull in learned["strongest"]] == [{"feature", "value", "pull"}] * 5
        assert learned["logit"] == pytest.approx(
            learned["intercept"] + sum(pull["pull"] for pull in learned["strongest"]) + learned["others"])
    async with connect(config.replace("search", ranking="trimem")) as client:
        hand_set = (await call(client, "explain_search", query=query))["results"]
    assert all(hit["learned"] is None and hit["score"] == hit["score_parts"]["final_score"] for hit in hand_set)


async def test_default_user_comes_from_the_environment(connect: Callable[..., Any], db_path: Any) -> None:
    config = load_config(environ={"TRIMEM_USER_ID": "ana", "TRIMEM_DB_PATH": str(db_path)})
    async with connect(config) as client:
        added = await call(client, "add_memory", text="Prefers window seats")
        assert (await call(client, "get_memory", memory_id=added["results"][0]["id"]))["user_id"] == "ana"
        assert (await call(client, "list_memories", user_id="default"))["memories"] == []


BAD_CALLS = [
    ("add_memory", {}, "exactly one of text"),
    ("add_memory", {"text": ""}, "at least 1 character"),
    ("add_memory", {"text": "   "}, "text is empty"),
    ("add_memory", {"text": 42}, "valid string"),
    ("add_memory", {"text": "a", "messages": [{"role": "user", "content": "b"}]}, "exactly one of text"),
    ("add_memory", {"messages": [{"role": "robot", "content": "b"}]}, "'user', 'assistant' or 'system'"),
    ("add_memory", {"text": "a", "expiration_date": "next week"}, "should match pattern"),
    ("add_memory", {"text": "a", "expiration_date": "2026-02-30"}, "not a real calendar date"),
    ("add_memory", {"text": "a", "metadata": ["not", "an", "object"]}, "valid dictionary"),
    ("add_memory", {"text": "a", "user_id": "two words"}, "contains whitespace"),
    ("add_memory", {"text": "a", "agent_id": "a\x00b"}, "agent_id='a\\x00b' contains a NUL character (\\x00"),
    ("get_memory", {"memory_id": "ab\x00"}, "memory_id='ab\\x00' contains a NUL character (\\x00"),
    ("search_memory", {}, "query"),
    ("search_memory", {"query": "x", "top_k": 0}, "top_k must be between 1 and 100, got 0"),
    ("search_memory", {"query": "x", "top_k": 10**6}, "top_k must be between 1 and 100, got 1000000"),
    ("search_memory", {"query": "x", "top_k": "many"}, "valid integer"),
    ("explain_search", {"query": "x", "threshold": 1.5}, "less than or equal to 1"),
    ("search_memory", {"query": "x", "filters": {"n": {"around": 3}}}, "unknown operator 'around'"),
    ("search_memory", {"query": "x", "filters": "category=work"}, "valid dictionary"),
    ("list_memories", {"limit": 0}, "limit must be between 1 and 100, got 0"),
    ("get_memory", {"memory_id": "no-such-id"}, "memory 'no-such-id' not found"),
    ("update_memory", {"memory_id": "no-such-id", "text": "x"}, "not found"),
    ("update_memory", {"memory_id": "no-such-id"}, "nothing to update"),
    ("delete_memory", {"memory_id": "no-such-id"}, "not found"),
    ("memory_history", {"memory_id": "no-such-id"}, "no history"),
    ("delete_all_memories", {}, "name a scope"),
]


@pytest.mark.parametrize(("tool", "arguments", "message"), BAD_CALLS, ids=[f"{t}-{i}" for i, (t, *_) in
                                                                             enumerate(BAD_CALLS)])
async def test_bad_input_is_a_tool_error_and_the_server_keeps_answering(
    client: Client, tool: str, arguments: dict[str, Any], message: str
) -> None:
    assert message in await fail(client, tool, **arguments)
    assert (await call(client, "list_memories"))["memories"] == []


async def test_a_crash_is_a_tool_error_and_the_next_call_works(
    client: Client, opened: list[Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("disk on fire")

    await call(client, "list_memories")  # the engine opens in the background from start-up
    [engine] = opened
    monkeypatch.setattr(engine, "search", crash)
    message = await fail(client, "search_memory", query="anything")
    assert "search_memory" in message and "disk on fire" not in message  # internals stay in the server log
    monkeypatch.undo()
    await call(client, "add_memory", text="Still works")
    assert len((await call(client, "search_memory", query="works"))["results"]) == 1
