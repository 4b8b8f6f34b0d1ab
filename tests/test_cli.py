"""The ``trimem`` command line: each command runs, then the state is checked through ``Engine``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from conftest import db_argument

from mcp_server.cli import cli
from store import Config, Engine
from store.ranking.scoring import KEYWORD_SOURCES
from store.records import short_id


@pytest.fixture
def run(db_arg: str, config: Config, engine_factory: Callable[[Config], Engine],
        monkeypatch: pytest.MonkeyPatch) -> Callable:
    """``run(*args)``: invoke ``trimem --db <tmp> args`` in process, with the session's models, on
    an empty database (a read creates none)."""
    engine_factory(config).close()
    # The CLI imports Engine when a command opens the database; hand it the shared models.
    monkeypatch.setattr("store.engine.Engine", engine_factory)

    def invoke(*args: str, ok: bool = True, input: str | None = None) -> Result:
        result = CliRunner().invoke(cli, ["--db", db_arg, *args], input=input)
        if ok:
            assert result.exit_code == 0, result.output
        return result

    return invoke


def output_json(result: Result) -> Any:
    return json.loads(result.stdout)


def test_add_then_read_through_the_engine(run: Callable, engine: Engine) -> None:
    [added] = output_json(run("add", "Ana is allergic to peanuts", "--metadata", '{"category": "health"}',
                              "--expiration-date", "2099-01-01"))["results"]
    assert added["event"] == "ADD"
    memory = engine.get(added["memory"]["id"], user_id="default")
    assert (memory.text, memory.metadata, memory.expiration_date) == (
        "Ana is allergic to peanuts", {"category": "health"}, "2099-01-01"
    )
    [again] = output_json(run("add", "Ana is allergic to peanuts"))["results"]
    assert again["event"] == "DUPLICATE"


def test_scopes_and_the_default_user(run: Callable, engine: Engine) -> None:
    run("add", "Bob likes hiking", "--user-id", "bob")
    run("add", "The default user likes tea")
    assert [m.text for m in engine.list(user_id="bob")] == ["Bob likes hiking"]
    assert [m.text for m in engine.list(user_id="default")] == ["The default user likes tea"]
    hits = output_json(run("search", "hiking", "--user-id", "bob", "--top-k", "3"))["results"]
    assert [hit["text"] for hit in hits] == ["Bob likes hiking"]
    assert "score" in hits[0] and "details" not in hits[0]


def test_search_explain_prints_a_table(run: Callable) -> None:
    run("add", "Ana works at Globex in Lisbon")
    run("add", "Bob is a carpenter")
    table = run("search", "Where does Ana work?", "--explain", "--threshold", "0.3", "--format", "table").stdout
    assert "terms (2): ana work" in table
    assert "bm25 sigmoid: midpoint 5, steepness 0.7" in table
    assert "score  fused  semantic  bm25" in table
    assert "Ana works at Globex in Lisbon" in table
    assert "below_threshold" in table  # Bob, dropped by the semantic gate
    explained = output_json(run("search", "Where does Ana work?", "--explain", "--threshold", "0.3"))
    assert explained["analysis"]["term_count"] == 2 and explained["dropped"][0]["reason"] == "below_threshold"
    assert explained["results"][0]["score_parts"]["threshold"] == 0.3  # explain_search's shape


def test_search_explain_says_what_moved_a_learned_order(run: Callable, monkeypatch: pytest.MonkeyPatch) -> None:
    for text in ("Ana works at Globex in Lisbon", "Ana started at Globex last May", "Bob is a carpenter"):
        run("add", text)
    query = "When did Ana start at Globex?"
    table = " ".join(run("search", query, "--explain", "--format", "table").stdout.split())  # the notes wrap
    results = output_json(run("search", query, "--explain"))["results"]
    assert [hit["text"] for hit in results[:1]] == ["Ana started at Globex last May"]
    for hit in results:
        learned = hit["learned"]
        assert learned["score"] == learned["probability"] == hit["score"] != hit["score_parts"]["final_score"]
        strongest = ", ".join(f"{p['feature']} {p['pull']:+.2f}" for p in learned["strongest"])
        assert (f"{short_id(hit['id'])} learned: intercept {learned['intercept']:+.2f}, {strongest}, "
                f"others {learned['others']:+.2f} = logit {learned['logit']:+.2f}, probability {hit['score']:.3f}") in table
    monkeypatch.setenv("TRIMEM_RANKING", "trimem")
    hand_set = run("search", query, "--explain", "--format", "table").stdout
    assert "Ana started at Globex last May" in hand_set and "learned:" not in hand_set


def test_search_explain_says_where_a_keyword_score_comes_from(run: Callable) -> None:
    for text in ("Bob is a carpenter", "Ana likes green tea", "The kitchen needs a new tap"):  # so words weigh
        run("add", text)
    run("add", "Ana: How did the children take the news about the accident?")
    run("add", "Ben: They were scared at first, but we reassured them and they are fine now.")
    query = "How did the children handle the accident?"
    table = " ".join(run("search", query, "--explain", "--format", "table").stdout.split())  # the notes wrap
    assert f": {KEYWORD_SOURCES['question']}" in table and f": {KEYWORD_SOURCES['beside']}" in table
    explained = output_json(run("search", query, "--explain"))["results"]
    sources = {hit["text"].split(" ")[0]: hit["keyword_source"] for hit in explained}
    assert sources.pop("Ana:") == "question" and sources.pop("Ben:") == "beside"
    assert set(sources.values()) <= {None}  # the other memories share no word with the query


def test_list_get_update_history_delete(run: Callable, engine: Engine) -> None:
    memory_id = output_json(run("add", "Ana lives in Lisbon"))["results"][0]["memory"]["id"]
    assert [m["id"] for m in output_json(run("list", "--limit", "5"))["memories"]] == [memory_id]
    assert output_json(run("get", memory_id))["text"] == "Ana lives in Lisbon"
    run("update", memory_id, "--text", "Ana lives in Porto", "--metadata", '{"moved": 2025}')
    assert engine.get(memory_id, user_id="default").metadata == {"moved": 2025}
    assert output_json(run("delete", memory_id))["deleted"]["text"] == "Ana lives in Porto"
    assert [e["event"] for e in output_json(run("history", memory_id))["events"]] == ["ADD", "UPDATE", "DELETE"]
    assert engine.list(user_id="default") == []


def test_delete_all_needs_a_scope_and_a_confirmation(run: Callable, engine: Engine) -> None:
    run("add", "Bob likes hiking", "--user-id", "bob")
    assert "name a scope" in run("delete-all", "--yes", ok=False).output
    assert run("delete-all", "--user-id", "bob", ok=False, input="n\n").exit_code == 1
    assert output_json(run("delete-all", "--user-id", "bob", "--yes")) == {"deleted_count": 1}
    assert engine.list(user_id="bob") == []


def test_errors_are_messages_not_tracebacks(run: Callable) -> None:
    missing = run("get", "no-such-id", ok=False)
    assert missing.exit_code == 1 and "memory 'no-such-id' not found" in missing.output
    assert "Invalid value for '--top-k': must be between 1 and 100" in run("search", "x", "--top-k", "0",
                                                                            ok=False).output
    bad_json = run("add", "x", "--metadata", "{oops", ok=False)
    assert bad_json.exit_code == 2 and "not valid JSON" in bad_json.output
    assert "must be a JSON object like" in run("list", "--filters", "[1]", ok=False).output
    assert "JSON nested too deeply" in run("list", "--filters", "[" * 5000, ok=False).output
    assert "unknown operator" in run("list", "--filters", '{"a": {"near": 1}}', ok=False).output


def test_config_file_and_flags(tmp_path: Path, run: Callable, engine: Engine) -> None:
    config_file = tmp_path / "trimem.toml"
    config_file.write_text('[server]\nuser_id = "ana"\n')
    run("--config", str(config_file), "add", "Ana prefers tea")
    assert [m.text for m in engine.list(user_id="ana")] == ["Ana prefers tea"]
    config_file.write_text('[server]\nuser = "typo"\n')
    assert "unknown key 'user'" in run("--config", str(config_file), "list", ok=False).output


def test_doctor_reports_versions_and_counts(run: Callable, config: Config, backend: str) -> None:
    run("add", "Ana lives in Lisbon")
    status = output_json(run("doctor"))
    assert status["database"] == config.location
    assert status["binding"] == {"sqlite": "apsw", "postgres": "psycopg"}[backend]
    versions = {"sqlite": {"sqlite", "sqlite_vec"}, "postgres": {"postgresql", "extensions"}}[backend]
    assert versions | {"spacy_tier", "embedding_model"} <= set(status)
    assert status["embedding_backend"] == "onnx-fp32"
    assert status["counts"]["memories"] == 1


def test_doctor_check_and_repair_call_the_engine(run: Callable, monkeypatch: pytest.MonkeyPatch) -> None:
    from store.records import RepairReport, Violation

    calls: list[bool] = []

    def check(self: Engine, deep: bool = False) -> list[Violation]:
        calls.append(deep)
        return [Violation("fts", "memory 7 has no keyword row")] if len(calls) == 1 else []

    monkeypatch.setattr(Engine, "check", check)
    checked = run("doctor", "--check", ok=False)
    assert checked.exit_code == 1 and "fts: memory 7 has no keyword row" in checked.output
    assert "no problems" in run("doctor", "--check", "--deep").stdout
    assert calls == [False, True]
    monkeypatch.setattr(Engine, "repair", lambda self: RepairReport(1, True, 2, 0))
    assert output_json(run("doctor", "--repair"))["vectors_rebuilt"] == 1


def test_backup_calls_the_engine(run: Callable, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copies: list[Path] = []
    monkeypatch.setattr(Engine, "backup", lambda self, destination: copies.append(destination))
    run("backup", str(tmp_path / "copy.db"))
    assert copies == [tmp_path / "copy.db"]


@pytest.mark.only_on("sqlite")
def test_check_and_backup_on_a_real_database(run: Callable, tmp_path: Path, config: Config,
                                             engine_factory: Callable[[Config], Engine]) -> None:
    run("add", "Ana lives in Lisbon")
    assert "no problems" in run("doctor", "--check").stdout
    run("backup", str(tmp_path / "copy.db"))
    with engine_factory(config.replace("store", db_path=str(tmp_path / "copy.db"))) as copy:
        assert [m.text for m in copy.list(user_id="default")] == ["Ana lives in Lisbon"]


# --- trimem add --file: bulk adds from JSON Lines -----------------------------------------


def jsonl(*lines: Any) -> str:
    return "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)


def test_add_file_adds_every_line_in_its_scope(run: Callable, engine: Engine, tmp_path: Path) -> None:
    path = tmp_path / "facts.jsonl"
    path.write_text(jsonl(
        {"text": "Ana is allergic to peanuts", "metadata": {"category": "health"}},
        {"text": "Ana moves to Porto in May", "expiration_date": "2099-06-01"},
        "",
        {"text": "Bob likes hiking", "user_id": "bob"},
        {"text": "ana is allergic to peanuts"},  # the same fact again: a duplicate
        {"text": "The planner agent prefers mornings", "agent_id": "planner", "metadata": {"x": 1}},
    ))
    summary = run("add", "--file", str(path), "--user-id", "ana", "--metadata", '{"source": "import"}')
    assert output_json(summary) == {"added": 4, "duplicates": 1}
    assert summary.stdout.count("\n") == 1  # one summary line
    assert "adding" not in summary.stderr  # no bar off a terminal
    ana = {m.text: m for m in engine.list(user_id="ana")}
    assert set(ana) == {"Ana is allergic to peanuts", "Ana moves to Porto in May"}
    assert ana["Ana is allergic to peanuts"].metadata == {"category": "health"}  # the line's own wins
    assert ana["Ana moves to Porto in May"].metadata == {"source": "import"}  # else the command's
    assert ana["Ana moves to Porto in May"].expiration_date == "2099-06-01"
    assert [m.text for m in engine.list(user_id="bob")] == ["Bob likes hiking"]
    assert [m.metadata for m in engine.list(agent_id="planner")] == [{"x": 1}]
    assert engine.search("peanut allergy", user_id="ana")[0].memory.text == "Ana is allergic to peanuts"


def test_add_file_reads_stdin_and_uses_the_default_user(run: Callable, engine: Engine) -> None:
    summary = run("add", "--file", "-", input=jsonl({"text": "Tea, no sugar"}, {"text": "Coffee at 8"}))
    assert output_json(summary) == {"added": 2, "duplicates": 0}
    assert {m.text for m in engine.list(user_id="default")} == {"Tea, no sugar", "Coffee at 8"}


def test_add_file_writes_one_add_many_call_per_chunk_and_scope(
    run: Callable, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp_server.cli import bulk

    calls: list[tuple[dict, int]] = []
    add_many = Engine.add_many

    def counting(self: Engine, items: list, **kwargs: Any) -> Any:
        calls.append(({k: v for k, v in kwargs.items() if v is not None}, len(items)))
        return add_many(self, items, **kwargs)

    monkeypatch.setattr(bulk, "CHUNK_LINES", 2)
    monkeypatch.setattr(Engine, "add_many", counting)
    lines = [{"text": f"Ana fact {i}"} for i in range(5)] + [{"text": "Bob fact", "user_id": "bob"}]
    lines.insert(1, {"text": "Ana fact with a date", "expiration_date": "2099-01-01"})
    run("add", "--file", "-", "--user-id", "ana", input=jsonl(*lines))
    assert calls == [
        ({"user_id": "ana"}, 2), ({"user_id": "ana"}, 2), ({"user_id": "ana"}, 1),
        ({"user_id": "ana", "expiration_date": "2099-01-01"}, 1),
        ({"user_id": "bob"}, 1),
    ]
    assert len(engine.list(user_id="ana")) == 6


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ("{oops", "line 2: not valid JSON"),
        ('["Ana likes tea"]', "line 2: must be a JSON object"),
        ('"Ana likes tea"', "line 2: must be a JSON object"),
        ('{"metadata": {"a": 1}}', 'line 2: has no "text"'),
        ('{"text": "   "}', "line 2: text is empty"),
        ('{"text": 42}', "line 2: text must be a string"),
        ('{"text": "x", "metadata": "health"}', "line 2: metadata must be a JSON object"),
        ('{"text": "x", "metdata": {}}', "line 2: unknown key 'metdata'"),
        ('{"text": "x", "expiration_date": "tomorrow"}', "line 2: expiration_date must look like"),
        ('{"text": "x", "user_id": "ana lopez"}', "line 2: user_id='ana lopez' contains whitespace"),
        (b'{"text": "caf\xe9"}', "line 2: is not UTF-8 text"),
    ],
)
def test_add_file_with_a_bad_line_writes_nothing(
    run: Callable, engine: Engine, tmp_path: Path, bad_line: str | bytes, message: str
) -> None:
    path = tmp_path / "facts.jsonl"
    path.write_bytes(b'{"text": "Ana likes tea"}\n' + (bad_line if isinstance(bad_line, bytes) else bad_line.encode())
                     + b'\n{"text": "Ana likes cake"}\n')
    result = run("add", "--file", str(path), ok=False)
    assert result.exit_code == 1
    error = result.output.strip()
    assert error.startswith("Error: " + message) and "\n" not in error and "Traceback" not in error
    assert engine.list(user_id="default") == []


def test_add_takes_text_or_file(run: Callable, tmp_path: Path) -> None:
    (tmp_path / "facts.jsonl").write_text(jsonl({"text": "x"}))
    assert run("add", ok=False).exit_code == 2
    assert run("add", "Ana likes tea", "--file", str(tmp_path / "facts.jsonl"), ok=False).exit_code == 2


# --- output for people, JSON for scripts, id prefixes ------------------------------------------


def add_three(run: Callable) -> list[str]:
    ids = []
    for text, metadata in (("Ana is allergic to peanuts", '{"category": "health"}'),
                           ("Ana works at Globex in Lisbon " + "and likes long walks " * 10, '{"priority": 3}'),
                           ("Bob repairs old bicycles", "{}")):
        ids.append(output_json(run("add", text, "--metadata", metadata, "--json"))["results"][0]["memory"]["id"])
    return ids


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the commands believe a person reads stdout, on an 80-column terminal."""
    monkeypatch.setattr("mcp_server.cli.output.stdout_is_terminal", lambda: True)
    monkeypatch.setenv("COLUMNS", "80")


