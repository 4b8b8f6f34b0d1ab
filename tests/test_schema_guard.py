"""A trimem process left running while another migrates its SQLite file (an MCP server that Claude
Desktop keeps open through an upgrade) may read on, but none of its writes is kept once the schema
has moved past what its code knows: it fails loudly, as on PostgreSQL, instead of storing rows the
new schema cannot find (migration m013, ``store.sqlite.migrations.schema_guard_sql``)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path

import apsw
import numpy as np
import pytest
from sqlite_files import execute

from store import Config, Engine, SchemaMismatch
from store.backend import NewMemory
from store.scope import Scope
from store.sqlite import connection, migrations
from store.sqlite.statements import SQLiteTransaction

pytestmark = pytest.mark.only_on("sqlite")

GUARDED = ("memories", "memory_terms", "entities", "memory_entities", "tokens", "meta")
"""The tables migration m013 guards: those a write of trimem begins with."""

NEWER_SCHEMA = "^this database was upgraded to schema version {} by a newer trimem while this one"


def older_trimem(path: Path) -> apsw.Connection:
    """A connection as a trimem from before the guard opens the file: every setting but the
    guard's function."""
    conn = apsw.Connection(str(path))
    for setting in connection.CONNECTION_SETTINGS:
        if setting is not connection.connection_schema_guard:
            setting(conn)
    return conn


def new_memory(text: str, dimension: int) -> NewMemory:
    """A memory of Ana's as the engine hands it to a transaction (its vector any unit vector)."""
    vector = np.ones(dimension, dtype=np.float32) / np.sqrt(dimension)
    return NewMemory(
        id=hashlib.md5(text.encode()).hexdigest(), text=text, text_lemmatized=text.lower(),
        hash=hashlib.sha256(text.encode()).hexdigest(), scope=Scope("ana"), actor_id=None, role=None, metadata={},
        created_at="2026-01-01T00:00:00.000000+00:00", updated_at="2026-01-01T00:00:00.000000+00:00",
        expiration_date=None, embedding=vector,
    )


def add_as_older_trimem(conn: apsw.Connection, text: str, dimension: int) -> None:
    """An add's memory row, postings and vector, as the engine's transaction writes them."""
    with connection.write_transaction(conn):
        SQLiteTransaction(conn).insert_memories([new_memory(text, dimension)])


def back_to_schema_12(path: Path) -> None:
    """The file as trimem of schema version 12 left it: no guard triggers."""
    conn = older_trimem(path)
    with connection.write_transaction(conn):
        for (trigger,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE "
                                       "'%\\_schema\\_guard\\_%' ESCAPE '\\'").fetchall():
            conn.execute(f"DROP TRIGGER {trigger}")
        conn.execute("UPDATE schema_version SET version = 12")
    conn.close()


def texts(engine: Engine) -> list[str]:
    return sorted(memory.text for memory in engine.list(user_id="ana"))


@pytest.fixture
def migrated(engine_factory: Callable[[Config], Engine], config: Config, db_path: Path) -> Iterator[Engine]:
    """A file of schema 12 holding one memory, and today's engine, which migrated it on opening."""
    with engine_factory(config) as engine:
        engine.add("Ana moved to Lisbon in 2023", user_id="ana")
    back_to_schema_12(db_path)
    with engine_factory(config) as engine:
        yield engine


def test_an_older_trimems_add_after_the_migration_fails_and_keeps_nothing(
    engine_factory: Callable[[Config], Engine], config: Config, db_path: Path
) -> None:
    """The upgrade of the finding: an older server adds before and after today's trimem migrates
    the file. Its add before is kept; its add after fails and leaves no row, posting or vector."""
    with engine_factory(config) as engine:
        engine.add("Ana moved to Lisbon in 2023", user_id="ana")
        dimension = engine.embedder.dimension
    back_to_schema_12(db_path)
    older = older_trimem(db_path)
    add_as_older_trimem(older, "Ana kayaked the Douro before the upgrade", dimension)

    with engine_factory(config) as engine:  # the upgrade: today's trimem opens and migrates the file
        before = engine.status()["counts"]
        with pytest.raises(apsw.SQLError, match="no such function: trimem_schema_check"):
            add_as_older_trimem(older, "Ana kayaked the Douro after the upgrade", dimension)
        assert not older.in_transaction
        assert engine.status()["counts"] == before
        assert engine.check() == []
        assert texts(engine) == ["Ana kayaked the Douro before the upgrade", "Ana moved to Lisbon in 2023"]
        # its reads go on
        assert older.execute("SELECT count(*) FROM memories").fetchone() == (2,)
    older.close()


