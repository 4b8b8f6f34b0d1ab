"""Stores analysed by older rules open as they are, and a pass brings them up to date: terms and
entity links rewritten, nothing else touched; in committed batches whose progress survives an
interruption, in the background of a server that stops it when it stops."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from mcp_server.tools.state import State
from store import Config, Engine, MemoryInput
from store.analysis.embeddings import OnnxEmbedder
from store.analysis.nlp import NLP, Analysis
from store.analysis.reanalysis import ANALYSIS_VERSION, BATCH
from store.backend import NewEntity
from store.scope import Scope

OLD_TERMS = {
    "Andreas Weber: Allergic to penicillin": "andrea weber allergic penicillin",
    "Andreas Weber teaches chemistry in Basel": "andrea weber teach chemistry basel",
}
"""What version 1 stored for these texts: spaCy guessed "andrea" for the name."""
QUERY = "What did Andreas say about penicillin?"


def age(engine: Engine) -> None:
    """Make the store look written by version 1: the old terms, an "Allergic" entity, no version."""
    scope = Scope("ana")
    with engine.backend.snapshot() as view:
        rows = {row.text: row for row in view.export_memories(scope, None)}
    with engine.backend.transaction() as txn:
        for text, terms in OLD_TERMS.items():
            txn.set_terms(rows[text].rowid, scope, terms)
        vector = engine.embedder.embed_batch(["allergic"])[0]
        (allergic,) = txn.insert_entities([NewEntity(scope, "Allergic", "allergic", "ORG", vector)])
        txn.insert_links([(rows["Andreas Weber: Allergic to penicillin"].rowid, allergic, scope)])
        txn.set_analysis_version(1)


def test_an_older_store_opens_as_it_is_and_a_pass_brings_it_up_to_date(
    config: Config, embedder: OnnxEmbedder, nlp: NLP
) -> None:
    with Engine(config, embedder=embedder, nlp=nlp) as engine:
        engine.add_many([MemoryInput(text, {"k": i}) for i, text in enumerate(OLD_TERMS)], user_id="ana")
        before = {memory.id: memory for memory in engine.list(user_id="ana")}
        history = {memory_id: engine.history(memory_id, user_id="ana") for memory_id in before}
        age(engine)
        allergy = next(memory.id for memory in before.values() if "Allergic" in memory.text)

    with Engine(config, embedder=embedder, nlp=nlp) as engine:
        assert engine.reanalysis.waiting() == 2  # opening analysed nothing: searches serve the older terms
        by_name = engine.explain("Andreas", user_id="ana").analysis
        assert by_name.lemmatized_terms == ["andreas"] and "bm25" not in by_name.signals_active
        assert engine.entities(allergy, user_id="ana") == ["allergic", "andreas weber"]

        assert engine.reanalysis.run() == 2
        assert engine.reanalysis.waiting() == 0
        with engine.backend.snapshot() as view:
            assert view.analysis_version() == ANALYSIS_VERSION and view.reanalysis_cursor() is None
        keyword_hits = engine.explain("Andreas", user_id="ana", threshold=0.0).hits
        assert {hit.memory.text for hit in keyword_hits if hit.details.bm25_score > 0} == set(OLD_TERMS)
        assert engine.entities(allergy, user_id="ana") == ["andreas weber"]
        assert engine.list_by_entity("allergic", user_id="ana") == []
        top = engine.explain(QUERY, user_id="ana").hits[0]
        assert top.memory.text == "Andreas Weber: Allergic to penicillin" and top.details.bm25_score > 0
        after = {memory.id: memory for memory in engine.list(user_id="ana")}
        assert after == before
        assert {memory_id: engine.history(memory_id, user_id="ana") for memory_id in after} == history
        assert engine.reanalysis.run() == 0  # nothing left: the rules are recorded


def test_a_new_store_records_the_current_version(engine: Engine) -> None:
    with engine.backend.snapshot() as view:
        assert view.analysis_version() == ANALYSIS_VERSION


STALE = "stalemarker"
"""The keyword term every memory of ``older_store`` holds instead of its own, as older rules' terms."""
STORE_SIZE, SMALL_BATCH = 300, 50


def older_store(engine: Engine) -> list[int]:
    """``STORE_SIZE`` memories of ``ana`` holding the term ``STALE`` alone, on a store whose
    recorded rules are older; their keys, in order."""
    texts = [f"Ines packed box {number} for the move to Porto" for number in range(STORE_SIZE)]
    engine.add_many([MemoryInput(text) for text in texts], user_id="ana")
    with engine.backend.snapshot() as view:
        rows = list(view.export_memories(Scope("ana"), None))
    with engine.backend.transaction() as txn:
        for row in rows:
            txn.set_terms(row.rowid, row.scope, STALE)
        txn.set_analysis_version(1)
    return [row.rowid for row in rows]


def stale(engine: Engine) -> set[int]:
    """The keys of the memories still holding ``STALE``."""
    with engine.backend.snapshot() as view:
        return {rowid for rowid, _ in view.bm25_memories([STALE], Scope("ana"), STORE_SIZE, None, None)}


def stops_after(batches: int) -> Callable[[], bool]:
    """A ``stop`` that lets ``batches`` batches run."""
    asked = itertools.count()
    return lambda: next(asked) >= batches


