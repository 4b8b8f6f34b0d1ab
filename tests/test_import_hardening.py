"""Import, peer files and history under hostile or unlucky input: ids never mix two memories'
histories, every bad record is one clear line naming the file, histories must be ones trimem
could have recorded, a restore is recorded as RESTORE, and Ctrl-C keeps what was written."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import pytest
from mcp import Client

from mcp_server.server import build_server
from store import Config, Engine, InvalidArgument, connection
from store.transfer import FORMAT

HEADER = {"format": FORMAT, "format_version": 1}


def write_export(path: Path, *lines: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in (HEADER, *lines)))
    return path


# --- 1. an id keeps one memory's history ---------------------------------------------------


def test_an_import_never_reuses_the_id_of_a_deleted_memory(engine: Engine, tmp_path: Path) -> None:
    gone = engine.add("Ana likes green tea", user_id="ana")[0].memory
    engine.delete(gone.id, user_id="ana")
    path = write_export(tmp_path / "bob.jsonl", {"id": gone.id, "text": "Bob likes coffee", "user_id": "bob"})
    report = engine.import_memories(path)
    assert (report.imported, report.skipped_same_id) == (0, 1)
    assert engine.list(user_id="bob") == []
    restored = engine.restore(gone.id, user_id="ana")
    assert (restored.id, restored.text) == (gone.id, "Ana likes green tea")
    assert [event.event for event in engine.history(gone.id, user_id="ana")] == ["ADD", "DELETE", "RESTORE"]
    assert engine.check() == []


def test_restore_refuses_an_id_that_another_scope_holds(engine: Engine, db_path: Path, tmp_path: Path) -> None:
    """A database in which an import gave a deleted memory's id to another user (as trimem
    did before ids with history counted as taken): restore says so instead of crashing."""
    engine.import_memories(write_export(tmp_path / "bob.jsonl", {"id": "m-1", "text": "Bob likes coffee",
                                                                 "user_id": "bob"}))
    conn = apsw.Connection(str(db_path))
    conn.execute("INSERT INTO history(memory_id, event, old_text, new_text, user_id, created_at) VALUES "
                 "('m-1', 'ADD', NULL, 'Ana likes tea', 'ana', '2024-01-01T00:00:00.000000+00:00'), "
                 "('m-1', 'DELETE', 'Ana likes tea', NULL, 'ana', '2024-01-02T00:00:00.000000+00:00')")
    conn.close()
    with pytest.raises(InvalidArgument, match="^memory 'm-1' cannot be restored: its id now belongs to a memory "
                                              "of another scope. Its text is in its history; add it again"):
        engine.restore("m-1", user_id="ana")
    assert engine.get("m-1", user_id="bob").text == "Bob likes coffee"
    assert engine.list(user_id="ana") == [] and engine.check() == []


# --- 5. RESTORE in history, and the migration that allows it ------------------------------------


def old_schema_database(path: Path) -> None:
    """A database as trimem of schema version 2 made it (history allows ADD / UPDATE / DELETE),
    with a deleted memory's history in it."""
    conn = apsw.Connection(str(path))
    connection.connection_sqlite_vec(conn)
    with connection.write_transaction(conn):
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version VALUES (2)")
        for migration in connection.MIGRATIONS[:2]:
            migration(conn, 384)
        conn.execute("INSERT INTO meta VALUES ('embedding_model', 'all-MiniLM-L6-v2'), ('embedding_dimension', '384')")
        conn.execute(
            "INSERT INTO history(memory_id, event, old_text, new_text, old_metadata, new_metadata, user_id, "
            "created_at) VALUES "
            "('m-1', 'ADD', NULL, 'Ana likes tea', NULL, '{\"mood\": \"calm\"}', 'ana', '2024-01-01T00:00:00.000000+00:00'), "
            "('m-1', 'UPDATE', 'Ana likes tea', 'Ana likes green tea', '{\"mood\": \"calm\"}', '{}', 'ana', "
            "'2024-01-02T00:00:00.000000+00:00'), "
            "('m-1', 'DELETE', 'Ana likes green tea', NULL, '{}', NULL, 'ana', '2024-01-03T00:00:00.000000+00:00')"
        )
    with pytest.raises(apsw.ConstraintError):  # what the old CHECK says to a restore
        conn.execute("INSERT INTO history(memory_id, event, created_at) VALUES ('m-1', 'RESTORE', 'now')")
    conn.close()


def history_rows(path: Path) -> list[tuple[Any, ...]]:
    conn = apsw.Connection(str(path))
    try:
        return conn.execute("SELECT * FROM history ORDER BY id").fetchall()
    finally:
        conn.close()


def test_the_migration_keeps_every_history_row_and_allows_restore(
    engine_factory: Callable[[Config], Engine], config: Config, db_path: Path
) -> None:
    old_schema_database(db_path)
    before = history_rows(db_path)
    with engine_factory(config) as engine:
        assert history_rows(db_path) == before
        restored = engine.restore("m-1", user_id="ana")
        assert restored.text == "Ana likes green tea" and restored.created_at == "2024-01-01T00:00:00.000000+00:00"
        assert [event.event for event in engine.history("m-1", user_id="ana")] == ["ADD", "UPDATE", "DELETE",
                                                                                  "RESTORE"]
        assert engine.check() == []
    conn = apsw.Connection(str(db_path))
    assert conn.execute("SELECT max(version) FROM schema_version").fetchone() == (connection.SCHEMA_VERSION,)
    assert conn.execute("SELECT name FROM sqlite_master WHERE tbl_name = 'history' AND type = 'index'").fetchall() == [
        ("history_memory",)]
    with pytest.raises(apsw.ConstraintError):  # the CHECK is widened, not dropped
        conn.execute("INSERT INTO history(memory_id, event, created_at) VALUES ('m-1', 'MOVE', 'now')")
    conn.close()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_memory_history_shows_a_restore_as_restore(
    engine: Engine, config: Config, engine_factory: Callable[[Config], Engine]
) -> None:
    memory = engine.add("Ana is allergic to peanuts", user_id="ana")[0].memory
    engine.delete(memory.id, user_id="ana")
    engine.restore(memory.id, user_id="ana")
    async with Client(build_server(config, open_engine=engine_factory)) as client:
        [tool] = [tool for tool in (await client.list_tools()).tools if tool.name == "memory_history"]
        assert "RESTORE" in json.dumps(tool.output_schema) and "restored" in tool.description
        result = await client.call_tool("memory_history", {"memory_id": memory.id, "user_id": "ana"})
    assert not result.is_error, result.content[0].text
    events = result.structured_content["events"]
    assert [event["event"] for event in events] == ["ADD", "DELETE", "RESTORE"]
    assert events[-1]["new_text"] == "Ana is allergic to peanuts"
