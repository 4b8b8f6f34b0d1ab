"""Import, peer files and history under hostile or unlucky input: ids never mix two memories'
histories, every bad record is one clear line naming the file, histories must be ones trimem
could have recorded, a restore is recorded as RESTORE, and Ctrl-C keeps what was written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import pytest
from mcp import Client

from mcp_server.tools.server import build_server
from store import Config, Engine, InvalidArgument
from store.exchange.transfer import FORMAT, BadLine
from store.sqlite import connection, migrations

HEADER = {"format": FORMAT, "format_version": 1}
TRIMEM = Path(sys.executable).with_name("trimem")


def write_export(path: Path, *lines: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in (HEADER, *lines)))
    return path


def trimem(db_path: Path, *args: str, **popen: Any) -> subprocess.CompletedProcess[str]:
    """``trimem --db DB ARGS`` as a real process, with this checkout's code."""
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    return subprocess.run([str(TRIMEM), "--log-level", "WARNING", "--db", str(db_path), *args], env=environment,
                          capture_output=True, text=True, timeout=300, **popen, check=False)


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The failed command's message, checked to be one line and no traceback."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if not line.startswith("created new database")]
    assert len(lines) == 1, result.stderr
    return lines[0]


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


@pytest.mark.only_on("sqlite")
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


# --- 3. hostile peer files ------------------------------------------------------------------


def memory_service_file(path: Path, sql: str) -> Path:
    conn = apsw.Connection(str(path))
    conn.execute(sql)
    conn.close()
    return path


SERVICE_ROW = ("INSERT INTO memories(content_hash, content, created_at) VALUES ('h1', 'Deploy on Fridays', 1735689600.0), "
               "('h2', 'Ana prefers Postgres', {created_at})")
HOSTILE_PEER_FILES = [
    ("view.db", "mcp-memory-service",
     ("CREATE TABLE notes (content TEXT); CREATE VIEW memories AS SELECT content FROM notes; "
     "INSERT INTO notes VALUES ('Deploy on Fridays')"),
     "'s memories is a view, not the table of rows that format keeps; point at its own database file"),
    ("without-rowid.db", "mcp-memory-service",
     ("CREATE TABLE memories (content_hash TEXT PRIMARY KEY, content TEXT) WITHOUT ROWID; "
     "INSERT INTO memories VALUES ('h1', 'Deploy on Fridays')"),
     ("'s memories is a WITHOUT ROWID table, not the table of rows that format keeps; point at its own database "
     "file")),
    ("far-future.db", "mcp-memory-service",
     "CREATE TABLE memories (content_hash TEXT, content TEXT, created_at REAL); " + SERVICE_ROW.format(created_at="1e20"),
     ", row 2: created_at 1e+20 is not a time in seconds since 1970 between the years 1 and 9999"),
    ("far-past.db", "mcp-memory-service",
     "CREATE TABLE memories (content_hash TEXT, content TEXT, created_at REAL); " + SERVICE_ROW.format(created_at="-1e13"),
     ", row 2: created_at -10000000000000.0 is not a time in seconds since 1970 between the years 1 and 9999"),
    ("nested.json", "mem0", '{"results": ' + "[" * 100_000,
     " is not Mem0's get_all JSON (nested too deeply); save `memory.get_all(...)` with json.dump"),
]


def hostile_file(tmp_path: Path, name: str, content: str) -> Path:
    """An SQLite database made by ``content`` for a ``.db`` name, else a text file of it."""
    path = tmp_path / name
    if name.endswith(".db"):
        return memory_service_file(path, content)
    path.write_text(content)
    return path


@pytest.mark.parametrize(("name", "source", "content", "message"), HOSTILE_PEER_FILES)
def test_a_hostile_peer_file_is_one_clear_line_naming_it(
    engine: Engine, tmp_path: Path, name: str, source: str, content: str, message: str
) -> None:
    path = hostile_file(tmp_path, name, content)
    with pytest.raises(InvalidArgument) as refused:
        engine.import_memories(path, source=source, user_id="ana")
    assert str(refused.value) == f"{path}{message}"
    assert engine.status()["counts"]["memories"] == 0


@pytest.mark.parametrize(("name", "source", "content", "message"), HOSTILE_PEER_FILES)
def test_trimem_import_of_a_hostile_peer_file_prints_one_line(
    tmp_path: Path, name: str, source: str, content: str, message: str
) -> None:
    path = hostile_file(tmp_path, name, content)
    database = tmp_path / "memories.db"
    result = trimem(database, "import", str(path), "--from", source, "--user-id", "ana")
    assert one_line_error(result) == f"Error: {path}{message}"
    conn = apsw.Connection(str(database))
    assert conn.execute("SELECT count(*) FROM memories").fetchone() == (0,)


