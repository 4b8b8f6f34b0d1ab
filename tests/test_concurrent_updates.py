"""Concurrent writes to one memory, as a product's agents make them: many sessions on two
server processes over one store, every acknowledged update counted afterwards.

Each update merges a key of its own into the memory's metadata. Every acknowledged one must
leave its key, and history must record exactly the acknowledged ones: an update that read
the row before another committed must not overwrite it (PostgreSQL's read committed allows
exactly that without row locks).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import Client
from test_mcp_http import served  # pytest puts tests/ on sys.path (prepend import mode)

from store import Config, Engine

UPDATES = 80
SESSIONS = 8
"""Sessions per server; each sends its share of the updates one after another."""


def test_concurrent_metadata_merges_on_two_servers_all_count(
    config: Config, engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (added,) = engine.add("The team retro moved to Thursdays", user_id="alice")
    memory_id = added.memory.id
    acknowledged: list[str] = []
    refused: list[str] = []

    async def session(url: str, keys: list[str]) -> None:
        async with Client(url) as client:
            for key in keys:
                result = await client.call_tool("update_memory", {
                    "memory_id": memory_id, "user_id": "alice", "metadata": {key: int(key[1:])}})
                (refused if result.is_error else acknowledged).append(key)

    async def scenario(urls: list[str]) -> None:
        keys = [f"k{i}" for i in range(UPDATES)]
        shares = [keys[i::SESSIONS * len(urls)] for i in range(SESSIONS * len(urls))]
        async with anyio.create_task_group() as group:
            for number, share in enumerate(shares):
                group.start_soon(session, urls[number % len(urls)], share)

    with served(config, tmp_path / "one.log", monkeypatch) as first, \
            served(config, tmp_path / "two.log", monkeypatch) as second:
        anyio.run(scenario, [first, second])

    # A refusal (a write conflict asking to send it again) is allowed; a lost update is not.
    assert len(acknowledged) + len(refused) == UPDATES
    assert len(acknowledged) >= UPDATES // 2
    stored = engine.get(memory_id, user_id="alice").metadata
    assert sorted(stored) == sorted(acknowledged), f"{len(acknowledged) - len(stored)} acknowledged updates lost"
    updates = [event for event in engine.history(memory_id, user_id="alice") if event.event == "UPDATE"]
    assert len(updates) == len(acknowledged)


def test_concurrent_deletes_of_one_memory_record_one_deletion(config: Config, engine: Engine) -> None:
    """Two writers deleting the same memory: one deletes it, the other is told it is gone, and
    history records one DELETE (not one per writer)."""
    (added,) = engine.add("Parking is on level 3 of the north garage", user_id="alice")
    memory_id = added.memory.id
    outcomes: list[str] = []

    def delete() -> None:
        try:
            engine.delete(memory_id, user_id="alice")
            outcomes.append("deleted")
        except Exception as exc:  # noqa: BLE001 - the outcome is what the test counts
            outcomes.append(type(exc).__name__)

    async def scenario() -> None:
        async with anyio.create_task_group() as group:
            for _ in range(4):
                group.start_soon(anyio.to_thread.run_sync, delete)

    anyio.run(scenario)
    assert sorted(outcomes) == ["NotFound"] * 3 + ["deleted"]
    deletions = [event for event in engine.history(memory_id, user_id="alice") if event.event == "DELETE"]
    assert len(deletions) == 1
    assert engine.check() == []  # on PostgreSQL, her keyword counts lost the memory once
