"""Export and import: a database moved through a JSON Lines file comes back equal, and the
peers' files (written here in each peer's own format) become memories."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from store import Config, Engine, InvalidArgument
from store.exchange.transfer import FORMAT, FORMAT_VERSION, BadLine

FIXTURES = Path(__file__).parent / "fixtures"
QUERIES = (
    "Where does Ana work?", "What is Ana allergic to?", "Who repairs bicycles?", "travel plans",
    "What does the planner prefer?", "Lisbon", "tea or coffee",
)
SCOPES = ({"user_id": "ana"}, {"user_id": "ana", "agent_id": "planner"}, {"user_id": "ana", "run_id": "trip"},
          {"user_id": "bob"})


@pytest.fixture
def other(another_store: Callable[[str], Config], engine_factory: Callable[[Config], Engine]) -> Iterator[Engine]:
    """A second, empty database with the same models: where an export is imported."""
    with engine_factory(another_store("copy")) as instance:
        yield instance


def fill(engine: Engine) -> None:
    """Several scopes, metadata, an expiry, a conversation, an update and deletes."""
    engine.add("Ana works as a nurse at Santa Maria hospital in Lisbon", user_id="ana",
               metadata={"category": "work", "priority": 3, "tags": ["job", "health"]})
    engine.add("Ana is allergic to peanuts", user_id="ana", metadata={"category": "health"})
    gone = engine.add("Ana used to live in Porto", user_id="ana")[0].memory
    engine.add("Ana's gym pass is valid", user_id="ana", expiration_date="2099-01-31")
    engine.add([{"role": "user", "content": "I prefer tea to coffee", "name": "ana"},
                {"role": "assistant", "content": "Noted: tea, not coffee"}], user_id="ana", run_id="trip")
    engine.add("The planner prefers morning meetings", user_id="ana", agent_id="planner")
    changed = engine.add("Bob repairs old bicycles", user_id="bob")[0].memory
    engine.add("Bob flies to Tokyo in May", user_id="bob", metadata={"trip": True})
    engine.update(changed.id, text="Bob repairs old bicycles and sells them", metadata={"shop": "Bikes & Co"},
                  user_id="bob")
    engine.delete(gone.id, user_id="ana")
    engine.add("Ana plans a trip to Kyoto", user_id="ana", metadata={"when": None, "ratio": 0.25})


def everything(engine: Engine) -> dict[str, Any]:
    """Every memory of every test scope, its history, and the ranking of each query."""
    memories = {m.id: dataclasses.asdict(m) for scope in SCOPES for m in engine.list(**scope, show_expired=True)}
    histories = {memory_id: [dataclasses.asdict(e) for e in engine.history(memory_id, user_id=m["user_id"])]
                 for memory_id, m in memories.items()}
    rankings = {(query, tuple(scope.items())): [(hit.memory.id, hit.score)
                                                for hit in engine.search(query, **scope, threshold=0.05)]
                for query in QUERIES for scope in SCOPES}
    return {"memories": memories, "history": histories, "rankings": rankings}


def assert_same_store(got: dict[str, Any], expected: dict[str, Any]) -> None:
    """The same memories and history, and the same rankings with the same scores, give or take
    the last float32 bits of vectors re-embedded in other batches (an import embeds afresh)."""
    assert (got["memories"], got["history"]) == (expected["memories"], expected["history"])
    assert got["rankings"].keys() == expected["rankings"].keys()
    for key, ranking in expected["rankings"].items():
        assert [memory_id for memory_id, _ in got["rankings"][key]] == [memory_id for memory_id, _ in ranking], key
        assert [score for _, score in got["rankings"][key]] == pytest.approx([score for _, score in ranking], abs=1e-5)


def export_to(engine: Engine, path: Path, **kwargs: Any) -> list[dict[str, Any]]:
    with path.open("w", encoding="utf-8") as out:
        out.writelines(engine.export(**kwargs))
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_round_trip_keeps_every_memory_id_date_metadata_history_and_ranking(
    engine: Engine, other: Engine, tmp_path: Path
) -> None:
    fill(engine)
    header, *lines = export_to(engine, tmp_path / "all.jsonl", history=True)
    assert (header["format"], header["format_version"]) == (FORMAT, FORMAT_VERSION)
    assert header["embedding_model"] == engine.embedder.name and header["embedding_dimension"] == 384
    assert header["counts"] == {"memories": 9, "history_events": 10} and len(lines) == 9
    assert not any("embedding" in line or "vector" in line for line in lines)
    # the deleted memory stood between two of Ana's: the import keeps them apart (keyword context)
    assert [line["text"] for line in lines if line.get("gap_before")] == ["Ana's gym pass is valid"]

    report = other.import_memories(tmp_path / "all.jsonl")
    assert (report.read, report.imported, report.skipped_same_id, report.skipped_same_text) == (9, 9, 0, 0)
    assert report.history_events == 10
    assert_same_store(everything(other), everything(engine))
    assert other.check() == []


def test_importing_twice_changes_nothing(engine: Engine, other: Engine, tmp_path: Path) -> None:
    fill(engine)
    export_to(engine, tmp_path / "all.jsonl")
    other.import_memories(tmp_path / "all.jsonl")
    before, counts = everything(other), other.status()["counts"]
    again = other.import_memories(tmp_path / "all.jsonl")
    assert (again.imported, again.skipped_same_id, again.skipped_same_text) == (0, 9, 0)
    assert everything(other) == before and other.status()["counts"] == counts


def test_export_narrows_by_scope_and_filters(engine: Engine, tmp_path: Path) -> None:
    fill(engine)
    header, *lines = export_to(engine, tmp_path / "ana.jsonl", user_id="ana")
    assert header["scope"] == {"user_id": "ana"} and header["counts"]["memories"] == len(lines) == 7
    assert {line["user_id"] for line in lines} == {"ana"}
    header, *lines = export_to(engine, tmp_path / "health.jsonl", user_id="ana",
                               filters={"category": "health"})
    assert [line["text"] for line in lines] == ["Ana is allergic to peanuts"]
    assert header["filters"] == {"category": "health"} and "history" not in lines[0]
    with pytest.raises(InvalidArgument):
        engine.export(filters={"priority": {"gte": "three", "bad_operator": 1}})


def test_export_streams_from_one_snapshot(engine: Engine, tmp_path: Path) -> None:
    """Lines come one at a time from a cursor: a memory added mid-export is not in it, and the
    header's counts match the lines."""
    fill(engine)
    lines = engine.export()
    header = json.loads(next(lines))
    engine.add("Carla joins the team in March", user_id="carla")
    rest = [json.loads(line) for line in lines]
    assert header["counts"]["memories"] == len(rest) == 9
    assert "Carla joins the team in March" not in [line["text"] for line in rest]


