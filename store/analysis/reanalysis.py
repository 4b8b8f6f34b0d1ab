"""Analysing stored memories again when the analysis rules change.

A memory's keyword terms and entity links are derived from its text by ``store.analysis.nlp``'s
rules, at write time. When a release changes those rules (``ANALYSIS_VERSION``), the
memories written before it would keep terms a query no longer produces: "Ines" stored as
``ine`` would never meet a query's ``ines``. So a store whose recorded version is older is
analysed again when an engine that can write opens it: every memory's terms rewritten and
its entities relinked, in batches of one transaction each, the version recorded last. The
texts, ids, vectors and history do not change. An interrupted run starts over on the next
open; a memory edited meanwhile keeps what its edit wrote.
"""

from __future__ import annotations

import logging

from store.analysis.embeddings import NameVectors
from store.analysis.linking import link_entities
from store.analysis.nlp import NLP
from store.backend import Backend
from store.scope import EVERY_SCOPE

logger = logging.getLogger(__name__)

ANALYSIS_VERSION = 2
"""The rules that turn a text into terms and entities. 1: Mem0's lemmas and spaCy's entities.
2: a capitalised word the lemmatizer does not know keeps its form ("Ines", not "ine"); no
entity of one adjective or sentence opener."""

BATCH = 256
"""Memories analysed per transaction."""


def outdated(backend: Backend) -> bool:
    """Whether the store's terms and links were made by older rules."""
    with backend.snapshot() as view:
        return view.analysis_version() < ANALYSIS_VERSION


def reanalyse(backend: Backend, nlp: NLP, names: NameVectors) -> int:
    """Rewrite every memory's terms and entity links by the current rules; how many memories."""
    with backend.snapshot() as view:
        rows = [(row.rowid, row.scope, row.text) for row in view.export_memories(EVERY_SCOPE, None)]
    if rows:
        logger.warning("analysing %d stored memories again: the keyword and entity rules changed", len(rows))
    for start in range(0, len(rows), BATCH):
        batch = rows[start : start + BATCH]
        analyses = nlp.analyze_batch([text for _, _, text in batch])
        entities = list(dict.fromkeys(e.normalized for a in analyses for e in a.entities))
        vectors = dict(zip(entities, names.embed(entities)))
        with backend.transaction() as txn:
            current = txn.memories_by_rowid([rowid for rowid, _, _ in batch], EVERY_SCOPE)
            for (rowid, scope, text), analysis in zip(batch, analyses):
                row = current.get(rowid)
                if row is None or row.text != text:
                    continue  # deleted or edited since: its own write analysed it
                txn.set_terms(rowid, scope, analysis.lemmatized)
                txn.unlink_entities(rowid, scope)
                link_entities(txn, rowid, scope, analysis.entities, vectors)
            txn.delete_orphan_entities()
    with backend.transaction() as txn:
        txn.set_analysis_version(ANALYSIS_VERSION)
    return len(rows)