def test_an_interrupted_pass_resumes_from_its_cursor_and_redoes_no_batch(
    config: Config, embedder: OnnxEmbedder, nlp: NLP
) -> None:
    with Engine(config, embedder=embedder, nlp=nlp) as engine:
        keys = older_store(engine)
    with Engine(config, embedder=embedder, nlp=nlp) as engine:
        assert engine.reanalysis.waiting() == STORE_SIZE and stale(engine) == set(keys)
        assert engine.reanalysis.run(batch=SMALL_BATCH, stop=stops_after(1)) == SMALL_BATCH
        with engine.backend.snapshot() as view:
            assert view.reanalysis_cursor() == (ANALYSIS_VERSION, keys[SMALL_BATCH - 1])
            assert view.analysis_version() == 1
        assert stale(engine) == set(keys[SMALL_BATCH:])
        with engine.backend.transaction() as txn:  # a mark on the finished batch shows whether it is done again
            txn.set_terms(keys[0], Scope("ana"), STALE)

    progress: list[tuple[int, int]] = []
    with Engine(config, embedder=embedder, nlp=nlp) as engine:  # the next start
        assert engine.reanalysis.waiting() == STORE_SIZE - SMALL_BATCH
        done = engine.reanalysis.run(batch=SMALL_BATCH, progress=lambda *counts: progress.append(counts))
        assert done == STORE_SIZE - SMALL_BATCH and stale(engine) == {keys[0]}
        assert progress[-1] == (done, done) and len(progress) == done // SMALL_BATCH
        with engine.backend.snapshot() as view:
            assert view.analysis_version() == ANALYSIS_VERSION and view.reanalysis_cursor() is None
        assert engine.check() == []


def test_a_batch_another_server_did_meanwhile_is_dropped(config: Config, embedder: OnnxEmbedder, nlp: NLP,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    with Engine(config, embedder=embedder, nlp=nlp) as first, Engine(config, embedder=embedder, nlp=nlp) as second:
        keys = older_store(first)
        analyse = nlp.analyze_batch
        other_passes: list[int] = []

        def while_first_analyses(texts: Sequence[str]) -> list[Analysis]:
            monkeypatch.setattr(nlp, "analyze_batch", analyse)
            other_passes.append(second.reanalysis.run(batch=SMALL_BATCH))  # the whole pass, meanwhile
            return analyse(texts)

        monkeypatch.setattr(nlp, "analyze_batch", while_first_analyses)
        assert first.reanalysis.run(batch=SMALL_BATCH) == 0 and other_passes == [STORE_SIZE]
        assert stale(first) == set() and first.reanalysis.waiting() == 0
        with first.backend.snapshot() as view:
            assert view.analysis_version() == ANALYSIS_VERSION and view.reanalysis_cursor() is None
        assert first.check() == [] and len(keys) == STORE_SIZE


def test_a_new_store_of_memories_records_the_current_rules(config: Config, embedder: OnnxEmbedder,
                                                            nlp: NLP) -> None:
    with Engine(config, embedder=embedder, nlp=nlp) as engine:
        engine.add("Ines moved to Porto", user_id="ana")
    with Engine(config, embedder=embedder, nlp=nlp) as engine:
        assert engine.reanalysis.waiting() == 0 and engine.reanalysis.backlog() is None


def reanalysis_thread() -> threading.Thread | None:
    """The background pass's thread, while it runs."""
    return next((thread for thread in threading.enumerate() if thread.name == "trimem-reanalysis"), None)


def eventually(condition: Callable[[], Any], within: float = 120) -> Any:
    """``condition()``'s first true value, asked until ``within`` seconds have passed (then fail)."""
    deadline = time.monotonic() + within
    while not (value := condition()):
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.05)
    return value


def test_a_server_analyses_an_older_store_in_the_background_and_stops_with_it(
    config: Config, embedder: OnnxEmbedder, nlp: NLP, engine_factory: Callable[[Config], Engine],
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    with Engine(config, embedder=embedder, nlp=nlp) as engine:
        keys = older_store(engine)
    analyse, batches = nlp.analyze_batch, []
    stopping = threading.Event()

    def first_batch_until_the_server_stops(texts: Sequence[str]) -> list[Analysis]:
        batches.append(len(texts))
        if len(batches) == 1:
            stopping.wait()
        return analyse(texts)

    monkeypatch.setattr(nlp, "analyze_batch", first_batch_until_the_server_stops)
    with caplog.at_level(logging.INFO, logger="store.analysis.reanalysis"):
        state = State(config, engine_factory)
        engine = state.engine()  # served at once, the pass still in its first batch
        assert engine.search("Ines", user_id="ana", top_k=1)
        thread = eventually(reanalysis_thread)
        join = thread.join
        monkeypatch.setattr(thread, "join", lambda *args: (stopping.set(), join(*args)))  # called once stop is asked
        state.close()
    assert not thread.is_alive() and batches == [BATCH]
    assert f"analysing {STORE_SIZE} stored memories again in the background: the keyword and entity rules " \
           "changed; searches meanwhile use the older terms" in caplog.text
    assert "stopped analysing stored memories again after 128, for the shutdown" in caplog.text

    monkeypatch.setattr(nlp, "analyze_batch", analyse)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="store.analysis.reanalysis"):
        state = State(config, engine_factory)  # the next start resumes after the first batch
        engine = state.engine()
        eventually(lambda: not reanalysis_thread() and "done analysing" in caplog.text)
        assert stale(engine) == set()
        with engine.backend.snapshot() as view:
            assert view.analysis_version() == ANALYSIS_VERSION and view.reanalysis_cursor() is None
        state.close()
    assert f"analysing {STORE_SIZE - BATCH} stored memories again in the background" in caplog.text
    assert f"done analysing {STORE_SIZE - BATCH} stored memories again" in caplog.text and len(keys) == STORE_SIZE