# --- 4. histories trimem could have recorded -----------------------------------------------

TEA, GREEN = "Ana likes tea", "Ana likes green tea"
ADD = {"event": "ADD", "new_text": TEA, "new_metadata": {}, "created_at": "2024-01-01T00:00:00Z"}
DELETE = {"event": "DELETE", "old_text": TEA, "old_metadata": {}, "created_at": "2024-01-02T00:00:00Z"}
UPDATE = {"event": "UPDATE", "old_text": TEA, "new_text": GREEN, "old_metadata": {}, "new_metadata": {},
          "created_at": "2024-01-03T00:00:00Z"}


@pytest.mark.parametrize(
    ("text", "metadata", "history", "message"),
    [
        (TEA, {}, [DELETE], "history[0] is DELETE, which cannot come here: a history starts with ADD"),
        (GREEN, {}, [ADD, {**UPDATE, "old_text": "Bob likes cake"}],
         "history[1].old_text 'Bob likes cake' is not 'Ana likes tea', what the event before it left"),
        (GREEN, {}, [ADD, {**UPDATE, "old_metadata": {"mood": "calm"}}],
         "history[1].old_metadata {'mood': 'calm'} is not {}, what the event before it left"),
        (TEA, {}, [ADD, DELETE], "history ends with DELETE, but the line is a stored memory"),
        (TEA, {}, [ADD, {**DELETE, "old_text": "Bob likes cake"}],
         "history[1].old_text 'Bob likes cake' is not 'Ana likes tea', what the event before it left"),
        ("Ana likes coffee", {}, [ADD], "text 'Ana likes coffee' is not 'Ana likes tea', what its history leaves"),
        (TEA, {"mood": "calm"}, [ADD], "metadata {'mood': 'calm'} is not {}, what its history leaves"),
        (TEA, {}, [ADD, ADD], ("history[1] is ADD, which cannot come here: a stored memory can only be updated or "
                              "deleted")),
        (GREEN, {}, [ADD, DELETE, UPDATE], ("history[2] is UPDATE, which cannot come here: a deleted memory can "
                                           "only be restored (or added again)")),
        ("Bob likes cake", {}, [ADD, DELETE, {"event": "RESTORE", "new_text": "Bob likes cake", "new_metadata": {},
                                              "created_at": "2024-01-04T00:00:00Z"}],
         "history[2].new_text 'Bob likes cake' is not 'Ana likes tea', what the DELETE took"),
        (TEA, {}, [ADD, {**ADD, "event": "RESTORE"}], "history[1] is RESTORE, which cannot come here: a stored"),
        (TEA, {}, [{**ADD, "new_text": None}], "history[0] is ADD without new_text, the text it leaves"),
    ],
)
def test_a_history_trimem_could_not_have_recorded_is_refused(
    engine: Engine, tmp_path: Path, text: str, metadata: dict[str, Any], history: list[dict[str, Any]], message: str
) -> None:
    path = write_export(tmp_path / "export.jsonl", {"id": "m-1", "text": text, "user_id": "ana",
                                                    "metadata": metadata, "history": history})
    with pytest.raises(BadLine) as refused:
        engine.import_memories(path)
    assert str(refused.value).startswith(f"{path}, line 2: {message}")
    counts = engine.status()["counts"]
    assert (counts["memories"], counts["history"]) == (0, 0)


@pytest.mark.only_on("sqlite")
def test_every_history_trimem_writes_imports_again(
    engine: Engine, engine_factory: Callable[[Config], Engine], config: Config, db_path: Path, tmp_path: Path
) -> None:
    """Updates of text, of metadata only and of the expiry, deletes and restores (and a restore
    as trimem recorded it before RESTORE, an ADD), exported with history, import as they were."""
    tea = engine.add("Ana likes tea", user_id="ana", metadata={"mood": "calm"})[0].memory
    engine.update(tea.id, text="Ana likes green tea", user_id="ana")
    engine.update(tea.id, metadata={"mood": None, "cups": 2}, user_id="ana")
    engine.update(tea.id, expiration_date="2099-01-01", user_id="ana")
    engine.delete(tea.id, user_id="ana")
    engine.restore(tea.id, user_id="ana")
    engine.update(tea.id, text="Ana likes jasmine tea", metadata={"cups": 3}, user_id="ana", replace_metadata=True)
    bike = engine.add("Bob repairs bicycles", user_id="bob")[0].memory
    engine.delete(bike.id, user_id="bob")
    engine.restore(bike.id, user_id="bob")
    engine.delete(engine.add("Ana used to live in Porto", user_id="ana")[0].memory.id, user_id="ana")
    conn = apsw.Connection(str(db_path))  # the restore of Bob's memory as trimem recorded one before RESTORE
    conn.execute("UPDATE history SET event = 'ADD' WHERE memory_id = ? AND event = 'RESTORE'", (bike.id,))
    conn.close()
    path = tmp_path / "all.jsonl"
    path.write_text("".join(engine.export(history=True)))

    with engine_factory(config.replace("store", db_path=str(tmp_path / "copy.db"))) as copy:
        report = copy.import_memories(path)
        assert (report.imported, report.history_events) == (2, 10)
        for memory_id, user in ((tea.id, "ana"), (bike.id, "bob")):
            assert copy.history(memory_id, user_id=user) == engine.history(memory_id, user_id=user)
            assert copy.get(memory_id, user_id=user) == engine.get(memory_id, user_id=user)
        assert [event.event for event in copy.history(tea.id, user_id="ana")] == [
            "ADD", "UPDATE", "UPDATE", "UPDATE", "DELETE", "RESTORE", "UPDATE"]