def test_duplicates_by_text_and_id_are_skipped_and_counted(engine: Engine, tmp_path: Path) -> None:
    engine.add("Ana is allergic to peanuts", user_id="ana")
    path = tmp_path / "mixed.jsonl"
    lines = [
        {"format": FORMAT, "format_version": 1},
        {"text": "ANA is allergic   to peanuts", "user_id": "ana"},  # stored already, same normalised text
        {"text": "Ana is allergic to peanuts", "user_id": "bob"},  # another scope: a memory of its own
        {"id": "fixed-id-1", "text": "Ana likes tea", "user_id": "ana"},
        {"id": "fixed-id-1", "text": "Ana likes cake", "user_id": "ana"},  # the same id twice in the file
        {"text": "Bob likes tea", "user_id": "bob"},
        {"text": "bob likes tea", "user_id": "bob"},  # twice in the file
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    dry = engine.import_memories(path, dry_run=True)
    assert (dry.imported, dry.skipped_same_id, dry.skipped_same_text, dry.dry_run) == (3, 1, 2, True)
    assert len(engine.list(user_id="bob")) == 0
    report = engine.import_memories(path)
    assert (report.imported, report.skipped_same_id, report.skipped_same_text) == (3, 1, 2)
    assert engine.get("fixed-id-1", user_id="ana").text == "Ana likes tea"
    assert sorted(m.text for m in engine.list(user_id="bob")) == ["Ana is allergic to peanuts", "Bob likes tea"]


def test_import_keeps_past_expiry_dates_and_normalises_timestamps(engine: Engine, tmp_path: Path) -> None:
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps({"format": FORMAT, "format_version": 1}) + "\n" + json.dumps(
        {"text": "Ana's 2019 parking permit", "created_at": "2019-03-01T10:00:00-05:00",
         "expiration_date": "2019-12-31"}) + "\n")
    engine.import_memories(path, user_id="ana")  # the line names no scope: the import's
    [memory] = engine.list(user_id="ana", show_expired=True)
    assert memory.expiration_date == "2019-12-31" and engine.list(user_id="ana") == []
    assert memory.created_at == memory.updated_at == "2019-03-01T15:00:00.000000+00:00"


