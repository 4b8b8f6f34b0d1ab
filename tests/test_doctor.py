"""``trimem doctor --check`` offers what the backend can do and refuses the rest in one line:
``--deep`` needs the ``deep_check`` capability, and a failed check suggests ``--repair`` only
where the ``repair`` capability exists (``store.backend.CAPABILITIES``). It counts the memories
the language model failed on, which ``--repair`` analyses again, and the memories of older
analysis rules as a notice, which read-only commands leave as they are and ``--repair`` brings up
to date. Both backends, through the real CLI on a real store.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner, Result

from mcp_server.cli import cli
from store import Config, Engine, MemoryInput
from store.analysis.embeddings import OnnxEmbedder
from store.analysis.nlp import NLP
from store.analysis.reanalysis import ANALYSIS_VERSION, DEGRADED_CHECK, DEGRADED_DETAIL
from store.backend import WAYS_AROUND, Unsupported
from store.records import Violation
from store.scope import EVERY_SCOPE, Scope


@pytest.fixture
def doctor(db_arg: str, engine_factory: Callable[[Config], Engine],
           monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    """``doctor(*options)``: ``trimem --db <the test's store> doctor OPTIONS`` in process, with the session's models."""
    monkeypatch.setattr("store.engine.Engine", engine_factory)
    return lambda *options: CliRunner().invoke(cli, ["--db", db_arg, "doctor", *options])


def unlink_every_entity(config: Config, engine: Engine) -> None:
    """Damage behind the engine's back that both backends' checks find: entities left linked to no memory."""
    if config.store.database_url:
        import postgres_sql

        with postgres_sql.connect(config.store.database_url) as conn:
            conn.execute("DELETE FROM memory_entities")
    else:
        from sqlite_files import execute

        execute(engine, "DELETE FROM memory_entities")


def test_a_deep_check_runs_where_the_backend_can_and_is_refused_in_one_line_where_not(
    doctor: Callable[..., Result], config: Config, engine: Engine
) -> None:
    engine.add("Ana works at Globex in Lisbon", user_id="ana")
    deep = doctor("--check", "--deep")
    if not config.store.database_url:  # SQLite runs the entity analysis again
        assert deep.exit_code == 0 and deep.stdout == "ok: no problems found\n"
        return
    refusal = f"a deep check is not available on {engine.location}: {WAYS_AROUND['deep_check']}"
    assert deep.exit_code == 1 and deep.output == f"Error: {refusal}\n"  # one line, no traceback
    with pytest.raises(Unsupported, match="^a deep check is not available on "):
        engine.check(deep=True)
    assert doctor("--check").stdout == "ok: no problems found\n"  # the check it has still runs


def test_a_failed_check_suggests_repair_only_where_the_backend_can_repair(
    doctor: Callable[..., Result], config: Config, engine: Engine
) -> None:
    engine.add("Ana works at Globex in Lisbon", user_id="ana")
    unlink_every_entity(config, engine)
    checked = doctor("--check")
    assert checked.exit_code == 1 and "Traceback" not in checked.output
    *problems, last = checked.output.splitlines()
    assert problems and last.startswith(f"Error: {len(problems)} problem(s) found; ")
    if not config.store.database_url:  # SQLite rebuilds derived rows
        assert last.endswith("; `trimem doctor --repair` fixes derived rows")
        assert doctor("--repair").exit_code == 0 and engine.check() == []
    else:
        assert "--repair" not in checked.output and last.endswith(f"; {WAYS_AROUND['repair']}")


class FailsOn:
    """A spaCy pipeline that raises for any text naming ``word`` (in any case), as a broken model
    would, and runs every other text as the real one does."""

    def __init__(self, language: Any, word: str) -> None:
        self._language, self._word = language, word

    def _refuse(self, text: str) -> None:
        if self._word in text.lower():
            raise RuntimeError(f"the pipeline broke on {text!r}")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._language, name)

    def __call__(self, text: str, **options: Any) -> Any:
        self._refuse(text)
        return self._language(text, **options)

    def make_doc(self, text: str) -> Any:
        self._refuse(text)
        return self._language.make_doc(text)

    def pipe(self, texts: Any, **options: Any) -> Any:
        texts = list(texts)
        for text in texts:
            self._refuse(text)
        return self._language.pipe(texts, **options)


def test_a_memory_the_model_failed_on_is_marked_counted_and_analysed_again_by_repair(
    doctor: Callable[..., Result], config: Config, embedder: OnnxEmbedder, nlp: NLP, monkeypatch: pytest.MonkeyPatch,
) -> None:
    alone, in_batch = "Ana works at Globex in Lisbon", "Bruno left Globex for Initech"
    with monkeypatch.context() as broken:
        broken.setattr(nlp, "_nlp", FailsOn(nlp._nlp, "globex"))
        with Engine(config, embedder=embedder, nlp=nlp) as engine:
            (added,) = engine.add(alone, user_id="ana")  # one text: the query's path
            engine.add_many([MemoryInput(in_batch), MemoryInput("Carla lives in Porto")], user_id="ana")  # a batch
            with engine.backend.snapshot() as view:
                assert [row.text for row in view.degraded_memories()] == [alone, in_batch]
            assert engine.entities(added.memory.id, user_id="ana") == []
            assert engine.check() == [Violation(DEGRADED_CHECK, DEGRADED_DETAIL.format(2))]
        assert doctor("--repair").exit_code == 0  # analysed again, failing again
        checked = doctor("--check")
        assert checked.exit_code == 1 and checked.stdout.splitlines() == [
            f"{DEGRADED_CHECK}: {DEGRADED_DETAIL.format(2)}",
        ] and checked.stderr.splitlines()[-1] == "Error: 1 problem(s) found; the line above says what fixes it"

    repaired = doctor("--repair")
    assert repaired.exit_code == 0, repaired.output
    assert "analysing 2 stored memories again: the language model failed on them" in repaired.stderr
    with Engine(config, embedder=embedder, nlp=nlp) as engine:
        with engine.backend.snapshot() as view:
            assert view.degraded_memories() == []
        assert engine.entities(added.memory.id, user_id="ana") == ["ana", "globex", "lisbon"]
        assert engine.check() == []
        hits = engine.explain("Globex", user_id="ana", threshold=0.0).hits
        assert {hit.memory.text for hit in hits if hit.details.bm25_score > 0} == {alone, in_batch}
    assert doctor("--check").stdout == "ok: no problems found\n"


OLDER = 200
"""Memories of the older store the tests below make."""


def older_store(engine: Engine) -> None:
    """``OLDER`` memories, on a store whose recorded analysis rules are older than this trimem's."""
    engine.add_many([MemoryInput(f"Ines packed box {number} for Porto") for number in range(OLDER)], user_id="ana")
    with engine.backend.transaction() as txn:
        txn.set_analysis_version(1)