def test_a_terminal_gets_a_table_of_memories(run: Callable, terminal: None) -> None:
    ids = add_three(run)
    lines = run("list").stdout.splitlines()
    assert lines[0].split() == ["id", "created", "expires", "metadata", "text"]
    assert all(len(line) <= 80 for line in lines)
    assert lines[1].startswith(ids[2][:8] + "  ") and lines[1].endswith("Bob repairs old bicycles")
    assert "priority=3" in lines[2] and lines[2].endswith("Ana works at Globex in Lisbon")  # the long text wraps
    assert len(lines) == 11 and lines[9] == " " * 48 + "and likes long walks"
    assert "category=health" in lines[10]
    hits = run("search", "What is Ana allergic to?", "--top-k", "1").stdout.splitlines()
    assert hits[0].split()[:2] == ["score", "id"] and hits[1] == "    text"  # no room beside the score and dates
    assert ids[0][:8] in hits[2] and float(hits[2].split()[0]) > 0.3 and hits[3] == "    Ana is allergic to peanuts"
    assert run("get", ids[0]).stdout.splitlines()[:2] == [f"id:              {ids[0]}",
                                                           "text:            Ana is allergic to peanuts"]
    assert "--offset 1" in run("list", "--limit", "1").stdout.splitlines()[-1]
    assert output_json(run("list", "--json"))["memories"][0]["id"] == ids[2]  # --json wins over the terminal


