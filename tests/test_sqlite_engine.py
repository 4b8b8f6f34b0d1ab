"""What the engine leaves in an SQLite file: one transaction per write, every derived row
(vector, keyword postings, entity) going with its memory, nothing half-written after a failure, and
the versions of SQLite's extensions in the status."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest
from sqlite_files import execute

from store import Engine, MemoryInput, NotFound
from store.sqlite import connection
from store.sqlite.entities import EntityWrites

# The SQLite file's own tables and statements.
pytestmark = pytest.mark.only_on("sqlite")


def table_counts(engine: Engine) -> dict[str, int]:
    return engine.status()["counts"]


def posted_rowids(path: Path) -> set[int]:
    """Rowids the keyword postings name."""
    conn = apsw.Connection(str(path))
    try:
        return {row[0] for row in conn.execute("SELECT DISTINCT memory_rowid FROM memory_terms")}
    finally:
        conn.close()


@pytest.mark.parametrize("as_messages", [False, True])
def test_a_batch_is_one_nlp_pass_two_model_batches_and_one_transaction(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, as_messages: bool
) -> None:
    calls: list[str] = []

    def counted(name: str, function):  # type: ignore[no-untyped-def]
        def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
            calls.append(name)
            return function(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(engine.nlp, "analyze_batch", counted("nlp", engine.nlp.analyze_batch))
    monkeypatch.setattr(engine.embedder, "embed_batch", counted("embed", engine.embedder.embed_batch))
    monkeypatch.setattr(connection, "write_transaction", counted("transaction", connection.write_transaction))
    texts = ["Ana flew to Tokyo with Delta", "Ana met Kenji in Kyoto", "Kenji teaches judo", "ana met kenji in kyoto"]
    if as_messages:
        results = engine.add([{"role": "user", "content": text} for text in texts], user_id="ana")
    else:
        results = engine.add_many([MemoryInput(text) for text in texts], user_id="ana")
    assert [r.event for r in results] == ["ADD", "ADD", "ADD", "DUPLICATE"]
    # the texts embed beside the NLP pass, their entity names after it; then one transaction
    assert sorted(calls[:3]) == ["embed", "embed", "nlp"] and calls[3:] == ["transaction"]


def test_delete_leaves_no_orphan_vector_posting_or_entity(engine: Engine, db_path: Path) -> None:
    (keep,) = engine.add("Ana met Priya at the Lisbon office", user_id="ana")
    (gone,) = engine.add("Ana visited the Louvre in Paris", user_id="ana")
    engine.delete(gone.memory.id, user_id="ana")
    counts = table_counts(engine)
    assert counts["memories"] == counts["memory_vectors"] == 1
    assert counts["entities"] == counts["entity_vectors"]
    assert posted_rowids(db_path) == {row[0] for row in execute(engine, "SELECT rowid FROM memories")}
    assert execute(engine, "SELECT user_id, memories FROM keyword_users") == [("ana", 1)]
    ((orphans,),) = execute(
        engine, "SELECT count(*) FROM entities WHERE id NOT IN (SELECT entity_id FROM memory_entities)"
    )
    assert orphans == 0
    names = {row[0] for row in execute(engine, "SELECT normalized FROM entities")}
    assert "louvre" not in names and "paris" not in names
    assert [e.event for e in engine.history(gone.memory.id, user_id="ana")] == ["ADD", "DELETE"]
    with pytest.raises(NotFound):
        engine.get(gone.memory.id, user_id="ana")
    assert engine.get(keep.memory.id, user_id="ana")


def test_a_failure_mid_write_leaves_no_partial_rows(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    engine.add("Ana owns a bicycle", user_id="ana")
    before = table_counts(engine)

    def explode(*args, **kwargs):
        raise RuntimeError("disk pulled out mid-write")

    monkeypatch.setattr(EntityWrites, "insert_links", explode)
    with pytest.raises(RuntimeError):
        engine.add_many([MemoryInput("Ana flew to Tokyo with Delta"), MemoryInput("Ana met Kenji")], user_id="ana")
    assert table_counts(engine) == before
    monkeypatch.undo()
    assert engine.add("Ana flew to Tokyo with Delta", user_id="ana")[0].event == "ADD"


def test_status_reports_the_sqlite_extensions(engine: Engine) -> None:
    status = engine.status()
    assert status["sqlite_vec"].startswith("v0.1")
    assert status["database"] == str(engine.backend.path)


@pytest.mark.parametrize("settings", [connection.CONNECTION_SETTINGS, connection.READ_ONLY_SETTINGS])
def test_a_file_is_read_through_a_memory_map(db_path: Path, settings: tuple) -> None:
    """A KNN reads every vector of its scope: through a memory map that costs no read call a page."""
    connection.connect(db_path).close()  # a file trimem made, which the read-only settings accept
    conn = apsw.Connection(str(db_path))
    for setting in settings:
        setting(conn)
    assert conn.execute("PRAGMA mmap_size").fetchone()[0] == connection.MEMORY_MAP_BYTES
    # Writes still go through write calls, so a full disk fails a write, never a read of the map.
    assert "MMAP_READWRITE" not in apsw.compile_options
