"""Linking a memory to its entities: the one rule shared by add, update and repair."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from store.analysis.entities import Entity
from store.backend import Transaction
from store.ranking import scoring
from store.scope import Scope

ENTITY_SAME_THRESHOLD = 0.95
"""A new entity this similar to a stored one in the same scope is the same entity (Mem0)."""


def link_entities(
    txn: Transaction,
    rowid: int,
    scope: Scope,
    entities: Sequence[Entity],
    vectors: Mapping[str, np.ndarray],
) -> None:
    """Link a memory to each entity: the same normalised text, else a near-identical entity
    (similarity ≥ 0.95), else a new one, all filed under the memory's own scope.

    ``vectors`` maps each entity's normalised text to its embedding.
    """
    for entity in entities:
        entity_id = txn.find_entity_exact(scope, entity.normalized)
        if entity_id is None:
            nearest = txn.nearest_entity(scope, vectors[entity.normalized])
            if nearest and scoring.similarity_from_distance(nearest[1]) >= ENTITY_SAME_THRESHOLD:
                entity_id = nearest[0]
            else:
                entity_id = txn.insert_entity(
                    scope, entity.text, entity.normalized, entity.entity_type, vectors[entity.normalized]
                )
        txn.link_entity(rowid, entity_id, scope)
