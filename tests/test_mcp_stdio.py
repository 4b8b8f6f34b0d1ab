"""End to end over real stdio: ``trimem serve`` as a subprocess, driven by the ``mcp`` client.

This is what Claude Desktop does: spawn the console script, send ``initialize`` and
call tools. The server loads its own models here, so one process serves the whole
scenario.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_client import call, fail
from test_mcp import TOOLS  # pytest puts tests/ on sys.path (prepend import mode)

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def server_command() -> list[str]:
    """The installed ``trimem`` script beside this Python, else ``python -m mcp_server``."""
    script = Path(sys.executable).with_name("trimem")
    return [str(script), "serve"] if script.exists() else [sys.executable, "-m", "mcp_server", "serve"]


def server_parameters(home: Path, **env: str) -> StdioServerParameters:
    command, *args = server_command()
    return StdioServerParameters(
        command=command,
        args=args,
        env={"TRIMEM_HOME": str(home), "TRIMEM_DB_PATH": str(home / "stdio.db"), **env},
    )


@pytest.fixture
async def stdio_client_session(tmp_path: Path) -> AsyncIterator[Client]:
    """A client connected to a fresh ``trimem serve`` through the legacy ``initialize`` handshake."""
    with (tmp_path / "server.log").open("w") as errlog:
        async with Client(stdio_client(server_parameters(tmp_path), errlog=errlog), mode="legacy") as client:
            yield client
    log = (tmp_path / "server.log").read_text()
    assert "Traceback" not in log, log


async def test_stdio_end_to_end(stdio_client_session: Client) -> None:
    client = stdio_client_session
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == set(TOOLS)
    assert tools["delete_memory"].annotations.destructive_hint is True
    assert tools["search_memory"].annotations.read_only_hint is True
    assert tools["search_memory"].input_schema["properties"]["top_k"]["maximum"] == 100

    ana = (await call(client, "add_memory", text="Ana moved to Lisbon in 2023"))["results"][0]
    await call(client, "add_memory", text="Ana's sister Marta lives in Madrid", metadata={"topic": "family"})
    bob = (await call(client, "add_memory", text="Bob moved to Berlin last spring", user_id="bob"))["results"][0]

    hits = (await call(client, "search_memory", query="Where does Ana live?"))["results"]
    assert hits and hits[0]["id"] == ana["id"]
    assert {hit["text"] for hit in hits} <= {"Ana moved to Lisbon in 2023", "Ana's sister Marta lives in Madrid"}
    bob_hits = (await call(client, "search_memory", query="Where does Bob live?", user_id="bob"))["results"]
    assert [hit["id"] for hit in bob_hits] == [bob["id"]]  # his scope's alone
    assert (await call(client, "search_memory", query="Where does Ana live?", user_id="bob"))["results"] == []

    explained = await call(client, "explain_search", query="Marta in Madrid", top_k=1, filters={"topic": "family"})
    assert explained["results"][0]["text"] == "Ana's sister Marta lives in Madrid"
    assert "madrid" in explained["analysis"]["entities"]
    assert explained["results"][0]["entity_match"]["query_entity"] in explained["analysis"]["entities"]
    assert explained["results"][0]["keyword_source"] == "own"
    assert [(d["text"], d["reason"]) for d in explained["dropped"]] == [("Ana moved to Lisbon in 2023", "filtered")]
    assert explained["dropped_total"] == 1

    # Nothing relevant: no memory, said plainly; explain_search shows why and what it withheld.
    nothing = await client.call_tool("search_memory", {"query": "What is John's mortgage rate?"})
    assert not nothing.is_error and nothing.structured_content == {"results": []}
    assert nothing.content[0].text == "No stored memory is relevant to this query."
    judged = await call(client, "explain_search", query="What is John's mortgage rate?")
    assert judged["results"] == [] and judged["relevance"]["answerable"] is False
    assert judged["relevance"]["unknown_names"] is True and list(judged["relevance"]["names"]) == ["john"]
    assert (judged["relevance"]["best_score"] or 0.0) < judged["relevance"]["bar"] == 0.02  # search.min_score
    assert {hit["text"] for hit in judged["withheld"]} <= {"Ana moved to Lisbon in 2023",
                                                          "Ana's sister Marta lives in Madrid"}

    await call(client, "update_memory", memory_id=ana["id"], text="Ana moved to Porto in 2025")
    await call(client, "delete_memory", memory_id=ana["id"])
    events = (await call(client, "memory_history", memory_id=ana["id"]))["events"]
    assert [(e["event"], e.get("new_text")) for e in events] == [
        ("ADD", "Ana moved to Lisbon in 2023"), ("UPDATE", "Ana moved to Porto in 2025"), ("DELETE", None)
    ]

    for tool, arguments, message in [
        ("add_memory", {"text": ""}, "at least 1 character"),
        ("search_memory", {"query": "x", "top_k": 0}, "top_k must be between 1 and 100, got 0"),
        ("search_memory", {"query": "x", "threshold": 1.5}, "less than or equal to 1"),
        ("get_memory", {"memory_id": ana["id"]}, "not found"),
        ("search_memory", {"query": "x", "filters": {"OR": []}}, "filters"),
        ("add_memory", {"text": "x", "expiration_date": "2026-99-99"}, "not a real calendar date"),
    ]:
        assert message in await fail(client, tool, **arguments)
    remaining = (await call(client, "list_memories"))["memories"]
    assert [m["text"] for m in remaining] == ["Ana's sister Marta lives in Madrid"]


async def test_the_log_also_goes_to_the_configured_file(tmp_path: Path) -> None:
    """Claude Code keeps no server's stderr: ``server.log_file`` is where a user reads trimem's log."""
    log_file = tmp_path / "logs" / "server.log"
    with (tmp_path / "stderr.log").open("w") as errlog:
        parameters = server_parameters(tmp_path, TRIMEM_LOG_FILE=str(log_file))
        async with Client(stdio_client(parameters, errlog=errlog)) as client:
            await call(client, "search_memory", query="tea")
    logged = log_file.read_text()
    assert "INFO mcp_server.tools.state: trimem serving" in logged
    assert logged in (tmp_path / "stderr.log").read_text()  # the same lines, on stderr too


def test_python_m_mcp_server_help() -> None:
    """``python -m mcp_server`` is the same command line, without loading any model."""
    result = subprocess.run(
        [sys.executable, "-m", "mcp_server", "serve", "--help"], capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0 and "--transport" in result.stdout


def test_importing_the_server_loads_no_model() -> None:
    code = (
        "import sys, mcp_server.tools.server, mcp_server.cli; "
        "print(sorted(m for m in ('torch', 'spacy', 'sentence_transformers') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert result.stdout.strip() == "[]", result.stderr
