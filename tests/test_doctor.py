"""``trimem doctor --check`` offers what the backend can do and refuses the rest in one line:
``--deep`` needs the ``deep_check`` capability, and a failed check suggests ``--repair`` only
where the ``repair`` capability exists (``store.backend.CAPABILITIES``). It counts the memories
the language model failed on, which the next open that can write analyses again. Both backends,
through the real CLI on a real store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner, Result

from mcp_server.cli import cli
from store import Config, Engine, MemoryInput
from store.analysis.embeddings import OnnxEmbedder
from store.analysis.nlp import NLP
from store.analysis.reanalysis import DEGRADED_CHECK, DEGRADED_DETAIL
from store.backend import WAYS_AROUND, Unsupported
from store.records import Violation


@pytest.fixture
def doctor(db_arg: str, engine_factory: Callable[[Config], Engine],
           monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    """``doctor(*options)``: ``trimem --db <the test's store> doctor OPTIONS`` in process, with the session's models."""
    monkeypatch.setattr("store.engine.Engine", engine_factory)
    return lambda *options: CliRunner().invoke(cli, ["--db", db_arg, "doctor", *options])


def unlink_every_entity(config: Config, engine: Engine) -> None:
    """Damage behind the engine's back that both backends' checks find: entities left linked to no memory."""
    if config.store.database_url:
        import psycopg

        with psycopg.connect(config.store.database_url, autocommit=True) as conn:
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


def test_a_memory_the_model_failed_on_is_marked_counted_and_analysed_again_on_the_next_open(
    doctor: Callable[..., Result], config: Config, embedder: OnnxEmbedder, nlp: NLP,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
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
        checked = doctor("--check")  # opens the store where it can write: analysed again, failing again
        assert checked.exit_code == 1 and checked.output.splitlines() == [
            f"{DEGRADED_CHECK}: {DEGRADED_DETAIL.format(2)}",
            "Error: 1 problem(s) found; the line above says what fixes it",
        ]

    with caplog.at_level(logging.WARNING, logger="store.analysis.reanalysis"), \
            Engine(config, embedder=embedder, nlp=nlp) as engine:
        assert "analysing 2 stored memories again: the language model failed on them" in caplog.text
        with engine.backend.snapshot() as view:
            assert view.degraded_memories() == []
        assert engine.entities(added.memory.id, user_id="ana") == ["ana", "globex", "lisbon"]
        assert engine.check() == []
        hits = engine.explain("Globex", user_id="ana", threshold=0.0).hits
        assert {hit.memory.text for hit in hits if hit.details.bm25_score > 0} == {alone, in_batch}
    assert doctor("--check").stdout == "ok: no problems found\n"