# --- 5. RESTORE in history, and the migration that allows it ------------------------------------


def old_schema_database(path: Path) -> None:
    """A database as trimem of schema version 2 made it (history allows ADD / UPDATE / DELETE),
    with a deleted memory's history in it."""
    conn = apsw.Connection(str(path))
    connection.connection_sqlite_vec(conn)
    with connection.write_transaction(conn):
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version VALUES (2)")
        for migration in migrations.MIGRATIONS[:2]:
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


@pytest.mark.only_on("sqlite")
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
    assert conn.execute("SELECT max(version) FROM schema_version").fetchone() == (migrations.SCHEMA_VERSION,)
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


# --- 6. Ctrl-C keeps the chunks written ------------------------------------------------------


def stored_memories(path: Path) -> int:
    """How many memories the file holds now (0 before its schema exists)."""
    if not path.exists():
        return 0
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    conn.set_busy_timeout(10_000)  # the import may be creating the schema, which locks the file a moment
    try:
        return conn.execute("SELECT count(*) FROM memories").fetchone()[0]
    except apsw.SQLError:  # no table yet
        return 0
    finally:
        conn.close()


def test_ctrl_c_during_an_import_says_what_was_kept_and_a_rerun_adds_the_rest(tmp_path: Path) -> None:
    total = 800
    path = write_export(tmp_path / "many.jsonl", *({"text": f"Ana's note {i}: errand {i} was in district {i % 37}",
                                                     "user_id": "ana"} for i in range(total)))
    database = tmp_path / "memories.db"
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    process = subprocess.Popen([str(TRIMEM), "--db", str(database), "import", str(path)], env=environment,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while stored_memories(database) == 0 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=240)
    kept = stored_memories(database)
    assert 0 < kept < total, "the signal should land between the first chunk and the last"
    assert process.returncode == 130, err
    assert "Traceback" not in err and "Aborted" not in err and out == ""
    assert err.splitlines()[-1] == (f"import interrupted: {kept} memories kept ({kept} records read); run the same "
                                    "import again to add the rest: what is stored is skipped")

    again = trimem(database, "import", str(path), "--json")
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert (report["imported"], report["skipped_same_text"]) == (total - kept, kept)
    assert stored_memories(database) == total


# --- 7. whose scope a record goes to ----------------------------------------------------------


def test_import_says_which_records_kept_their_own_user_and_which_took_user_id(tmp_path: Path) -> None:
    path = write_export(tmp_path / "mixed.jsonl",
                        *({"text": f"Bob's fact {i}", "user_id": "bob"} for i in range(3)),
                        {"text": "A planner fact", "agent_id": "planner"},
                        *({"text": f"Unnamed fact {i}"} for i in range(2)))
    database = tmp_path / "memories.db"
    result = trimem(database, "import", str(path), "--user-id", "ana", "--format", "table")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == ("scopes: 4 records named their own user_id, agent_id or run_id and "
                                              "kept it; 2 named none and went to user_id='ana'")
    counts = json.loads(trimem(database, "users", "--json").stdout)["scopes"]
    assert {(scope["user_id"], scope["agent_id"], scope["memories"]) for scope in counts} == {
        ("bob", None, 3), (None, "planner", 1), ("ana", None, 2)}
    report = json.loads(trimem(database, "import", str(path), "--user-id", "ana", "--json").stdout)
    assert (report["own_scope"], report["import_scope"], report["default_scope"]) == (4, 2, {"user_id": "ana"})
    help_text = " ".join(trimem(database, "import", "--help").stdout.split())
    assert "A record that names its own user_id, agent_id or run_id keeps it, whatever --user-id says" in help_text