@pytest.mark.parametrize("statement", [
    "UPDATE memories SET text = 'Ana moved to Porto'",
    "DELETE FROM memories",
    "INSERT INTO memory_terms(user_id, term, memory_rowid, frequency) SELECT user_id, 'porto', rowid, 1 FROM memories",
    "INSERT INTO entities(user_id, text, normalized, entity_type) VALUES ('ana', 'Porto', 'porto', 'GPE')",
    "DELETE FROM memory_entities",
    "INSERT INTO tokens(name, prefix, hash, created_at) VALUES ('laptop', 'tm_', 'h', 'now')",
    "INSERT INTO meta(key, value) VALUES ('analysis_version', '9') ON CONFLICT(key) DO UPDATE SET value = '9'",
])
def test_every_write_an_older_trimem_begins_with_is_refused(migrated: Engine, db_path: Path, statement: str) -> None:
    before = migrated.status()["counts"]
    older = older_trimem(db_path)
    with pytest.raises(apsw.SQLError, match="no such function: trimem_schema_check"):
        older.execute(statement)
    older.close()
    assert migrated.status()["counts"] == before and migrated.check() == []


def test_the_migration_guards_each_write_of_each_table(migrated: Engine) -> None:
    triggers = {row[0] for row in execute(migrated, "SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    assert {f"{table}_schema_guard_{event}" for table in GUARDED for event in ("insert", "update", "delete")} <= triggers
    assert execute(migrated, "SELECT version FROM schema_version") == [(migrations.SCHEMA_VERSION,)]


def test_a_trimem_older_than_the_guard_it_meets_fails_with_its_own_message(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Code that claims schema 12 against triggers of schema 13: each write fails with the plain
    message and keeps nothing; reads go on; today's code writes again."""
    engine.add("Ana moved to Lisbon in 2023", user_id="ana")
    before = engine.status()["counts"]
    monkeypatch.setattr(migrations, "SCHEMA_VERSION", 12)
    with pytest.raises(SchemaMismatch, match=NEWER_SCHEMA.format(13) + r" \(schema version 12\).*restart this server"):
        engine.add("Ana kayaked the Douro in June", user_id="ana")
    with pytest.raises(SchemaMismatch, match=NEWER_SCHEMA.format(13)):
        engine.delete_all(user_id="ana")
    assert engine.status()["counts"] == before
    assert [hit.memory.text for hit in engine.search("Where does Ana live?", user_id="ana")] == [
        "Ana moved to Lisbon in 2023"]
    monkeypatch.undo()
    assert engine.add("Ana kayaked the Douro in June", user_id="ana")[0].event == "ADD"
    assert engine.check() == []


def test_a_later_migration_that_raises_the_guard_refuses_this_trimems_writes(engine: Engine) -> None:
    """A newer trimem's migration makes the guard triggers again with its own number: this
    process, still running, is refused with trimem's message instead of writing the old way."""
    engine.add("Ana moved to Lisbon in 2023", user_id="ana")
    newer = migrations.SCHEMA_VERSION + 1
    execute(engine, migrations.schema_guard_sql(newer, GUARDED))
    with pytest.raises(SchemaMismatch, match=NEWER_SCHEMA.format(newer)):
        engine.add("Ana kayaked the Douro in June", user_id="ana")
    assert texts(engine) == ["Ana moved to Lisbon in 2023"]


def test_the_sqlite_shell_reads_the_file_and_its_writes_are_refused(engine: Engine, db_path: Path) -> None:
    """The ``sqlite3`` command-line tool registers no trimem function (docs/schema.md says so)."""
    import sqlite3

    engine.add("Ana moved to Lisbon in 2023", user_id="ana")
    shell = sqlite3.connect(db_path)
    try:
        assert shell.execute("SELECT text FROM memories").fetchall() == [("Ana moved to Lisbon in 2023",)]
        with pytest.raises(sqlite3.OperationalError, match="no such function: trimem_schema_check"):
            shell.execute("DELETE FROM memories")
    finally:
        shell.close()
