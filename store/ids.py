"""Finding the memory a caller names: by its id, or by the start of it that tables show.

Tables and lists show ``SHORT_ID_CHARS`` of an id, so a person types that back. A start
of an id stands for it when exactly one id in the scope begins with it and it is at least
``ID_PREFIX_MIN_CHARS`` long; otherwise the call is refused with the ids it could mean,
each with the start of its text, so the person can say which.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from typing import Any

from store.backend import IdCandidate, IdSource, MemoryRow, Snapshot
from store.errors import InvalidArgument, NotFound, shown
from store.records import SHORT_ID_CHARS
from store.scope import Scope
from store.validation import check_id

ID_PREFIX_MIN_CHARS = 4
"""A shorter start of an id is too likely to name the wrong memory to stand for it."""
CANDIDATES_SHOWN = 5
"""How many ids the message about an ambiguous id prefix lists (it counts the rest)."""
CANDIDATE_TEXT_CHARS = 60


def candidate_lines(candidates: Sequence[IdCandidate], count: int) -> list[str]:
    """One line per candidate (sorted by id): the start of its id, long enough to tell it from
    the others listed, and the start of its text; then how many more there are."""
    ids = [candidate.id for candidate in candidates]
    shared = max((len(os.path.commonprefix(pair)) for pair in itertools.pairwise(ids)), default=0)
    lines = [f"  {candidate.id[:max(SHORT_ID_CHARS, shared + 1)]}  {shown(candidate.text, CANDIDATE_TEXT_CHARS)}"
             for candidate in candidates]
    if count > len(candidates):
        lines.append(f"  … and {count - len(candidates)} more")
    return lines


def full_id(view: Snapshot, source: IdSource, memory_id: str, scope: Scope) -> str:
    """The one id in the scope that ``memory_id`` begins (tables and lists show ``SHORT_ID_CHARS``),
    or ``memory_id`` itself when none does. A start shared by several ids is an error listing
    them; so is one shorter than ``ID_PREFIX_MIN_CHARS``, even of a single id, which it names."""
    candidates, count = view.ids_with_prefix(source, memory_id, scope, CANDIDATES_SHOWN)
    if not candidates:
        return memory_id
    if count == 1 and len(memory_id) >= ID_PREFIX_MIN_CHARS:
        return candidates[0].id
    if count == 1:
        problem = (f"is too short to stand for an id; give at least {ID_PREFIX_MIN_CHARS} characters, such "
                   "as those of the one id in this scope that starts with it:")
    else:
        problem = f"is the start of {count} ids in this scope; give more of it to say which:"
    raise InvalidArgument("\n".join([f"memory id {shown(memory_id)} {problem}",
                                      *candidate_lines(candidates, count)]))


def get_row(view: Snapshot, memory_id: Any, scope: Scope) -> MemoryRow:
    """The stored memory within ``scope`` that ``memory_id`` (checked here) names, whole or by
    its start (``full_id``); ``NotFound`` naming the scope when there is none."""
    memory_id = check_id(memory_id, "memory_id")
    row = view.get_memory(memory_id, scope)
    if row is None:
        row = view.get_memory(full_id(view, "memories", memory_id, scope), scope)
    if row is None:
        where = ", ".join(f"{key}={shown(value)}" for key, value in scope.named().items())
        raise NotFound(
            f"memory {shown(memory_id)} not found for {where}; listing the memories shows the ids in this scope"
        )
    return row
