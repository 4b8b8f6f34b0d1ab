"""Linking memories to their entities: the one rule shared by add, update and repair."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from store.analysis.entities import Entity
from store.backend import NewEntity, Transaction
from store.ranking import scoring
from store.scope import Scope

ENTITY_SAME_THRESHOLD = 0.95
"""A new entity this similar to a stored one in the same scope is the same entity (Mem0)."""


def cosine_distances(vectors: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """1 − the cosine similarity of each row of ``vectors`` to ``vector``, as the stores compute it."""
    norms = np.linalg.norm(vectors, axis=1) * np.linalg.norm(vector)
    return 1.0 - (vectors @ vector) / np.maximum(norms, 1e-12)


class EntityLinker:
    """Links memories to their entities inside one transaction: each memory to each of its
    entities by the same normalised text, else a near-identical entity (similarity ≥ 0.95), else
    a new one, all filed under the memory's own scope.

    ``vectors`` maps each entity's normalised text to its embedding. ``link`` notes the links;
    ``flush`` resolves every name not resolved yet at once, as if one after another in the order
    noted (a name may be the same entity as one created for an earlier name), and writes the
    links: a few statements for a whole batch of memories rather than a few per entity."""

    def __init__(self, txn: Transaction, vectors: Mapping[str, np.ndarray]) -> None:
        self.txn = txn
        self.vectors = vectors
        self.entity_ids: dict[tuple[Scope, str], int] = {}
        self.pending: list[tuple[int, Scope, Entity]] = []

    def link(self, rowid: int, scope: Scope, entities: Sequence[Entity]) -> None:
        self.pending.extend((rowid, scope, entity) for entity in entities)

    def flush(self) -> None:
        """Resolve the names noted so far and write their links."""
        named: dict[tuple[Scope, str], Entity] = {}
        for _, scope, entity in self.pending:
            named.setdefault((scope, entity.normalized), entity)  # the first mention names a new entity
        self._resolve([(key, entity) for key, entity in named.items() if key not in self.entity_ids])
        links = dict.fromkeys((rowid, self.entity_ids[(scope, entity.normalized)], scope)
                              for rowid, scope, entity in self.pending)
        self.txn.insert_links(list(links))
        self.pending.clear()

    def _resolve(self, names: list[tuple[tuple[Scope, str], Entity]]) -> None:
        """Stored entities by name, then the nearest stored one, or one created before it here."""
        self.entity_ids.update(self.txn.find_entities([key for key, _ in names]))
        unknown = [(key, entity) for key, entity in names if key not in self.entity_ids]
        nearest = self.txn.nearest_entities([(key[0], self.vectors[key[1]]) for key, _ in unknown])
        same: dict[tuple[Scope, str], int | tuple[Scope, str]] = {}
        created: list[NewEntity] = []
        created_in: dict[Scope, list[NewEntity]] = {}
        for (key, entity), stored in zip(unknown, nearest):
            vector = self.vectors[entity.normalized]
            best: tuple[int | tuple[Scope, str], float] | None = stored
            earlier = created_in.setdefault(key[0], [])
            if earlier:  # made after every stored entity, so a tie goes to the stored one
                distances = cosine_distances(np.stack([new.embedding for new in earlier]), vector)
                closest = int(np.argmin(distances))
                if best is None or distances[closest] < best[1]:
                    best = ((key[0], earlier[closest].normalized), float(distances[closest]))
            if best and scoring.similarity_from_distance(best[1]) >= ENTITY_SAME_THRESHOLD:
                same[key] = best[0]
            else:
                created.append(NewEntity(key[0], entity.text, entity.normalized, entity.entity_type, vector))
                earlier.append(created[-1])
        ids = self.txn.insert_entities(created)
        self.entity_ids.update(((new.scope, new.normalized), entity_id) for new, entity_id in zip(created, ids))
        for key, target in same.items():
            self.entity_ids[key] = target if isinstance(target, int) else self.entity_ids[target]


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
