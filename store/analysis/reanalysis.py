"""Analysing stored memories again when the analysis rules change.

A memory's keyword terms and entity links are derived from its text by ``store.analysis.nlp``'s
rules, at write time. When a release changes those rules (``ANALYSIS_VERSION``), the
memories written before it would keep terms a query no longer produces: "Ines" stored as
``ine`` would never meet a query's ``ines``. So a store whose recorded version is older is
analysed again when an engine that can write opens it: every memory's terms rewritten and
its entities relinked, in batches of one transaction each, the version recorded last. The
texts, ids, vectors and history do not change. An interrupted run starts over on the next
open; a memory edited meanwhile keeps what its edit wrote.

The same path analyses again a memory the language model failed on when it was written: the
write kept the plain rule's terms and no entities rather than fail, and marked it
(``analysis_degraded``). Each open that can write tries the marked memories again and clears
the mark of each one that succeeds; ``doctor --check`` counts the ones left.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial

import numpy as np

from store import retries
from store.analysis.embeddings import NameVectors
from store.analysis.linking import link_entities
from store.analysis.nlp import NLP, Analysis
from store.backend import Backend, MemoryRow, Transaction
from store.scope import EVERY_SCOPE, Scope

logger = logging.getLogger(__name__)

ANALYSIS_VERSION = 2
"""The rules that turn a text into terms and entities. 1: Mem0's lemmas and spaCy's entities.
2: a capitalised word the lemmatizer does not know keeps its form ("Ines", not "ine"); no
entity of one adjective or sentence opener."""

BATCH = 256
"""Memories analysed per transaction."""

DEGRADED_CHECK = "analysis_degraded"
"""The name ``doctor --check`` gives the memories the language model failed on."""
DEGRADED_DETAIL = (
    "{} memories hold plain keyword terms and no entity links: the language model failed on their text when they "
    "were written. trimem analyses them again whenever it opens this store where it can write to it, so fix what "
    "the log names as the model's failure, then run `trimem doctor --check` again where the store can be written"
)
"""What that check reports (``str.format`` over how many), with what fixes it: no repair does,
since the text needs the model; the next open that can write analyses them again."""


@dataclass(frozen=True)
class Due:
    """The memories to analyse again when the store is opened, and why."""

    memories: list[MemoryRow]
    rules_changed: bool
    """True: every memory, made by older rules (the version is recorded after); false: the
    memories marked ``analysis_degraded``."""

    @property
    def cause(self) -> str:
        """Why, after "analysing N stored memories again:"."""
        if self.rules_changed:
            return "the keyword and entity rules changed"
        return "the language model failed on them when they were written"

    @property
    def reason(self) -> str:
        """Why, after the store's name, for a store this process cannot write."""
        if self.rules_changed:
            return "was analysed by older keyword and entity rules"
        return f"holds {len(self.memories)} memories the language model failed on when they were written"


def due(backend: Backend) -> Due | None:
    """What the store holds to analyse again: every memory when its rules are older, else the
    marked ones; ``None`` when nothing (the marked ones are found through an index of them alone)."""
    with backend.snapshot() as view:
        if view.analysis_version() < ANALYSIS_VERSION:
            return Due(list(view.export_memories(EVERY_SCOPE, None)), rules_changed=True)
        degraded = view.degraded_memories()
    return Due(degraded, rules_changed=False) if degraded else None


def reanalyse(backend: Backend, nlp: NLP, names: NameVectors, due: Due) -> int:
    """Rewrite the due memories' terms, entity links and marks by the current rules; how many memories."""
    rows = [(row.rowid, row.scope, row.text) for row in due.memories]
    if rows:
        logger.warning("analysing %d stored memories again: %s", len(rows), due.cause)
    for start in range(0, len(rows), BATCH):
        batch = rows[start : start + BATCH]
        analyses = nlp.analyze_batch([text for _, _, text in batch])
        entities = list(dict.fromkeys(e.normalized for a in analyses for e in a.entities))
        vectors = dict(zip(entities, names.embed(entities)))
        retries.transact(backend, partial(_rewrite, batch=batch, analyses=analyses, vectors=vectors))
    if due.rules_changed:
        retries.transact(backend, lambda txn: txn.set_analysis_version(ANALYSIS_VERSION))
    return len(rows)


def _rewrite(txn: Transaction, batch: list[tuple[int, Scope, str]], analyses: list[Analysis],
             vectors: dict[str, np.ndarray]) -> None:
    """One batch's new terms, marks and entity links, for the memories still as they were read."""
    current = txn.memories_by_rowid([rowid for rowid, _, _ in batch], EVERY_SCOPE)
    for (rowid, scope, text), analysis in zip(batch, analyses):
        row = current.get(rowid)
        if row is None or row.text != text:
            continue  # deleted or edited since: its own write analysed it
        txn.set_terms(rowid, scope, analysis.lemmatized)
        txn.set_analysis_degraded(rowid, scope, analysis.degraded)
        txn.unlink_entities(rowid, scope)
        link_entities(txn, rowid, scope, analysis.entities, vectors)
    txn.delete_orphan_entities()
