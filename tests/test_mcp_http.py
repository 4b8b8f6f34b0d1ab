"""``trimem serve --transport http``: streamable HTTP on loopback, for clients that speak it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from test_mcp import TOOLS  # pytest puts tests/ on sys.path (prepend import mode)

from bench.load import free_port, wait_for
from store import Config


@contextmanager
def served(config: Config, log: Path, monkeypatch: pytest.MonkeyPatch, *options: str, stdout: Path | None = None,
           **settings: Any) -> Iterator[str]:
    """``trimem serve --transport http OPTIONS`` in a process of its own on the test's store, with
    settings as ``TRIMEM_<KEY>`` variables; stderr (and stdout, unless ``stdout`` names a file of
    its own) goes to ``log``. Yields the /mcp URL."""
    port = free_port()
    monkeypatch.setenv("TRIMEM_DB_PATH", config.store.db_path)
    monkeypatch.setenv("TRIMEM_DATABASE_URL", config.store.database_url)
    for key, value in settings.items():
        monkeypatch.setenv(f"TRIMEM_{key.upper()}", str(value))
    with log.open("a") as errors, (stdout or log).open("a") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "mcp_server", "serve", "--transport", "http", *options, "--port", str(port)],
            stderr=errors, stdout=out,
        )
        try:
            wait_for(port)
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            process.terminate()
            process.wait(timeout=30)


@pytest.fixture
def http_server(config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``trimem serve --transport http`` in a process of its own, on the test's store."""
    with served(config, tmp_path / "server.log", monkeypatch, stdout=tmp_path / "stdout.txt") as url:
        yield url


def test_streamable_http_serves_the_tools(http_server: str) -> None:
    async def scenario() -> None:
        async with Client(http_server) as client:
            assert {tool.name for tool in (await client.list_tools()).tools} == set(TOOLS)
            result = await client.call_tool("get_memory", {"memory_id": "no-such-id"})
            assert result.is_error and "not found" in result.content[0].text
            await client.call_tool("add_memory", {"text": "Ana is allergic to penicillin"})
            found = await client.call_tool("search_memory", {"query": "penicillin"})
            assert [hit["text"] for hit in found.structured_content["results"]] == ["Ana is allergic to penicillin"]
            nothing = await client.call_tool("search_memory", {"query": "What is John's mortgage rate?"})
            assert nothing.structured_content == {"results": []}
            assert nothing.content[0].text == "No stored memory is relevant to this query."

    anyio.run(scenario)


def test_http_is_quiet_one_info_line_and_one_access_line_per_call(http_server: str, config: Config, tmp_path: Path) -> None:
    async def scenario() -> None:
        async with Client(http_server) as client:
            await client.call_tool("list_memories", {})
            await client.call_tool("get_memory", {"memory_id": "no-such-id"})

    anyio.run(scenario)
    assert (tmp_path / "stdout.txt").read_text() == ""  # no access-log lines
    lines = [line for line in (tmp_path / "server.log").read_text().splitlines() if line.strip()]
    access = [line for line in lines if " INFO trimem.access: " in line]  # one line per call (docs/service.md)
    assert [line.split(" tool=")[1].split()[0] for line in access] == ["list_memories", "get_memory"]
    # export: once per install
    [info] = [line for line in lines if " INFO " in line and "exporting" not in line and line not in access]
    assert f"trimem serving {config.location} for user_id='default'; models: " in info
    assert not [line for line in lines if "WARNING" in line or "ERROR" in line or "%" in line], lines


def test_twenty_concurrent_sessions_all_succeed_and_every_acknowledged_write_is_stored(
    http_server: str, tmp_path: Path
) -> None:
    """20 sessions at once in one server, each making 20 calls (adds, searches, lists, gets and
    updates interleaved): every call succeeds, and every add it acknowledged is stored once."""
    sessions, calls = 20, 20
    failures: list[str] = []
    acknowledged: dict[str, str] = {}

    async def session(number: int) -> None:
        user = f"user-{number % 4}"  # several sessions share each user, so their writes contend
        async with Client(http_server) as client:
            own: list[str] = []
            for call in range(calls):
                kind = call % 5
                if kind in (0, 1):
                    text = f"Session {number} note {call}: the courier comes on day {call + number}"
                    name, arguments = "add_memory", {"text": text, "user_id": user}
                elif kind == 2:
                    name, arguments = "search_memory", {"query": f"courier day {call}", "user_id": user}
                elif kind == 3:
                    name, arguments = "list_memories", {"user_id": user, "limit": 5}
                elif own:
                    name, arguments = "update_memory", {
                        "memory_id": own[-1], "user_id": user, "metadata": {"checked": call}}
                else:
                    name, arguments = "get_memory", {"memory_id": "no-such-id", "user_id": user}
                result = await client.call_tool(name, arguments)
                expected_error = name == "get_memory"
                if result.is_error != expected_error:
                    failures.append(f"{name} in session {number}: {result.content[0].text}")
                elif name == "add_memory":
                    memory = result.structured_content["results"][0]
                    own.append(memory["id"])
                    acknowledged[memory["id"]] = arguments["text"]

    async def scenario() -> None:
        async with anyio.create_task_group() as group:
            for number in range(sessions):
                group.start_soon(session, number)

    anyio.run(scenario)
    assert failures == []
    assert len(acknowledged) == sessions * 8

    async def stored() -> dict[str, str]:
        found: dict[str, str] = {}
        async with Client(http_server) as client:
            for user in range(4):
                page = await client.call_tool("list_memories", {"user_id": f"user-{user}", "limit": 100})
                found.update({m["id"]: m["text"] for m in page.structured_content["memories"]})
        return found

    assert anyio.run(stored) == acknowledged
    assert "Traceback" not in (tmp_path / "server.log").read_text()