def test_json_is_the_whole_record_that_the_tools_briefs_abbreviate(run: Callable, config: Config,
                                                                  engine_factory: Callable[[Config], Engine]) -> None:
    """``--json`` prints whole records, as ``get_memory`` returns them; the other tools' structured
    content is the brief of the same memories (short id, score to 2 decimals), in the same order."""
    import anyio
    from mcp import Client

    from mcp_server.tools.server import build_server

    add_three(run)

    async def via_mcp() -> tuple[Any, Any, Any]:
        async with Client(build_server(config, open_engine=engine_factory)) as client:
            listed = (await client.call_tool("list_memories", {"limit": 5})).structured_content
            found = (await client.call_tool("search_memory", {"query": "Ana's allergy", "top_k": 2})).structured_content
            whole = [(await client.call_tool("get_memory", {"memory_id": m["id"]})).structured_content
                     for m in listed["memories"]]
            return listed, found, whole

    listed, found, whole = anyio.run(via_mcp)
    printed = output_json(run("list", "--limit", "5"))
    assert printed == {"memories": whole, "next_offset": None}
    assert [short_id(m["id"]) for m in printed["memories"]] == [m["id"] for m in listed["memories"]]
    searched = output_json(run("search", "Ana's allergy", "--top-k", "2", "--format", "json"))
    assert [(short_id(hit["id"]), round(hit["score"], 2)) for hit in searched["results"]] == [
        (hit["id"], hit["score"]) for hit in found["results"]]
    lines = run("list", "--jsonl").stdout.splitlines()
    assert [json.loads(line) for line in lines] == printed["memories"]
    assert len(run("search", "Ana's allergy", "--jsonl").stdout.splitlines()) == len(found["results"])
    assert "choose one output format" in run("list", "--json", "--format", "table", ok=False).output


