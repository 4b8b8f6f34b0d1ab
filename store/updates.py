"""The older memories a new one may update, named when it is stored ("I moved to Berlin" after
"I live in Paris"), so the assistant can update or delete them before they mislead a later answer.

They are the stored memories nearest in meaning to the new one: filed under exactly its scope
(never another user's, nor one of a run or agent within it), live (not expired), at least
``SUPERSEDE_SIMILARITY`` alike, at most ``MOST_SUPERSEDED``, nearest first. Only ``Engine.add``
asks for them, for one nearest-memory read per memory it stored; bulk writes (``add_many``,
imports) do not pay for it.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from typing import TYPE_CHECKING

from store.backend import MemoryRow, Snapshot, to_memory
from store.ranking.scoring import similarity_from_distance
from store.records import Memory

if TYPE_CHECKING:
    import numpy as np

SUPERSEDE_SIMILARITY = 0.40
"""The cosine similarity (all-MiniLM-L6-v2, in [0, 1]) from which an older memory is named.

An update shares its topic, not its words, so it sits well below a paraphrase ("I live in
Paris" → "I moved to Berlin": 0.446). Chosen on 17 pairs of a one-line personal fact and a newer
one updating it (home city, job, manager, car, phone, diet, a deadline, a team's size, the API
version in production, the editor, …; from 0.361 to 0.873, median 0.628) against 1,217 pairs of
unrelated facts of the same kind (the newer facts against 30 others and against each other's
older fact, and the 30 among themselves; median 0.084, the highest 0.438): at 0.40 it names 16
updates of 17 and 2 unrelated pairs of 1,217 (at 0.35: 17 and 4; at 0.45: 15 and 0, missing the
move to Berlin)."""

MOST_SUPERSEDED = 3
"""A fact restated or changed a few times is named whole; more would be a search, not a hint."""


def superseded_by(view: Snapshot, stored: Sequence[tuple[MemoryRow, np.ndarray]], on: str) -> dict[str, list[Memory]]:
    """For each memory stored by one call (its row and embedding), by id, the older memories it
    may update (``older_alike``), live on the UTC day ``on``. Memories stored by the same call
    never name each other: the caller sent them all, so none is news to it."""
    fresh = {row.rowid for row, _ in stored}
    return {row.id: [to_memory(older) for older in older_alike(view, row, embedding, fresh, on)]
            for row, embedding in stored}


def older_alike(
    view: Snapshot, memory: MemoryRow, embedding: np.ndarray, fresh: Container[int], on: str
) -> list[MemoryRow]:
    """The memories filed under exactly ``memory``'s scope, live on ``on`` and not ``fresh``, at
    least ``SUPERSEDE_SIMILARITY`` alike to ``embedding``, nearest first, at most ``MOST_SUPERSEDED``.

    ``knn_memories`` reads a scope as *within* (``store.scope``), so a user's nearest memories
    include those of the user's runs and agents; when they crowd out the exact scope's, it reads
    four times as far, until enough are found, the farthest read falls below the floor, or the
    scope has no more.
    """
    limit = MOST_SUPERSEDED + 1  # the new memory is among the nearest to itself
    while True:
        nearest = view.knn_memories(embedding, memory.scope, limit, None, on)
        close = [key for key, distance in nearest
                 if key not in fresh and similarity_from_distance(distance) >= SUPERSEDE_SIMILARITY]
        rows = view.memories_by_rowid(close, memory.scope)
        named = [row for key in close if (row := rows.get(key)) is not None and row.scope == memory.scope]
        if (len(named) >= MOST_SUPERSEDED or len(nearest) < limit
                or similarity_from_distance(nearest[-1][1]) < SUPERSEDE_SIMILARITY):
            return named[:MOST_SUPERSEDED]
        limit *= 4