def bad_file(tmp_path: Path, bad: str, good_after: int = 300) -> Path:
    """A header, one good memory, the bad line (line 3), then ``good_after`` good memories."""
    path = tmp_path / "bad.jsonl"
    good = [json.dumps({"text": f"Ana fact number {i}", "user_id": "ana"}) for i in range(good_after)]
    path.write_text("\n".join([json.dumps({"format": FORMAT, "format_version": 1}),
                               json.dumps({"text": "Ana likes tea", "user_id": "ana"}), bad, *good]) + "\n")
    return path


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("{oops", "line 3: not valid JSON"),
        ('{"text": "x", "user_id": "ana", "created_at": "0001-01-01T00:00:00+14:00"}',
         "line 3: created_at '0001-01-01T00:00:00+14:00' falls outside the years 1 to 9999 in UTC"),
        ('{"text": "x", "user_id": "ana", "updated_at": "9999-12-31T23:59:59-14:00"}',
         "line 3: updated_at '9999-12-31T23:59:59-14:00' falls outside the years 1 to 9999 in UTC"),
        (('{"text": "x", "user_id": "ana", "history": [{"event": "ADD", "new_text": "x", '
         '"created_at": "9999-12-31T23:59:59-14:00"}]}'), ("line 3: history[0].created_at '9999-12-31T23:59:59-14:00' "
         "falls outside")),
        ('{"text": "tab\there"}', "line 3: not valid JSON (Invalid control character at column 14)"),
        ('{"text": "x", "user_id": "ana", "colour": "red"}', "line 3: unknown key 'colour'"),
        ('{"user_id": "ana"}', 'line 3: has no "text"'),
        ('{"text": "x"}', "line 3: names no user_id, agent_id or run_id"),
        ('{"text": "x", "user_id": "ana", "created_at": "yesterday"}', "line 3: created_at 'yesterday' is not"),
        ('{"text": "x", "user_id": "ana", "expiration_date": "2019-02-30"}', "line 3: expiration_date '2019-02-30'"),
        ('{"text": "x", "user_id": "ana", "role": "system"}', "line 3: role must be one of user, assistant"),
        ('{"text": "x", "user_id": "ana", "metadata": {"user_id": "bob"}}', "line 3: metadata holds the scope"),
        ('{"text": "x", "user_id": "ana", "history": [{"event": "MOVE"}]}', "line 3: history[0].event must be"),
    ],
)
def test_a_bad_line_is_named_and_its_chunk_is_not_written(
    engine: Engine, tmp_path: Path, bad: str, message: str
) -> None:
    path = bad_file(tmp_path, bad)
    with pytest.raises(BadLine, match="^" + re.escape(f"{path}, {message}")):
        engine.import_memories(path, dry_run=True)
    with pytest.raises(BadLine):
        engine.import_memories(path)
    assert engine.list(user_id="ana") == []  # line 2 shares the bad line's chunk: not written either


