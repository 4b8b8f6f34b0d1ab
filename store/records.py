"""What the engine returns: frozen dataclasses that the CLI prints and the MCP tools
shape with ``dataclasses.asdict``, so both surfaces show the same fields."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from store.ranking.relevance import Relevance
from store.ranking.scoring import KeywordSource, ScoreBreakdown

SHORT_ID_CHARS = 8
"""Tables and messages show an id's first 8 characters, which every call taking an id accepts:
two random (uuid4) ids share them about once in four billion pairs."""
GENERATED_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def short_id(memory_id: str) -> str:
    """How tables, messages and tool replies show an id: the first ``SHORT_ID_CHARS`` of one trimem
    generated, an id that came from elsewhere in an import whole (``note-0001`` and ``note-0002``
    share their first 8)."""
    return memory_id[:SHORT_ID_CHARS] if GENERATED_ID.fullmatch(memory_id) else memory_id


SentRole = Literal["user", "assistant", "system"]
"""The roles a conversation message sent to ``add`` may have."""
SKIPPED_ROLES = ("system",)
"""Messages that instruct the assistant rather than say something: ``add`` skips them."""
MESSAGE_ROLES = tuple(role for role in get_args(SentRole) if role not in SKIPPED_ROLES)
"""The roles of the conversation messages a memory can come from (``Memory.role``)."""


@dataclass(frozen=True)
class Memory:
    """A stored memory; unset scope ids are ``None``."""

    id: str
    text: str
    user_id: str | None
    agent_id: str | None
    run_id: str | None
    actor_id: str | None
    role: str | None
    metadata: dict[str, Any]
    created_at: str
    updated_at: str
    expiration_date: str | None


AddEvent = Literal["ADD", "DUPLICATE"]
HistoryEventKind = Literal["ADD", "UPDATE", "DELETE", "RESTORE"]
"""What changed: stored, changed, forgotten, or brought back after a delete (``Engine.restore``)."""


@dataclass(frozen=True)
class AddedMemory:
    """One result of ``add``: ``ADD`` when stored now, ``DUPLICATE`` when the same normalised
    text was already stored in this scope (the existing memory is returned)."""

    event: AddEvent
    memory: Memory
    ignored_metadata_keys: list[str] = field(default_factory=list)
    """Scope keys sent inside metadata and dropped (pass them as scope arguments instead)."""
    may_supersede: list[Memory] = field(default_factory=list)
    """For a memory ``add`` stored now: the older memories of its scope nearest in meaning, which
    it may make out of date (``store.updates``), for the caller to update or delete."""


@dataclass(frozen=True)
class EntityMatch:
    """The stored entity that gave a memory its (largest) boost."""

    query_entity: str
    entity: str
    similarity: float
    linked_memories: int


@dataclass(frozen=True)
class Pull:
    """One feature's part in a learned score: its value for this memory as the model reads it
    (within the range it was fitted on), and what it adds to the logit (its coefficient times the
    value standardised)."""

    feature: str
    value: float
    pull: float


@dataclass(frozen=True)
class LearnedScore:
    """Why learned fusion (``store.ranking.learned``) placed a memory where it did:
    ``logit = intercept + Σ pulls``, ``probability`` is the logistic of the logit, and the memory's
    ``score`` is that probability, raised where needed to the best score after it."""

    score: float
    probability: float
    logit: float
    intercept: float
    strongest: tuple[Pull, ...]
    """The ``store.ranking.learned.SHOWN_PULLS`` features that moved the logit most, either way."""
    others: float
    """What the other features add together."""
    restates: bool
    """The query all but repeats the memory (``store.ranking.learned.Weights.restates``), so it was
    placed ahead of the model's order, in the hand-set fusion's."""


@dataclass(frozen=True)
class SearchHit:
    """A ranked memory with its score in [0, 1] (the fused score, or under learned fusion
    ``LearnedScore.score``); ``details``, and where its entity boost and keyword score come
    from, only when explained."""

    memory: Memory
    score: float
    details: ScoreBreakdown | None = None
    entity_match: EntityMatch | None = None
    keyword_source: KeywordSource | None = None
    learned: LearnedScore | None = None
    """Under learned fusion, explained: how the model turned the signals into ``score``."""
    standing: bool = False
    """A standing memory returned because the query bears on it (``store.ranking.standing``), not
    for its score: it follows the memories that cleared the bar, whatever its own."""


@dataclass(frozen=True)
class QueryAnalysis:
    """How the query was read: the terms BM25 saw, the sigmoid chosen, the entities found,
    and which signals took part."""

    lemmatized_terms: list[str]
    term_count: int
    bm25_midpoint: float
    bm25_steepness: float
    entities: list[str]
    signals_active: list[str]
    max_possible_score: float
    internal_limit: int
    candidate_pool: str
    threshold: float
    filters_applied: bool


DropReason = Literal["below_threshold", "expired", "filtered"]
"""Why ``explain`` left a candidate out; the MCP output model imports this, never a copy."""


@dataclass(frozen=True)
class DroppedCandidate:
    """A candidate that did not make it, and why: ``below_threshold`` (the semantic gate),
    ``expired``, or ``filtered`` (among the nearest memories, but excluded by the filters)."""

    id: str
    text: str
    semantic_score: float
    reason: DropReason


@dataclass(frozen=True)
class Explanation:
    """``explain``'s answer: the ranking with every score part, the query analysis, the drops."""

    hits: list[SearchHit]
    analysis: QueryAnalysis
    dropped: list[DroppedCandidate]
    relevance: Relevance | None = None
    """Whether the query was judged to have an answer in the scope, and by what figures
    (``None``: not judged, as with ``ranking = "mem0"`` or a caller's own threshold)."""
    withheld: list[SearchHit] = field(default_factory=list)
    """When it was judged to have none: the memories the search would have returned, which it
    withheld (``hits`` is then empty)."""


@dataclass(frozen=True)
class ScopeCount:
    """One scope that holds memories, and how many (``expired`` ones included in ``memories``)."""

    user_id: str | None
    agent_id: str | None
    run_id: str | None
    memories: int
    expired: int


@dataclass(frozen=True)
class HistoryEvent:
    """One change to a memory."""

    memory_id: str
    event: HistoryEventKind
    old_text: str | None
    new_text: str | None
    old_metadata: dict[str, Any] | None
    new_metadata: dict[str, Any] | None
    created_at: str


@dataclass(frozen=True)
class Violation:
    """One broken invariant of a store: which check, which row, in words."""

    check: str
    detail: str


@dataclass(frozen=True)
class RepairReport:
    """What ``repair`` rebuilt or removed, by kind; ``remaining`` is what it could not fix
    (damage below the tables, such as a malformed page: restore a backup)."""

    vectors_rebuilt: int
    fts_rebuilt: bool
    entity_links_rebuilt: int
    orphans_removed: int
    remaining: list[Violation] = field(default_factory=list)


@dataclass(frozen=True)
class ReembedReport:
    """What a completed re-embedding did: the models before and after, the rows now indexed
    with the new model, and how many vectors this run computed (fewer than memories plus
    entities when it resumed an interrupted run)."""

    model: str
    dimension: int
    previous_model: str
    previous_dimension: int
    memories: int
    entities: int
    embedded: int
    resumed: bool
    seconds: float
