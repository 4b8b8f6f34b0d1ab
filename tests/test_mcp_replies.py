"""What the model reads: each tool's text is a short line per memory, and its ``structuredContent``
(which Claude Code hands the model in place of the text) is that memory's brief, from which the
line is rendered; ``get_memory`` alone gives the whole record. The tool list a client passes to
the model stays small.

Real server in process (``build_server``) with the session's models, through the SDK client,
which validates every structured result against the tool's output schema.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from mcp import Client
from mcp_client import call

from mcp_server import replies
from mcp_server.models import AddBrief, HistoryBrief, MemoryBrief, PageBrief, SearchBrief
from store import records

pytestmark = pytest.mark.anyio

MAX_TOOL_LIST_CHARS = 7_850
"""Names, descriptions and input schemas of all tools, as compact JSON: what every conversation pays.
The nine memory tools took 6,991; recall_for_prompt, for Claude Code's hooks, adds about 700, and
add_memory's standing argument about 130."""
MAX_CHARS_BEYOND_TEXT = 100
"""Per search result, what the text may add to the memory's own words."""
MAX_SEARCH_JSON_CHARS_PER_RESULT = 160
"""A search's structured content as compact JSON (what Claude Code hands the model), per one-line memory."""
MAX_ADD_JSON_CHARS = 150
"""An add of one one-line memory, likewise."""
MAX_NAMED_JSON_CHARS = 100
"""Per one-line older memory the add names as one it may update (``may_supersede``), likewise."""
BRIEF_KEYS = {"id", "date", "text"}
"""What a memory's brief always says; anything more is set and not implied by the call."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def client(connect: Callable[..., Any]) -> AsyncIterator[Client]:
    async with connect() as instance:
        yield instance


async def text_of(client: Client, tool: str, **arguments: Any) -> tuple[str, dict[str, Any]]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content[0].text
    [content] = result.content
    return content.text, result.structured_content


async def test_the_tool_list_is_small_and_states_no_titles_or_nulls(client: Client) -> None:
    tools = (await client.list_tools()).tools
    size = sum(len(t.name) + len(t.description) + len(json.dumps(t.input_schema, separators=(",", ":")))
               for t in tools)
    assert size <= MAX_TOOL_LIST_CHARS, size
    for tool in tools:
        schema = json.dumps(tool.input_schema)
        assert '"title"' not in schema and '"null"' not in schema, (tool.name, schema)
        assert tool.output_schema["type"] == "object", tool.name



async def test_output_schemas_keep_every_type_in_the_form_quickest_to_validate(client: Client) -> None:
    """Each model in place and each optional field as a list of types: the SDK client validates every
    result against it (so every tool test checks what it accepts); here, what it refuses."""
    await call(client, "add_memory", text="The piano tuner comes on Thursdays")
    found = await call(client, "search_memory", query="piano tuner")
    schema = next(t for t in (await client.list_tools()).tools if t.name == "search_memory").output_schema
    assert "$defs" not in schema and "$ref" not in json.dumps(schema) and "anyOf" not in json.dumps(schema)
    memory = schema["properties"]["results"]["items"]
    assert memory["properties"]["agent_id"]["type"] == "string"  # optional: absent when not shown, never null
    assert memory["required"] == ["id", "date", "text", "score"]
    assert "null" not in json.dumps(schema)
    validator = Draft202012Validator(schema)
    assert list(validator.iter_errors(found)) == []
    [hit] = found["results"]
    for field, wrong in (("agent_id", 5), ("agent_id", None), ("score", "high"), ("metadata", []),
                         ("metadata", None), ("truncated", None), ("truncated", False)):
        assert list(validator.iter_errors({"results": [{**hit, field: wrong}]})), (field, wrong)
    assert list(validator.iter_errors({"results": [{k: v for k, v in hit.items() if k != "date"}]}))


async def test_search_text_is_one_short_line_per_memory_rendered_from_its_brief(client: Client) -> None:
    texts = ["Ana works as a nurse at Santa Maria hospital in Lisbon", "Ana's brother Tomás is a chef in Porto",
             "Ana prefers window seats on long flights"]
    await call(client, "add_memory", text=texts[0], metadata={"category": "work"})
    await call(client, "add_memory", text=texts[1], agent_id="planner")
    await call(client, "add_memory", messages=[{"role": "user", "content": texts[2], "name": "Ana"}])

    text, record = await text_of(client, "search_memory", query="What does Ana do for work?", threshold=0.0)
    header, *lines = text.splitlines()
    assert header == "3 memories, best first (id score date text):"
    hits = record["results"]
    assert len(lines) == len(hits) == 3
    for line, hit in zip(lines, hits):
        assert line.startswith(f"{hit['id']} {hit['score']:.2f} {hit['date']} {hit['text']}")
        assert len(line) - len(hit["text"]) <= MAX_CHARS_BEYOND_TEXT, line
        assert "null" not in line and "None" not in line and "default" not in line  # the caller's own scope
        assert list(hit)[:4] == ["id", "score", "date", "text"] and hit["score"] == round(hit["score"], 2)
    by_text = {hit["text"]: line for line, hit in zip(lines, hits)}
    assert by_text[texts[0]].endswith(' | metadata {"category":"work"}')
    assert by_text[texts[1]].endswith(" | agent_id planner")  # another agent than the call's (none named)
    assert by_text[texts[2]].endswith(" | said by Ana (user)")
    shown = {hit["text"]: set(hit) - BRIEF_KEYS - {"score"} for hit in hits}
    assert shown == {texts[0]: {"metadata"}, texts[1]: {"agent_id"}, texts[2]: {"actor_id", "role"}}

    planner_text, planner = await text_of(client, "search_memory", query="Ana's brother", agent_id="planner")
    assert planner_text.splitlines()[1].endswith(texts[1])  # the call's own agent is not repeated
    assert set(planner["results"][0]) == BRIEF_KEYS | {"score"}

    nothing, _ = await text_of(client, "search_memory", query="Ana", user_id="nobody")
    assert nothing == "No stored memory is relevant to this query."


async def test_the_short_id_in_a_reply_is_accepted_by_every_tool_taking_an_id(client: Client) -> None:
    text, record = await text_of(client, "add_memory", text="The gate code is 4711", expiration_date="2999-01-01")
    [memory] = record["results"]
    short, day = memory["id"], memory["date"]
    assert len(short) == 8 and re.fullmatch(r"\d{4}-\d\d-\d\d", day)
    assert memory == {"event": "ADD", "id": short, "date": day, "text": "The gate code is 4711",
                      "expires": "2999-01-01"}
    assert text == f"Stored: {short} {day} The gate code is 4711 | expires 2999-01-01"
    line, whole = await text_of(client, "get_memory", memory_id=short)
    assert line == text.removeprefix("Stored: ")
    assert whole["id"].startswith(short) and len(whole["id"]) == 36  # get_memory: the whole record
    assert whole["created_at"].startswith(day) and whole["agent_id"] is None and whole["truncated"] is False
    assert (await call(client, "get_memory", memory_id=whole["id"])) == whole
    updated, brief = await text_of(client, "update_memory", memory_id=short, metadata={"place": "garage"})
    assert brief == {"id": short, "date": day, "text": "The gate code is 4711", "metadata": {"place": "garage"},
                     "expires": "2999-01-01"}
    assert updated == f"Updated: {short} {day} The gate code is 4711 | metadata " \
                      '{"place":"garage"} | expires 2999-01-01'
    again, duplicate = await text_of(client, "add_memory", text="the gate code is  4711")
    assert again.startswith(f"Already stored (DUPLICATE): {short} ")
    assert duplicate["results"] == [{**brief, "event": "DUPLICATE"}]
    history, events = await text_of(client, "memory_history", memory_id=short)
    assert re.fullmatch(
        rf"History of {short}, oldest first:\n\S+ ADD: The gate code is 4711\n\S+ UPDATE \| metadata "
        r'\{"place":"garage"\}', history), history
    added, changed = events["events"]
    assert events["memory_id"] == short and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", added["at"])
    assert added == {"event": "ADD", "at": added["at"], "new_text": "The gate code is 4711"}
    assert changed == {"event": "UPDATE", "at": changed["at"], "old_text": "The gate code is 4711",
                       "new_text": "The gate code is 4711", "new_metadata": {"place": "garage"}}
    deleted, gone = await text_of(client, "delete_memory", memory_id=short)
    assert deleted.startswith(f"Deleted: {short} ") and gone == {"deleted": brief}
    assert (await text_of(client, "delete_all_memories", user_id="default"))[0] == "Deleted 0 memories."


async def test_an_add_names_the_older_memories_it_may_update_in_both_answers(client: Client) -> None:
    _, first = await text_of(client, "add_memory", text="I live in Paris")
    [paris] = first["results"]
    assert "may_supersede" not in paris  # nothing older: the key is absent, not empty
    text, record = await text_of(client, "add_memory", text="I moved to Berlin")
    [berlin] = record["results"]
    assert berlin["may_supersede"] == [{"id": paris["id"], "text": "I live in Paris"}]
    assert text.splitlines() == [f"Stored: {berlin['id']} {berlin['date']} I moved to Berlin",
                                 f"  may update: {paris['id']} I live in Paris"]
    unrelated, plain = await text_of(client, "add_memory", text="I am allergic to peanuts")
    assert "may_supersede" not in plain["results"][0] and "may update" not in unrelated

    cut = AddBrief.of([records.AddedMemory("ADD", memory(), may_supersede=[memory(id="note-0001")])],
                      {"user_id": "ana"}, 9)
    assert cut.model_dump(mode="json")["results"][0]["may_supersede"] == [
        {"id": "note-0001", "text": "Ana likes", "truncated": True}]
    assert replies.added_text(cut).splitlines()[1] == "  may update: note-0001 Ana likes | text cut; get_memory shows more"


async def test_list_text_says_where_the_next_page_starts(client: Client) -> None:
    for n in range(3):
        await call(client, "add_memory", text=f"Reminder number {n} for the week")
    text, record = await text_of(client, "list_memories", limit=2)
    assert text.splitlines()[0] == "2 memories, newest first (id date text); more with offset 2:"
    assert record["next_offset"] == 2
    assert [set(memory) for memory in record["memories"]] == [BRIEF_KEYS] * 2
    last, page = await text_of(client, "list_memories", limit=2, offset=2)
    assert last.splitlines()[0] == "1 memory, newest first (id date text):"
    assert "next_offset" not in page  # the last page


async def test_a_cut_text_says_so(connect: Callable[..., Any], config: Any) -> None:
    async with connect(config.replace("server", max_result_chars=10)) as client:
        await call(client, "add_memory", text="A long memory about the garden shed and its roof")
        text, record = await text_of(client, "list_memories")
    assert record["memories"][0]["truncated"] is True
    assert text.splitlines()[1].endswith("A long mem | text cut; get_memory shows more")


def memory(**fields: Any) -> records.Memory:
    plain = {"id": "2bc388d0-52a4-4a7c-9f4b-8c1e0f6d7a11", "text": "Ana likes green tea", "user_id": "ana",
             "agent_id": None, "run_id": None, "actor_id": None, "role": None, "metadata": {},
             "created_at": "2026-12-03T09:15:02.123456+00:00", "updated_at": "2026-12-03T09:15:02.123456+00:00",
             "expiration_date": None}
    return records.Memory(**{**plain, **fields})


def test_a_brief_says_nothing_null_default_or_implied_by_the_call() -> None:
    scope = {"user_id": "ana", "agent_id": "planner"}
    plain = MemoryBrief.of(memory(agent_id="planner"), scope, 100)
    assert plain.model_dump(mode="json") == {"id": "2bc388d0", "date": "2026-12-03", "text": "Ana likes green tea"}
    assert replies.memory_line(plain) == "2bc388d0 2026-12-03 Ana likes green tea"

    everything = memory(agent_id="helper", run_id="r1", actor_id="Ana", role="user", metadata={"topic": "tea"},
                        updated_at="2026-12-05T10:00:00.000000+00:00", expiration_date="2027-01-01")
    brief = MemoryBrief.of(everything, scope, 9)
    assert list(brief.model_dump(mode="json").items()) == [
        ("id", "2bc388d0"), ("date", "2026-12-03"), ("text", "Ana likes"), ("agent_id", "helper"), ("run_id", "r1"),
        ("actor_id", "Ana"), ("role", "user"), ("metadata", {"topic": "tea"}), ("updated", "2026-12-05"),
        ("expires", "2027-01-01"), ("truncated", True),
    ]  # never user_id: a call reads its own user's memories alone
    assert replies.memory_line(brief) == (
        '2bc388d0 2026-12-03 Ana likes | agent_id helper | run_id r1 | said by Ana (user) | metadata {"topic":"tea"}'
        " | updated 2026-12-05 | expires 2027-01-01 | text cut; get_memory shows more"
    )

    hit = records.SearchHit(memory(), 0.4567891234, None, None)
    found = SearchBrief.of([hit], {"user_id": "ana"}, 100)
    assert found.model_dump(mode="json") == {"results": [{"id": "2bc388d0", "score": 0.46, "date": "2026-12-03",
                                                          "text": "Ana likes green tea"}]}
    assert replies.search_text(found).splitlines()[1] == "2bc388d0 0.46 2026-12-03 Ana likes green tea"

    added = AddBrief.of([records.AddedMemory("ADD", memory(), ["user_id"]), records.AddedMemory("DUPLICATE", memory())],
                        {"user_id": "ana"}, 100).model_dump(mode="json")
    assert added == {"results": [
        {"event": "ADD", "id": "2bc388d0", "date": "2026-12-03", "text": "Ana likes green tea",
         "ignored_metadata_keys": ["user_id"]},
        {"event": "DUPLICATE", "id": "2bc388d0", "date": "2026-12-03", "text": "Ana likes green tea"},
    ]}
    assert PageBrief.of([memory()], {"user_id": "ana"}, 2, 0, 100).model_dump(mode="json") == {
        "memories": [{"id": "2bc388d0", "date": "2026-12-03", "text": "Ana likes green tea"}]}
    assert MemoryBrief.of(memory(id="note-0001"), {"user_id": "ana"}, 100).id == "note-0001"  # an imported id, whole


def test_a_history_brief_shows_what_each_event_changed() -> None:
    stamp = "2026-12-03T09:15:02.123456+00:00"
    events = [
        records.HistoryEvent("2bc388d0-52a4-4a7c-9f4b-8c1e0f6d7a11", "ADD", None, "Ana likes tea", None, {}, stamp),
        records.HistoryEvent("2bc388d0-52a4-4a7c-9f4b-8c1e0f6d7a11", "UPDATE", "Ana likes tea", "Ana likes green tea",
                             {}, {}, stamp),
        records.HistoryEvent("2bc388d0-52a4-4a7c-9f4b-8c1e0f6d7a11", "UPDATE", "Ana likes green tea",
                             "Ana likes green tea", {}, {"topic": "tea"}, stamp),
        records.HistoryEvent("2bc388d0-52a4-4a7c-9f4b-8c1e0f6d7a11", "DELETE", "Ana likes green tea", None,
                             {"topic": "tea"}, None, stamp),
    ]
    history = HistoryBrief.of(events, 100)
    at = "2026-12-03T09:15:02"
    assert history.model_dump(mode="json") == {"memory_id": "2bc388d0", "events": [
        {"event": "ADD", "at": at, "new_text": "Ana likes tea"},
        {"event": "UPDATE", "at": at, "old_text": "Ana likes tea", "new_text": "Ana likes green tea"},
        {"event": "UPDATE", "at": at, "old_text": "Ana likes green tea", "new_text": "Ana likes green tea",
         "new_metadata": {"topic": "tea"}},
        {"event": "DELETE", "at": at, "old_text": "Ana likes green tea"},
    ]}
    assert replies.history_text(history).splitlines() == [
        "History of 2bc388d0, oldest first:", f"{at} ADD: Ana likes tea",
        f"{at} UPDATE: Ana likes tea -> Ana likes green tea", f'{at} UPDATE | metadata {{"topic":"tea"}}',
        f"{at} DELETE: Ana likes green tea",
    ]


async def test_structured_content_is_small_and_matches_each_declared_schema(client: Client) -> None:
    """What Claude Code hands the model is ``JSON.stringify(structuredContent)``: for one-line
    memories, little more than their words; and each tool's result is valid for its output schema
    (the SDK checks it on every call, on both sides: an invalid one is an error)."""
    texts = ["Ana works as a nurse at Santa Maria hospital in Lisbon", "Ana's brother Tomás is a chef in Porto",
             "Ana prefers window seats on long flights"]
    results: dict[str, list[dict[str, Any]]] = {}

    async def called(tool: str, **arguments: Any) -> dict[str, Any]:
        results.setdefault(tool, []).append(output := await call(client, tool, **arguments))
        return output

    for text in texts:
        added = await called("add_memory", text=text)
        named = sum(len(result.get("may_supersede", [])) for result in added["results"])
        assert len(json.dumps(added, separators=(",", ":"))) <= MAX_ADD_JSON_CHARS + named * MAX_NAMED_JSON_CHARS, added
    found = await called("search_memory", query="Where does Ana work?", threshold=0.0)
    assert len(found["results"]) == 3
    assert len(json.dumps(found, separators=(",", ":"))) <= 3 * MAX_SEARCH_JSON_CHARS_PER_RESULT, found
    short = found["results"][0]["id"]
    await called("list_memories", limit=2)
    await called("get_memory", memory_id=short)
    await called("update_memory", memory_id=short, metadata={"topic": "work"}, expiration_date="2999-12-31")
    await called("add_memory", messages=[{"role": "user", "content": "I fly to Oslo on Friday", "name": "Ana"}],
                 agent_id="planner", run_id="trip", metadata={"user_id": "x"})
    await called("search_memory", query="Oslo flight", threshold=0.0)
    await called("list_memories", agent_id="planner")
    await called("memory_history", memory_id=short)
    await called("delete_memory", memory_id=short)

    schemas = {tool.name: tool.output_schema for tool in (await client.list_tools()).tools}
    for tool, outputs in results.items():
        validator = Draft202012Validator(schemas[tool])
        for output in outputs:
            assert list(validator.iter_errors(output)) == [], (tool, output)
            if tool != "get_memory":
                assert "null" not in json.dumps(output) and "false" not in json.dumps(output), (tool, output)
        if tool != "get_memory":
            assert "null" not in json.dumps(schemas[tool]), tool  # nothing a brief leaves out may be null