def whole_store(engine: Engine) -> tuple[Any, ...]:
    """Everything a command could change: the rules and cursor recorded, every memory, its entities
    and its keyword hits."""
    with engine.backend.snapshot() as view:
        rows = list(view.export_memories(EVERY_SCOPE, None))
        recorded = (view.analysis_version(), view.reanalysis_cursor(), view.counts())
        keywords = view.bm25_memories(["ine", "ines"], Scope("ana"), OLDER, None, None)
    entities = [engine.entities(row.id, user_id="ana") for row in rows]
    return recorded, rows, entities, keywords


def test_read_only_commands_on_an_older_store_change_nothing_and_count_what_waits(
    db_arg: str, config: Config, engine: Engine, engine_factory: Callable[[Config], Engine],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    older_store(engine)
    before = whole_store(engine)
    monkeypatch.setattr("store.engine.Engine", engine_factory)

    def trimem(*arguments: str) -> Result:
        result = CliRunner().invoke(cli, ["--db", db_arg, *arguments])
        assert result.exit_code == 0 and "Traceback" not in result.output, result.output
        return result

    assert json.loads(trimem("stats", "--json").stdout)["awaiting_reanalysis"] == OLDER
    assert f"analysis:   {OLDER} memories still hold older rules' terms" in trimem("stats", "--format", "table").stdout
    notice = f"notice: {OLDER} memories still hold the keyword terms and entity links of older rules"
    checked = trimem("doctor", "--check")
    assert checked.stdout == "ok: no problems found\n" and notice in checked.stderr  # a notice, not a problem
    status = trimem("doctor", "--json")
    assert json.loads(status.stdout)["awaiting_reanalysis"] == OLDER and notice in status.stderr
    for command in (["search", "Ines", "--user-id", "ana"], ["list", "--user-id", "ana"], ["users"]):
        trimem(*command)
    assert whole_store(engine) == before


def test_repair_analyses_an_older_store_to_the_end_with_progress(
    doctor: Callable[..., Result], config: Config, engine: Engine,
) -> None:
    older_store(engine)
    repaired = doctor("--repair")
    assert repaired.exit_code == 0 and "Traceback" not in repaired.output, repaired.output
    assert repaired.stderr.splitlines() == [
        f"analysing {OLDER} stored memories again: the keyword and entity rules changed",
        f"analysed again: {OLDER} of {OLDER} memories",
        f"done: {OLDER} memories analysed again",
    ]
    assert engine.reanalysis.waiting() == 0
    with engine.backend.snapshot() as view:
        assert view.analysis_version() == ANALYSIS_VERSION
    assert doctor("--check").stderr == ""  # no notice left
