"""Linking a memory to its entities: the one rule shared by add, update and repair."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import apsw
import numpy as np

from . import db, scoring
from .entities import Entity

ENTITY_SAME_THRESHOLD = 0.95
"""A new entity this similar to a stored one in the same scope is the same entity (Mem0)."""


def link_entities(
    conn: apsw.Connection,
    rowid: int,
    scope: dict[str, str],
    entities: Sequence[Entity],
    vectors: Mapping[str, np.ndarray],
) -> None:
    """Link a memory to each entity: the same normalised text, else a near-identical entity
    (similarity ≥ 0.95), else a new one, all within the memory's own scope.

    ``vectors`` maps each entity's normalised text to its embedding. Runs inside the
    caller's write transaction.
    """
    for entity in entities:
        entity_id = db.find_entity_exact(conn, scope, entity.normalized)
        if entity_id is None:
            nearest = db.nearest_entity(conn, scope, vectors[entity.normalized])
            if nearest and scoring.similarity_from_distance(nearest[1]) >= ENTITY_SAME_THRESHOLD:
                entity_id = nearest[0]
            else:
                entity_id = db.insert_entity(
                    conn, scope, entity.text, entity.normalized, entity.entity_type, vectors[entity.normalized]
                )
        db.link_entity(conn, rowid, entity_id)