def test_chunks_before_a_bad_line_are_written_and_a_second_run_finishes(engine: Engine, tmp_path: Path) -> None:
    path = bad_file(tmp_path, "not json", good_after=0)
    lines = path.read_text().splitlines()
    good = [json.dumps({"text": f"Ana fact number {i}", "user_id": "ana"}) for i in range(256)]
    path.write_text("\n".join([lines[0], *good, lines[2]]) + "\n")  # the bad line opens the second chunk
    with pytest.raises(BadLine, match=f"^{re.escape(str(path))}, line 258: "):
        engine.import_memories(path)
    assert engine.status()["counts"]["memories"] == 256
    path.write_text("\n".join([lines[0], *good, lines[1]]) + "\n")
    report = engine.import_memories(path)
    assert (report.imported, report.skipped_same_text) == (1, 256)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "is empty"),
        ('{"text": "Ana likes tea", "user_id": "ana"}\n', "export.jsonl, line 1 is not a trimem export header"),
        ('{"format": "trimem-memories", "format_version": 2, "trimem_version": "9.0"}\n',
         "format version 2, written by trimem '9.0'; this trimem reads up to version 1: upgrade"),
        ('{"format": "trimem-memories", "format_version": "1"}\n', "line 1: format_version must be"),
    ],
)
def test_a_bad_header_is_refused(engine: Engine, tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "export.jsonl"
    path.write_text(content)
    with pytest.raises(InvalidArgument, match=message):
        engine.import_memories(path)


def test_another_embedding_model_in_the_header_is_a_note(engine: Engine, tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "export.jsonl"
    path.write_text(json.dumps({"format": FORMAT, "format_version": 1, "embedding_model": "bge-small"}) + "\n"
                    + json.dumps({"text": "Ana likes tea", "user_id": "ana"}) + "\n")
    report = engine.import_memories(path)
    assert report.imported == 1 and report.embedding_model == "bge-small"
    assert "'bge-small'" in caplog.text and "embedded again" in caplog.text


def test_import_reports_progress_per_chunk(engine: Engine, tmp_path: Path) -> None:
    path = bad_file(tmp_path, json.dumps({"text": "Ana likes cake", "user_id": "ana"}), good_after=300)
    calls: list[tuple[int, int | None]] = []
    engine.import_memories(path, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(256, None), (302, None)]


# --- peers ---------------------------------------------------------------------------------


def test_from_the_mcp_reference_memory_server(engine: Engine) -> None:
    report = engine.import_memories(FIXTURES / "mcp-memory.jsonl", source="mcp-memory", user_id="ana")
    assert report.mapped == {"observations": 5, "relations": 2}
    assert report.skipped == {"entities without observations": 1, "lines of type 'note'": 1}
    assert report.imported == 7
    memories = {m.text: m for m in engine.list(user_id="ana")}
    fact = memories["Ana Lopez: works at Santa Maria hospital"]
    assert fact.metadata == {"source": "mcp-memory", "entity": "Ana Lopez", "entity_type": "person"}
    relation = memories["Ana Lopez works at Santa Maria hospital"]  # the relation type reads as words
    assert relation.metadata == {"source": "mcp-memory", "relation": "works_at", "from": "Ana Lopez",
                                 "to": "Santa Maria hospital"}
    assert memories["Tomas is brother of Ana Lopez"].metadata["relation"] == "is_brother_of"
    for hit in engine.search("Ana Lopez", user_id="ana", explain=True, threshold=0.3):  # linked to their entity
        assert hit.entity_match is not None and hit.entity_match.entity == "Ana Lopez"
    again = engine.import_memories(FIXTURES / "mcp-memory.jsonl", source="mcp-memory", user_id="ana")
    assert (again.imported, again.skipped_same_text) == (0, 7)


MEMORY_SERVICE_SQL = """
CREATE TABLE memories (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    content_hash TEXT UNIQUE NOT NULL,
    content TEXT NOT NULL,
    tags TEXT,
    memory_type TEXT,
    metadata TEXT,
    created_at REAL,
    updated_at REAL,
    created_at_iso TEXT,
    updated_at_iso TEXT,
    deleted_at REAL DEFAULT NULL
);
INSERT INTO memories (content_hash, content, tags, memory_type, metadata, created_at, updated_at,
                      created_at_iso, updated_at_iso, deleted_at) VALUES
 ('h1', 'Deploy the API with blue-green releases on Fridays', 'devops,deploy', 'decision',
  '{"project": "atlas"}', 1735689600.0, 1735776000.5, '2025-01-01T00:00:00Z', '2025-01-02T00:00:00.5Z', NULL),
 ('h2', 'Ana prefers Postgres over MySQL for new services', 'database', 'preference', '{}',
  1736000000.0, 1736000000.0, '2025-01-04T14:13:20Z', '2025-01-04T14:13:20Z', NULL),
 ('h3', 'The old staging server was shut down', 'infra', 'note', NULL,
  1736100000.0, 1736200000.0, '2025-01-05T18:00:00Z', '2025-01-06T21:46:40Z', 1736300000.0),
 ('h4', '   ', '', NULL, NULL, 1736100000.0, 1736100000.0, NULL, NULL, NULL);
"""


def test_from_mcp_memory_service(engine: Engine, tmp_path: Path) -> None:
    path = tmp_path / "sqlite_vec.db"
    conn = apsw.Connection(str(path))
    conn.execute(MEMORY_SERVICE_SQL)
    conn.close()
    report = engine.import_memories(path, source="mcp-memory-service", user_id="ana")
    assert report.mapped == {"memories": 2} and report.imported == 2
    assert report.skipped == {"deleted rows": 1, "rows without content": 1}
    memories = {m.text: m for m in engine.list(user_id="ana")}
    deploy = memories["Deploy the API with blue-green releases on Fridays"]
    assert deploy.metadata == {"project": "atlas", "source": "mcp-memory-service", "tags": ["devops", "deploy"],
                               "memory_type": "decision"}
    assert (deploy.created_at, deploy.updated_at) == ("2025-01-01T00:00:00.000000+00:00",
                                                      "2025-01-02T00:00:00.500000+00:00")
    assert engine.search("which database does Ana like", user_id="ana")[0].memory.text.startswith("Ana prefers")


def test_from_something_that_is_not_a_memory_service_database(engine: Engine, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(InvalidArgument, match="not a readable SQLite database"):
        engine.import_memories(tmp_path / "notes.txt", source="mcp-memory-service", user_id="ana")
    conn = apsw.Connection(str(tmp_path / "other.db"))
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.close()
    with pytest.raises(InvalidArgument, match="has no memories table"):
        engine.import_memories(tmp_path / "other.db", source="mcp-memory-service", user_id="ana")


def test_from_mem0_get_all(engine: Engine) -> None:
    report = engine.import_memories(FIXTURES / "mem0-get-all.json", source="mem0", user_id="default")
    assert report.mapped == {"memories": 4} and report.skipped == {"results without memory text": 1}
    assert report.imported == 4
    alice = engine.get("892db2ae-06d9-49e5-8b3e-585ef9b85b8e", user_id="alice")
    assert alice.text == "Is a vegetarian" and alice.metadata == {"category": "food", "source": "mem0"}
    assert alice.created_at == "2024-07-20T11:04:27.123456+00:00"  # -07:00 in the file
    assert alice.updated_at == alice.created_at  # null in the file
    assert [m.text for m in engine.list(user_id="alice", agent_id="travel-bot")] == ["Prefers aisle seats"]
    assert [m.text for m in engine.list(user_id="default")] == ["Allergic to nuts"]  # no scope in the file
    # a bare list (older Mem0) reads the same
    again = engine.import_memories(FIXTURES / "mem0-get-all.json", source="mem0", user_id="default")
    assert (again.imported, again.skipped_same_id) == (0, 4)


def test_mem0_bare_list(engine: Engine, tmp_path: Path) -> None:
    path = tmp_path / "mem0.json"
    path.write_text(json.dumps([{"id": "m-1", "memory": "Likes jazz", "user_id": "carl", "metadata": None,
                                 "created_at": "2024-01-01T00:00:00Z", "updated_at": None}]))
    assert engine.import_memories(path, source="mem0").imported == 1
    assert engine.get("m-1", user_id="carl").metadata == {"source": "mem0"}
    path.write_text('{"memories": []}')
    with pytest.raises(InvalidArgument, match="not Mem0's get_all JSON"):
        engine.import_memories(path, source="mem0")
