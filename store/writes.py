"""Writing new memories in one go: their rows, vectors and postings together, then their entity
links and their history, each kind in as few statements as the backend allows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from store.analysis.entities import Entity
from store.analysis.linking import EntityLinker
from store.backend import NewMemory, Transaction
from store.records import HistoryEvent


@dataclass(frozen=True)
class MemoryWrite:
    """A new memory, the entities it names, and the events its history starts with."""

    memory: NewMemory
    entities: Sequence[Entity]
    events: Sequence[HistoryEvent]


def write_memories(txn: Transaction, writes: Sequence[MemoryWrite], entity_vectors: Mapping[str, np.ndarray]) -> list[int]:
    """Store the memories in the order given (``Transaction.insert_memories``), link them to their
    entities and record their events; their keys, in the same order."""
    keys = txn.insert_memories([write.memory for write in writes])
    linker = EntityLinker(txn, entity_vectors)
    for write, key in zip(writes, keys):
        linker.link(key, write.memory.scope, write.entities)
    linker.flush()
    txn.add_history([(write.memory.id, write.memory.scope, event) for write in writes for event in write.events])
    return keys
