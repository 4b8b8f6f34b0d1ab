"""A trimem server left running while a newer one migrates the PostgreSQL database may read on,
but none of its writes is kept once the schema has moved past what its code knows: it fails
loudly instead of storing rows the new schema cannot find (migration m012,
``store.postgres.schema.schema_guard_sql``). Before, only one such write was refused, by the
chance of a column without a default (m006)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest
from pgvector.psycopg import register_vector
from test_schema_guard import new_memory  # pytest puts tests/ on sys.path (prepend import mode)

from store import Config, Engine, SchemaMismatch
from store.postgres import connection, schema
from store.postgres.statements import PostgresTransaction

pytestmark = pytest.mark.only_on("postgres")

OLDER_TRIMEM = "^this database was upgraded by a newer trimem: restart or upgrade the trimem that writes to it"
NEWER_SCHEMA = (r"^this database was upgraded to schema version {} by a newer trimem while this one "
                r"\(schema version {}\) had it open, so nothing was written; restart this server")


@pytest.fixture
def older_trimem(config: Config) -> Iterator[psycopg.Connection]:
    """A connection as a trimem from before the guard opens it (or ``psql``): pgvector's types,
    but no schema named for the session."""
    with psycopg.connect(config.store.database_url, autocommit=True) as conn:
        register_vector(conn)
        yield conn


def texts(engine: Engine) -> list[str]:
    return sorted(memory.text for memory in engine.list(user_id="ana"))


def test_an_older_trimems_add_fails_keeps_nothing_and_its_reads_go_on(
    engine: Engine, older_trimem: psycopg.Connection
) -> None:
    """An add written the way the engine writes one (rows and postings each in one COPY), over a
    session that names no schema."""
    engine.add("Ana moved to Lisbon in 2023", user_id="ana")
    before = engine.status()["counts"]
    with pytest.raises(psycopg.Error, match=OLDER_TRIMEM) as refused, older_trimem.transaction():
        transaction = PostgresTransaction(older_trimem)
        transaction.insert_memories([new_memory("Ana kayaked the Douro in June", engine.embedder.dimension)])
        transaction.write_keyword_counts()
    assert refused.value.sqlstate == schema.SCHEMA_GUARD_STATE
    assert engine.status()["counts"] == before
    assert engine.check() == []
    assert texts(engine) == ["Ana moved to Lisbon in 2023"]
    assert older_trimem.execute("SELECT text FROM memories").fetchall() == [("Ana moved to Lisbon in 2023",)]


@pytest.mark.parametrize("statement", [
    "UPDATE memories SET text = 'Ana moved to Porto'",
    "DELETE FROM memories",
    ("INSERT INTO memory_terms(user_id, term, memory_rowid, frequency, length) "
    "SELECT user_id, 'porto', rowid, 1, terms FROM memories"),
    "DELETE FROM entities",
    "DELETE FROM memory_entities",
    "DELETE FROM history",
    "UPDATE keyword_counts SET memories = memories + 1",
    "INSERT INTO tokens(name, prefix, hash, created_at) VALUES ('laptop', 'tm_', 'h', 'now')",
    "INSERT INTO meta(key, value) VALUES ('analysis_version', '9') ON CONFLICT(key) DO UPDATE SET value = '9'",
    "TRUNCATE memories CASCADE",
])
def test_every_table_a_write_touches_refuses_an_older_trimem(
    engine: Engine, older_trimem: psycopg.Connection, statement: str
) -> None:
    engine.add("Ana moved to Lisbon in 2023", user_id="ana")
    before = engine.status()["counts"]
    with pytest.raises(psycopg.Error, match=OLDER_TRIMEM):
        older_trimem.execute(statement)
    assert engine.status()["counts"] == before and engine.check() == []


def test_every_table_a_write_touches_is_guarded(engine: Engine, older_trimem: psycopg.Connection) -> None:
    """No table of the schema but ``schema_version`` (written by migrations alone) is left out."""
    tables = {row[0] for row in older_trimem.execute(
        "SELECT relname FROM pg_class WHERE relkind = 'r' AND relnamespace = current_schema()::regnamespace")}
    guarded = {row[0] for row in older_trimem.execute(
        "SELECT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE t.tgname LIKE '%schema_guard'")}
    assert tables - guarded == {"schema_version"}


def test_a_trimem_older_than_the_guard_it_meets_fails_with_its_own_message(
    config: Config, engine_factory: Callable[[Config], Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Code that claims the schema before the current one, against the current triggers: its
    writes fail as ``SchemaMismatch``, naming both versions, and keep nothing; its reads go on."""
    with engine_factory(config) as engine:
        engine.add("Ana moved to Lisbon in 2023", user_id="ana")
    monkeypatch.setattr(schema, "SCHEMA_VERSION", schema.SCHEMA_VERSION - 1)
    with engine_factory(config) as older:
        before = older.status()["counts"]
        message = NEWER_SCHEMA.format(schema.SCHEMA_VERSION + 1, schema.SCHEMA_VERSION)
        with pytest.raises(SchemaMismatch, match=message):
            older.add("Ana kayaked the Douro in June", user_id="ana")
        with pytest.raises(SchemaMismatch, match=message):
            older.delete_all(user_id="ana")
        assert older.status()["counts"] == before
        assert [hit.memory.text for hit in older.search("Where does Ana live?", user_id="ana")] == [
            "Ana moved to Lisbon in 2023"]


def test_a_later_migration_that_raises_the_guard_refuses_this_trimems_writes(engine: Engine, config: Config) -> None:
    """A newer trimem's migration makes the guard triggers again with its own number: this
    server, still running, is refused with trimem's message instead of writing the old way."""
    engine.add("Ana moved to Lisbon in 2023", user_id="ana")
    newer = schema.SCHEMA_VERSION + 1
    with connection.connect(config.store.database_url, "the test database") as conn:
        conn.execute(schema.schema_guard_sql(newer))
    with pytest.raises(SchemaMismatch, match=NEWER_SCHEMA.format(newer, schema.SCHEMA_VERSION)):
        engine.add("Ana kayaked the Douro in June", user_id="ana")
    assert texts(engine) == ["Ana moved to Lisbon in 2023"]
