"""What the model reads: each tool's text is a short line per memory, while ``structuredContent``
keeps the whole record; and the tool list a client passes to the model stays small.

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

pytestmark = pytest.mark.anyio

MAX_TOOL_LIST_CHARS = 7_700
"""Names, descriptions and input schemas of all tools, as compact JSON: what every conversation pays.
The nine memory tools took 6,991; recall_for_prompt, for Claude Code's hooks, adds about 700."""
MAX_CHARS_BEYOND_TEXT = 100
"""Per search result, what the text may add to the memory's own words."""


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
    assert memory["properties"]["agent_id"]["type"] == ["string", "null"]
    validator = Draft202012Validator(schema)
    assert list(validator.iter_errors(found)) == []
    [hit] = found["results"]
    for field, wrong in (("agent_id", 5), ("score", "high"), ("metadata", []), ("truncated", None)):
        assert list(validator.iter_errors({"results": [{**hit, field: wrong}]})), field
    assert list(validator.iter_errors({"results": [{k: v for k, v in hit.items() if k != "created_at"}]}))


async def test_search_text_is_one_short_line_per_memory_and_the_record_stays_whole(client: Client) -> None:
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
        assert line.startswith(f"{hit['id'][:8]} {hit['score']:.2f} {hit['created_at'][:10]} {hit['text']}")
        assert len(line) - len(hit["text"]) <= MAX_CHARS_BEYOND_TEXT, line
        assert "null" not in line and "None" not in line and "default" not in line  # the caller's own scope
    by_text = {hit["text"]: line for line, hit in zip(lines, hits)}
    assert by_text[texts[0]].endswith(' | metadata {"category":"work"}')
    assert by_text[texts[1]].endswith(" | agent_id planner")  # another agent than the call's (none named)
    assert by_text[texts[2]].endswith(" | said by Ana (user)")
    assert set(hits[0]) >= {"id", "text", "truncated", "user_id", "agent_id", "run_id", "actor_id", "role",
                            "metadata", "created_at", "updated_at", "expiration_date", "score"}

    planner_text, _ = await text_of(client, "search_memory", query="Ana's brother", agent_id="planner")
    assert planner_text.splitlines()[1].endswith(texts[1])  # the call's own agent is not repeated

    nothing, _ = await text_of(client, "search_memory", query="Ana", user_id="nobody")
    assert nothing == "No stored memory is relevant to this query."


async def test_the_short_id_in_a_reply_is_accepted_by_every_tool_taking_an_id(client: Client) -> None:
    text, record = await text_of(client, "add_memory", text="The gate code is 4711", expiration_date="2999-01-01")
    memory = record["results"][0]["memory"]
    short = memory["id"][:8]
    assert text == f"Stored: {short} {memory['created_at'][:10]} The gate code is 4711 | expires 2999-01-01"
    assert (await text_of(client, "get_memory", memory_id=short))[0] == text.removeprefix("Stored: ")
    updated, _ = await text_of(client, "update_memory", memory_id=short, metadata={"place": "garage"})
    assert updated == f"Updated: {short} {memory['created_at'][:10]} The gate code is 4711 | metadata " \
                      '{"place":"garage"} | expires 2999-01-01'
    again, _ = await text_of(client, "add_memory", text="the gate code is  4711")
    assert again.startswith(f"Already stored (DUPLICATE): {short} ")
    history, _ = await text_of(client, "memory_history", memory_id=short)
    assert re.fullmatch(
        rf"History of {short}, oldest first:\n\S+ ADD: The gate code is 4711\n\S+ UPDATE \| metadata "
        r'\{"place":"garage"\}', history), history
    deleted, _ = await text_of(client, "delete_memory", memory_id=short)
    assert deleted.startswith(f"Deleted: {short} ")
    assert (await text_of(client, "delete_all_memories", user_id="default"))[0] == "Deleted 0 memories."


async def test_list_text_says_where_the_next_page_starts(client: Client) -> None:
    for n in range(3):
        await call(client, "add_memory", text=f"Reminder number {n} for the week")
    text, record = await text_of(client, "list_memories", limit=2)
    assert text.splitlines()[0] == "2 memories, newest first (id date text); more with offset 2:"
    assert record["next_offset"] == 2
    last, _ = await text_of(client, "list_memories", limit=2, offset=2)
    assert last.splitlines()[0] == "1 memory, newest first (id date text):"


async def test_a_cut_text_says_so(connect: Callable[..., Any], config: Any) -> None:
    async with connect(config.replace("server", max_result_chars=10)) as client:
        await call(client, "add_memory", text="A long memory about the garden shed and its roof")
        text, record = await text_of(client, "list_memories")
    assert record["memories"][0]["truncated"] is True
    assert text.splitlines()[1].endswith("A long mem | text cut; get_memory shows more")