def test_an_id_prefix_is_accepted_wherever_an_id_is(run: Callable, engine: Engine, terminal: None) -> None:
    memory_id = add_three(run)[0]
    prefix = memory_id[:8]
    assert prefix in run("search", "peanuts", "--explain").stdout  # the explain table shows 8 characters
    assert output_json(run("get", prefix, "--json"))["id"] == memory_id
    run("update", prefix, "--text", "Ana is allergic to peanuts and cashews")
    assert engine.get(memory_id, user_id="default").text == "Ana is allergic to peanuts and cashews"
    assert output_json(run("delete", prefix, "--json"))["deleted"]["id"] == memory_id
    assert [e["event"] for e in output_json(run("history", prefix, "--json"))["events"]] == ["ADD", "UPDATE", "DELETE"]
    assert "not found" in run("get", prefix, ok=False).output  # deleted: the prefix names nothing now


def test_an_ambiguous_prefix_names_the_candidates(run: Callable, engine: Engine, config: Config,
                                                  engine_factory: Callable[[Config], Engine],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import types
    import uuid

    import anyio
    from mcp import Client

    from mcp_server.tools.server import build_server

    fixed = iter([uuid.UUID("abcd1111-0000-4000-8000-000000000000"), uuid.UUID("abcd2222-0000-4000-8000-000000000000")])
    monkeypatch.setattr("store.engine.uuid", types.SimpleNamespace(uuid4=lambda: next(fixed)))
    engine.add("Ana likes tea", user_id="default")
    engine.add("Ana likes coffee", user_id="default")
    error = run("get", "abcd", ok=False).output
    assert error.endswith("is the start of 2 ids in this scope; give more of it to say which:\n"
                          "  abcd1111  'Ana likes tea'\n  abcd2222  'Ana likes coffee'\n")
    assert "Traceback" not in error
    assert output_json(run("get", "abcd2"))["text"] == "Ana likes coffee"

    async def via_mcp() -> Any:
        async with Client(build_server(config, open_engine=engine_factory)) as client:
            return await client.call_tool("get_memory", {"memory_id": "abcd1"})

    assert anyio.run(via_mcp).structured_content["text"] == "Ana likes tea"


# --- everyday edits ------------------------------------------------------------------------------


def test_update_merges_metadata_unless_told_to_replace_it(run: Callable, engine: Engine) -> None:
    memory_id = output_json(run("add", "Ana lives in Lisbon", "--metadata", '{"city": "Lisbon", "source": "chat"}'))[
        "results"][0]["memory"]["id"]
    run("update", memory_id, "--metadata", '{"city": "Porto", "moved": 2025, "source": null}')
    assert engine.get(memory_id, user_id="default").metadata == {"city": "Porto", "moved": 2025}
    run("update", memory_id, "--metadata", '{"only": true}', "--replace-metadata")
    assert engine.get(memory_id, user_id="default").metadata == {"only": True}
    assert "--replace-metadata goes with --metadata" in run("update", memory_id, "--replace-metadata",
                                                             ok=False).output


def test_update_sets_and_clears_the_expiration_date(run: Callable, engine: Engine) -> None:
    memory_id = output_json(run("add", "Ana flies to Berlin"))["results"][0]["memory"]["id"]
    run("update", memory_id, "--expiration-date", "2099-12-15")
    assert engine.get(memory_id, user_id="default").expiration_date == "2099-12-15"
    run("update", memory_id, "--expiration-date", "never")
    assert engine.get(memory_id, user_id="default").expiration_date is None
    assert "is in the past" in run("update", memory_id, "--expiration-date", "2001-01-01", ok=False).output


def test_add_dash_reads_the_text_from_stdin(run: Callable, engine: Engine) -> None:
    run("add", "-", input="Ana's passport expires in March\n")
    assert [m.text for m in engine.list(user_id="default")] == ["Ana's passport expires in March"]


def test_filters_on_created_and_updated_dates(run: Callable, engine: Engine) -> None:
    run("add", "Ana likes tea")
    today = engine.list(user_id="default")[0].created_at[:10]

    def texts(filters: str) -> list[str]:
        return [m["text"] for m in output_json(run("list", "--filters", filters))["memories"]]

    assert texts(f'{{"created_at": {{"gte": "{today}"}}}}') == ["Ana likes tea"]
    assert texts(f'{{"created_at": {{"lte": "{today}"}}}}') == ["Ana likes tea"]  # a day means all of it
    assert texts(f'{{"updated_at": "{today[:7]}"}}') == ["Ana likes tea"]  # this month
    assert texts('{"created_at": {"gte": "2999-01-01"}}') == []
    assert texts('{"created_at": {"lt": "2000"}}') == []
    hits = output_json(run("search", "tea", "--filters", f'{{"created_at": {{"gte": "{today}"}}}}'))["results"]
    assert [hit["text"] for hit in hits] == ["Ana likes tea"]
    assert "compares with a date or time" in run("list", "--filters", '{"created_at": {"gte": "yesterday"}}',
                                                 ok=False).output


def test_restore_brings_back_a_deleted_memory(run: Callable, engine: Engine) -> None:
    added = output_json(run("add", "Ana is allergic to peanuts", "--metadata", '{"category": "health"}'))
    memory = added["results"][0]["memory"]
    run("delete", memory["id"][:8])
    assert engine.list(user_id="default") == []
    restored = output_json(run("restore", memory["id"][:8]))
    assert (restored["id"], restored["created_at"]) == (memory["id"], memory["created_at"])
    again = engine.get(memory["id"], user_id="default")
    assert (again.text, again.metadata) == ("Ana is allergic to peanuts", {"category": "health"})
    assert engine.search("peanut allergy", user_id="default")[0].memory.id == memory["id"]
    assert [e.event for e in engine.history(memory["id"], user_id="default")] == ["ADD", "DELETE", "RESTORE"]
    assert "is not deleted" in run("restore", memory["id"], ok=False).output
    assert "no history" in run("restore", "no-such-id", ok=False).output
    assert engine.check() == []


def test_update_memory_tool_merges_and_sets_the_expiration(config: Config, engine: Engine,
                                                             engine_factory: Callable[[Config], Engine]) -> None:
    import anyio
    from mcp import Client

    from mcp_server.tools.server import build_server

    memory_id = engine.add("Ana lives in Lisbon", user_id="default", metadata={"city": "Lisbon", "a": 1})[0].memory.id

    async def scenario() -> list[Any]:
        async with Client(build_server(config, open_engine=engine_factory)) as client:
            merged = await client.call_tool("update_memory", {"memory_id": memory_id, "metadata": {"city": "Porto"},
                                                              "expiration_date": "2099-01-01"})
            replaced = await client.call_tool("update_memory", {"memory_id": memory_id, "metadata": {"b": 2},
                                                                "replace_metadata": True,
                                                                "expiration_date": "never"})
            listed = await client.call_tool("list_memories", {"filters": {"created_at": {"gte": "2000-01-01"}}})
            return [merged.structured_content, replaced.structured_content, listed.structured_content]

    merged, replaced, listed = anyio.run(scenario)
    assert (merged["metadata"], merged["expires"]) == ({"city": "Porto", "a": 1}, "2099-01-01")
    assert replaced["metadata"] == {"b": 2} and "expires" not in replaced  # the brief leaves out what is not set
    assert [m["id"] for m in listed["memories"]] == [short_id(memory_id)]


# --- mistakes that say so ------------------------------------------------------------------------


def test_an_unknown_trimem_variable_is_a_warning_naming_the_closest(run: Callable,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIMEM_TRESHOLD", "0.5")
    result = run("list")
    assert "warning: 'TRIMEM_TRESHOLD' is not a trimem setting and is ignored; did you mean TRIMEM_THRESHOLD?" \
        in result.stderr
    assert output_json(result)["memories"] == []  # a warning, not an error


def test_a_new_database_is_announced(run: Callable, tmp_path: Path) -> None:
    database = tmp_path / "new.db"
    added = CliRunner().invoke(cli, ["--db", str(database), "add", "Ana likes tea"])
    assert f"created new database at {database}" in added.stderr
    assert "created new database" not in CliRunner().invoke(cli, ["--db", str(database), "list"]).stderr


@pytest.mark.only_on("sqlite")
def test_backup_into_a_folder(run: Callable, tmp_path: Path, config: Config,
                              engine_factory: Callable[[Config], Engine]) -> None:
    run("add", "Ana lives in Lisbon")
    folder = tmp_path / "backups"
    run("backup", f"{folder}/")  # not there yet: the trailing slash says it is a folder
    run("backup", str(folder))  # there now
    copies = sorted(folder.iterdir())
    assert len(copies) == 2 and all(copy.name.startswith("memories-") and copy.suffix == ".db" for copy in copies)
    with engine_factory(config.replace("store", db_path=str(copies[0]))) as copy:
        assert [m.text for m in copy.list(user_id="default")] == ["Ana lives in Lisbon"]


def test_delete_all_names_the_scope_before_asking(run: Callable, engine: Engine, db_path: Path) -> None:
    engine.add("Bob likes hiking", user_id="bob")
    refused = run("delete-all", ok=False, input="y\n")
    assert "name a scope: at least one of --user-id, --agent-id or --run-id" in refused.output
    assert "Forget" not in refused.output  # refused before asking
    kept = run("delete-all", "--user-id", "bob", ok=False, input="n\n")
    assert f"Forget every memory of --user-id='bob' in {engine.location}? [y/N]" in kept.output
    assert [m.text for m in engine.list(user_id="bob")] == ["Bob likes hiking"]
    assert "deleted_count" in run("delete-all", "--user-id", "bob", input="y\n").stdout
    assert engine.list(user_id="bob") == []


def test_errors_speak_of_options_not_tool_arguments(run: Callable) -> None:
    assert "Invalid value for '--limit': must be between 1 and 100" in run("list", "--limit", "0", ok=False).output
    assert "Invalid value for '--threshold'" in run("search", "x", "--threshold", "2", ok=False).output
    past = run("add", "x", "--expiration-date", "2001-01-01", ok=False).output
    assert "--expiration-date 2001-01-01 is in the past" in past and "expiration_date" not in past
    moved = run("update", "abcd1234", "--metadata", '{"user_id": "bob"}', ok=False).output
    assert "--user-id" in moved and "update_memory" not in moved


def test_mcp_out_of_range_top_k_is_the_plain_message(config: Config,
                                                     engine_factory: Callable[[Config], Engine]) -> None:
    import anyio
    from mcp import Client

    from mcp_server.tools.server import build_server

    async def scenario() -> tuple[str, dict]:
        async with Client(build_server(config, open_engine=engine_factory)) as client:
            result = await client.call_tool("search_memory", {"query": "x", "top_k": 500})
            assert result.is_error
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            return result.content[0].text, tools["search_memory"].input_schema["properties"]["top_k"]

    message, schema = anyio.run(scenario)
    assert message.endswith(": top_k must be between 1 and 100, got 500") and "pydantic" not in message
    assert (schema["minimum"], schema["maximum"]) == (1, 100)  # the schema still says so


def test_doctor_names_versions_and_configuration_without_loading_spacy(
    db_arg: str, config: Config, embedder: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from store.analysis.nlp import NLP

    unloaded = NLP()
    monkeypatch.setattr("store.engine.Engine",
                        lambda config, **options: Engine(config, embedder=embedder, nlp=unloaded, **options))
    Engine(config, embedder=embedder, nlp=unloaded).close()
    monkeypatch.setenv("TRIMEM_USER_ID", "ana")
    config_file = tmp_path / "trimem.toml"
    config_file.write_text('[limits]\nmax_top_k = 50\n')
    result = CliRunner().invoke(cli, ["--config", str(config_file), "--db", db_arg, "doctor"])
    assert result.exit_code == 0, result.output
    status = output_json(result)
    assert set(status["versions"]) >= {"trimem", "python", "torch"} and status["versions"]["python"]
    assert status["versions"]["torch"].startswith("2.")
    sources = status["configuration"]["sources"]
    assert sources[0].startswith("defaults: ") and f"file: {config_file}" in sources
    assert any(s.startswith("environment: ") and "TRIMEM_USER_ID" in s for s in sources)
    assert "options: --db" in sources
    settings = status["configuration"]["settings"]
    assert (settings["server"]["user_id"], settings["limits"]["max_top_k"]) == ("ana", 50)
    assert status["spacy_tier"] and status["spacy_loaded"] is False and not unloaded.loaded


# --- one user across surfaces: users and stats -------------------------------------------------


def test_users_and_stats(run: Callable, engine: Engine, config: Config, terminal: None,
                         monkeypatch: pytest.MonkeyPatch) -> None:
    engine.add("Ana likes tea", user_id="default")
    engine.add("Bob likes hiking", user_id="bob")
    engine.add("Bob's planner books trains", user_id="bob", agent_id="planner")
    with monkeypatch.context() as past:
        past.setattr("store.clock.today", lambda: "1999-12-31")
        engine.add("Bob flies today", user_id="bob", expiration_date="2000-01-01")
    scopes = output_json(run("users", "--json"))
    assert scopes["default_user_id"] == "default"
    assert [(s["user_id"], s["agent_id"], s["memories"], s["expired"]) for s in scopes["scopes"]] == [
        ("bob", None, 2, 1), ("bob", "planner", 1, 0), ("default", None, 1, 0)
    ]
    table = run("users").stdout.splitlines()
    assert table[0].split() == ["user_id", "agent_id", "run_id", "memories", "expired", "default"]
    assert table[1].split() == ["bob", "-", "-", "2", "1", "no"]
    assert table[3].split() == ["default", "-", "-", "1", "0", "yes"]
    numbers = output_json(run("stats", "--json"))
    assert (numbers["memories"], numbers["expired"]) == (4, 1)
    assert numbers["users"] == {"bob": {"memories": 3, "expired": 1}, "default": {"memories": 1, "expired": 0}}
    assert numbers["file_bytes"] > 0 and numbers["database"] == config.location
    assert numbers["embedding_model"] == "all-MiniLM-L6-v2"
    assert "memories:   4 (1 expired)" in run("stats").stdout


# --- trimem export and trimem import -----------------------------------------------------------


def test_export_then_import_into_another_database(run: Callable, engine: Engine, tmp_path: Path,
                                                  engine_factory: Callable[[Config], Engine],
                                                  another_store: Callable[[str], Config]) -> None:
    run("add", "Ana is allergic to peanuts", "--metadata", '{"category": "health"}')
    run("add", "Bob likes hiking", "--user-id", "bob")
    target = tmp_path / "out" / "memories.jsonl"
    target.parent.mkdir()
    result = run("export", str(target), "--history")
    assert result.stderr.strip() == f"exported 2 memories and 2 history events to {target}"
    assert result.stdout == "" and not list(target.parent.glob(".*partial"))
    header, *lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert header["counts"] == {"memories": 2, "history_events": 2}
    assert {line["text"] for line in lines} == {"Ana is allergic to peanuts", "Bob likes hiking"}

    copy_store = another_store("copy")
    imported = CliRunner().invoke(cli, ["--db", db_argument(copy_store), "import", str(target), "--json"])
    assert imported.exit_code == 0, imported.output
    summary = json.loads(imported.stdout)
    assert (summary["imported"], summary["skipped_same_id"], summary["dry_run"]) == (2, 0, False)
    with engine_factory(copy_store) as copy:
        assert [m.id for m in copy.list(user_id="bob")] == [m.id for m in engine.list(user_id="bob")]
    again = CliRunner().invoke(cli, ["--db", db_argument(copy_store), "import", str(target), "--json"])
    assert json.loads(again.stdout)["skipped_same_id"] == 2


def test_export_to_stdout_narrowed_to_one_user(run: Callable) -> None:
    run("add", "Ana is allergic to peanuts")
    run("add", "Bob likes hiking", "--user-id", "bob")
    result = run("export", "--user-id", "bob")
    header, *lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert header["scope"] == {"user_id": "bob"} and [line["text"] for line in lines] == ["Bob likes hiking"]
    assert "exported 1 memories to stdout" in result.stderr


def test_import_with_a_bad_line_imports_nothing_and_names_it(run: Callable, engine: Engine, tmp_path: Path) -> None:
    path = tmp_path / "export.jsonl"
    good = [json.dumps({"text": f"Ana fact number {i}", "user_id": "ana"}) for i in range(300)]
    path.write_text("\n".join([json.dumps({"format": "trimem-memories", "format_version": 1}), *good,
                               '{"text": "x", "user_id": "ana", "metdata": {}}']) + "\n")
    result = run("import", str(path), ok=False)
    assert result.exit_code == 1
    assert result.output.strip().startswith(f"Error: {path}, line 302: unknown key 'metdata'")
    assert "Traceback" not in result.output
    assert engine.status()["counts"]["memories"] == 0  # the chunks before it were not written either


def test_import_from_a_peer_into_a_named_user_with_a_dry_run_first(run: Callable, engine: Engine,
                                                                    terminal: None) -> None:
    fixture = str(Path(__file__).parent / "fixtures" / "mcp-memory.jsonl")
    dry = run("import", fixture, "--from", "mcp-memory", "--user-id", "ana", "--dry-run")
    assert dry.stdout.startswith("would import 7 of 7 memories (mcp-memory)")
    assert "read: 5 observations, 2 relations" in dry.stdout
    assert "left out: 1 entities without observations, 1 lines of type 'note'" in dry.stdout
    assert engine.list(user_id="ana") == []
    run("import", fixture, "--from", "mcp-memory", "--user-id", "ana")
    assert len(engine.list(user_id="ana")) == 7
    assert run("import", fixture, "--from", "nobody", ok=False).exit_code == 2


def test_import_progress_is_a_bar_on_a_terminal_and_nothing_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from mcp_server.cli import transfer as glue

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    monkeypatch.setattr(glue.sys, "stderr", screen)
    with glue.progress("importing") as update:
        update(256, 300)
        update(300, 300)
    assert "importing" in screen.getvalue() and "100%" in screen.getvalue()
    monkeypatch.setattr(glue.sys, "stderr", io.StringIO())
    with glue.progress("importing") as update:
        assert update is None


def test_token_create_list_revoke(run: Callable, engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    made = output_json(run("token", "create", "--user-id", "alice", "--agent-id", "support", "--name", "support bot",
                           "--expires", "2099-06-30"))
    secret = made["secret"]
    assert made["token"] == {**made["token"], "name": "support bot", "user_id": "alice", "agent_id": "support",
                             "expires_on": "2099-06-30", "admin": False, "prefix": secret[:11]}
    assert engine.tokens.verify(secret).name == "support bot"
    listed = run("token", "list", "--json")
    assert secret not in listed.output
    assert [token["name"] for token in output_json(listed)["tokens"]] == ["support bot"]
    monkeypatch.setattr("mcp_server.cli.output.stdout_is_terminal", lambda: True)
    table = run("token", "list").stdout
    assert f"{secret[:11]}…" in table and "user_id=alice agent_id=support" in table and secret not in table
    revoked = run("token", "revoke", secret[:7])
    assert "revoked token 'support bot'" in revoked.stderr
    assert engine.tokens.verify(secret) is None
    missing = run("token", "revoke", "support bot", ok=False)
    assert missing.exit_code == 1 and "no token is named" in missing.output and "Traceback" not in missing.output
    refused = run("token", "create", ok=False)
    assert refused.exit_code == 1 and "needs the --user-id" in refused.output
