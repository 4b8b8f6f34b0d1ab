"""Stores analysed by older rules are brought up to date when opened: terms and entity links
rewritten, nothing else touched."""

from __future__ import annotations

import logging

import pytest

from store import Config, Engine, MemoryInput
from store.analysis.embeddings import OnnxEmbedder
from store.analysis.nlp import NLP
from store.analysis.reanalysis import ANALYSIS_VERSION
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


def test_an_older_store_is_analysed_again_when_opened(
    config: Config, embedder: OnnxEmbedder, nlp: NLP, caplog: pytest.LogCaptureFixture
) -> None:
    with Engine(config, embedder=embedder, nlp=nlp) as engine:
        engine.add_many([MemoryInput(text, {"k": i}) for i, text in enumerate(OLD_TERMS)], user_id="ana")
        before = {memory.id: memory for memory in engine.list(user_id="ana")}
        history = {memory_id: engine.history(memory_id, user_id="ana") for memory_id in before}
        age(engine)
        by_name = engine.explain("Andreas", user_id="ana").analysis
        assert by_name.lemmatized_terms == ["andreas"] and "bm25" not in by_name.signals_active
        allergy = next(memory.id for memory in before.values() if "Allergic" in memory.text)
        assert engine.entities(allergy, user_id="ana") == ["allergic", "andreas weber"]

    with caplog.at_level(logging.WARNING, logger="store.analysis.reanalysis"), Engine(config, embedder=embedder, nlp=nlp) as engine:
        assert "analysing 2 stored memories again" in caplog.text
        with engine.backend.snapshot() as view:
            assert view.analysis_version() == ANALYSIS_VERSION
        keyword_hits = engine.explain("Andreas", user_id="ana", threshold=0.0).hits
        assert {hit.memory.text for hit in keyword_hits if hit.details.bm25_score > 0} == set(OLD_TERMS)
        assert engine.entities(allergy, user_id="ana") == ["andreas weber"]
        assert engine.list_by_entity("allergic", user_id="ana") == []
        top = engine.explain(QUERY, user_id="ana").hits[0]
        assert top.memory.text == "Andreas Weber: Allergic to penicillin" and top.details.bm25_score > 0
        after = {memory.id: memory for memory in engine.list(user_id="ana")}
        assert after == before
        assert {memory_id: engine.history(memory_id, user_id="ana") for memory_id in after} == history

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="store.analysis.reanalysis"), Engine(config, embedder=embedder, nlp=nlp):
        assert "again" not in caplog.text


def test_a_new_store_records_the_current_version(engine: Engine) -> None:
    with engine.backend.snapshot() as view:
        assert view.analysis_version() == ANALYSIS_VERSION
