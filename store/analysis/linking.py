"""Linking memories to their entities: the one rule shared by add, update and repair."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from store.analysis.entities import Entity
from store.backend import Transaction
from store.ranking import scoring
from store.scope import Scope

ENTITY_SAME_THRESHOLD = 0.95
"""A new entity this similar to a stored one in the same scope is the same entity (Mem0)."""


class EntityLinker:
    """Links memories to their entities inside one transaction: each memory to each of its
    entities by the same normalised text, else a near-identical entity (similarity ≥ 0.95), else
    a new one, all filed under the memory's own scope.

    ``vectors`` maps each entity's normalised text to its embedding. A name is looked up once per
    scope however many memories name it (the entities this transaction made are among those it
    finds), and the links are written together by ``flush``."""

    def __init__(self, txn: Transaction, vectors: Mapping[str, np.ndarray]) -> None:
        self.txn = txn
        self.vectors = vectors
        self.entity_ids: dict[tuple[Scope, str], int] = {}
        self.links: dict[tuple[int, int], Scope] = {}

    def link(self, rowid: int, scope: Scope, entities: Sequence[Entity]) -> None:
        for entity in entities:
            key = (scope, entity.normalized)
            if key not in self.entity_ids:
                self.entity_ids[key] = self._resolve(scope, entity)
            self.links[(rowid, self.entity_ids[key])] = scope

    def _resolve(self, scope: Scope, entity: Entity) -> int:
        entity_id = self.txn.find_entity_exact(scope, entity.normalized)
        if entity_id is not None:
            return entity_id
        vector = self.vectors[entity.normalized]
        nearest = self.txn.nearest_entity(scope, vector)
        if nearest and scoring.similarity_from_distance(nearest[1]) >= ENTITY_SAME_THRESHOLD:
            return nearest[0]
        return self.txn.insert_entity(scope, entity.text, entity.normalized, entity.entity_type, vector)

    def flush(self) -> None:
        """Write the links made so far."""
        self.txn.insert_links([(rowid, entity_id, scope) for (rowid, entity_id), scope in self.links.items()])
        self.links.clear()


def link_entities(
    txn: Transaction,
    rowid: int,
    scope: Scope,
    entities: Sequence[Entity],
    vectors: Mapping[str, np.ndarray],
) -> None:
    """Link one memory to its entities (``EntityLinker``)."""
    linker = EntityLinker(txn, vectors)
    linker.link(rowid, scope, entities)
    linker.flush()
