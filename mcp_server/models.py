"""What the MCP tools return: pydantic models built from the engine's dataclasses.

They give clients an output schema and ``structured_content``. The only changes from
``store.records`` are for the assistant's context window: each text is cut to
``max_result_chars`` and flagged ``truncated``, and the list of dropped candidates is
capped. Score parts and the query analysis are the engine's own dataclasses, unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import BaseModel, Field

from store.ranking.relevance import Relevance
from store.ranking.scoring import KEYWORD_SOURCES, KeywordSource, ScoreBreakdown
from store.records import (
    AddedMemory,
    AddEvent,
    DropReason,
    EntityMatch,
    Explanation,
    HistoryEvent,
    HistoryEventKind,
    LearnedScore,
    Memory,
    QueryAnalysis,
    SearchHit,
)


def cap(text: str, max_chars: int) -> tuple[str, bool]:
    """The text cut to ``max_chars`` characters, and whether it was cut."""
    return (text[:max_chars], True) if len(text) > max_chars else (text, False)


class MemoryOut(BaseModel):
    """A stored memory; scope ids that were not set are null."""

    id: str = Field(description="Pass this to get_memory, update_memory, delete_memory or memory_history.")
    text: str
    truncated: bool = Field(description="True when text was cut to the server's limit; get_memory shows as much.")
    user_id: str | None
    agent_id: str | None
    run_id: str | None
    actor_id: str | None = Field(description="The speaker's name, for memories added from messages.")
    role: str | None = Field(description="'user' or 'assistant', for memories added from messages.")
    metadata: dict[str, Any]
    created_at: str
    updated_at: str
    expiration_date: str | None = Field(description="YYYY-MM-DD; the memory is hidden once this day has ended (UTC).")

    @classmethod
    def of(cls, memory: Memory, max_chars: int, **extra: Any) -> MemoryOut:
        text, truncated = cap(memory.text, max_chars)
        return cls(**{**dataclasses.asdict(memory), "text": text, "truncated": truncated, **extra})


class AddedOut(BaseModel):
    event: AddEvent = Field(
        description="ADD: stored now. DUPLICATE: the same text was already stored; this is the existing memory."
    )
    memory: MemoryOut
    ignored_metadata_keys: list[str] = Field(
        default_factory=list,
        description="Scope keys sent inside metadata and not stored; pass user_id, agent_id or run_id as "
        "arguments instead.",
    )


class AddOutput(BaseModel):
    """One entry per stored text (one per user/assistant message when messages were sent)."""

    results: list[AddedOut]

    @classmethod
    def of(cls, added: list[AddedMemory], max_chars: int) -> AddOutput:
        return cls(results=[
            AddedOut(event=a.event, memory=MemoryOut.of(a.memory, max_chars),
                     ignored_metadata_keys=a.ignored_metadata_keys)
            for a in added
        ])


class ScoredMemory(MemoryOut):
    score: float = Field(description="Relevance in [0, 1]: meaning, keywords and entities combined.")

    @classmethod
    def of_hit(cls, hit: SearchHit, max_chars: int, **extra: Any) -> ScoredMemory:
        return cls.of(hit.memory, max_chars, score=hit.score, **extra)


class SearchOutput(BaseModel):
    """The best memories first."""

    results: list[ScoredMemory]

    @classmethod
    def of(cls, hits: list[SearchHit], max_chars: int) -> SearchOutput:
        return cls(results=[ScoredMemory.of_hit(hit, max_chars) for hit in hits])


class ExplainedMemory(ScoredMemory):
    score_parts: ScoreBreakdown = Field(
        description="The fused score: final_score = min((semantic_score + bm25_score + entity_boost) / "
        "max_possible_score, 1)."
    )
    entity_match: EntityMatch | None = Field(description="The stored entity behind entity_boost, if any.")
    keyword_source: KeywordSource | None = Field(
        description="Where bm25_score comes from: "
        + "; ".join(f"'{source}': {meaning}" for source, meaning in KEYWORD_SOURCES.items())
        + ". Null when it has none."
    )
    learned: LearnedScore | None = Field(
        description="Under learned fusion (the default ranking), how the model turned the signals into score: "
        "logit = intercept + the strongest features' pulls + others, probability = 1 / (1 + e^-logit), "
        "score = probability, raised where needed to the best score after it. restates: the query all but "
        "repeats the memory, so it comes first, in the hand-set fusion's order. "
        "Null under rankings 'trimem' and 'mem0', where score is score_parts.final_score."
    )


class DroppedOut(BaseModel):
    id: str
    text: str
    truncated: bool
    semantic_score: float
    reason: DropReason = Field(
        description="below_threshold: under the semantic gate; expired: past its expiration_date; filtered: among "
        "the nearest memories but kept out by the metadata filters."
    )


class ExplainOutput(BaseModel):
    """The ranking with every part of every score, how the query was read, and what was dropped."""

    results: list[ExplainedMemory]
    analysis: QueryAnalysis = Field(
        description="Lemmatized terms seen by BM25, the sigmoid chosen for their count, the entities extracted, "
        "the signals that counted in the denominator, and whether metadata filters were applied "
        "(memories the filters keep out never become candidates; the nearest of them are listed in dropped "
        "with reason 'filtered')."
    )
    dropped: list[DroppedOut] = Field(description="Candidates left out and why, at most top_k of them.")
    dropped_total: int = Field(description="How many candidates were dropped in all.")
    relevance: Relevance | None = Field(
        description="Whether the query was judged to have an answer here: the best similarity in meaning "
        "against the bar it needed (higher when the query names people or things none of which is known "
        "here). Null when not judged (ranking 'mem0', or a threshold passed by the caller)."
    )
    withheld: list[ExplainedMemory] = Field(
        description="When judged to have no answer: the memories search would have returned, which it withheld "
        "(results is then empty)."
    )

    @classmethod
    def of(cls, explanation: Explanation, max_chars: int, max_dropped: int) -> ExplainOutput:
        def explained(hits: list[SearchHit]) -> list[ExplainedMemory]:
            return [
                ExplainedMemory.of_hit(
                    hit, max_chars, score_parts=hit.details, entity_match=hit.entity_match,
                    keyword_source=hit.keyword_source, learned=hit.learned,
                )
                for hit in hits
            ]

        dropped = []
        for candidate in explanation.dropped[:max_dropped]:
            text, truncated = cap(candidate.text, max_chars)
            dropped.append(DroppedOut(**{**dataclasses.asdict(candidate), "text": text, "truncated": truncated}))
        return cls(
            results=explained(explanation.hits), analysis=explanation.analysis, dropped=dropped,
            dropped_total=len(explanation.dropped), relevance=explanation.relevance,
            withheld=explained(explanation.withheld),
        )


class MemoryPage(BaseModel):
    """One page of memories, newest first."""

    memories: list[MemoryOut]
    next_offset: int | None = Field(description="Pass as offset for the next page; null when this is the last one.")

    @classmethod
    def of(cls, memories: list[Memory], limit: int, offset: int, max_chars: int) -> MemoryPage:
        """A full page may have a next one; a short page is the last."""
        next_offset = offset + limit if len(memories) == limit else None
        return cls(memories=[MemoryOut.of(m, max_chars) for m in memories], next_offset=next_offset)


class DeletedOut(BaseModel):
    deleted: MemoryOut = Field(description="The memory as it was; memory_history still shows its changes.")


class DeletedCount(BaseModel):
    deleted_count: int


class HistoryEventOut(BaseModel):
    memory_id: str
    event: HistoryEventKind = Field(
        description="ADD: stored (new_text). UPDATE: changed from old_text to new_text. DELETE: forgotten (old_text "
                    "is what it said). RESTORE: brought back after a DELETE, with the text it had then."
    )
    old_text: str | None
    new_text: str | None
    truncated: bool = Field(description="True when old_text or new_text was cut to the server's limit.")
    old_metadata: dict[str, Any] | None
    new_metadata: dict[str, Any] | None
    created_at: str


class HistoryOutput(BaseModel):
    """A memory's changes, oldest first."""

    events: list[HistoryEventOut]

    @classmethod
    def of(cls, events: list[HistoryEvent], max_chars: int) -> HistoryOutput:
        shaped = []
        for event in events:
            old, old_cut = cap(event.old_text, max_chars) if event.old_text is not None else (None, False)
            new, new_cut = cap(event.new_text, max_chars) if event.new_text is not None else (None, False)
            fields = {**dataclasses.asdict(event), "old_text": old, "new_text": new, "truncated": old_cut or new_cut}
            shaped.append(HistoryEventOut(**fields))
        return cls(events=shaped)


class RecallOutput(BaseModel):
    """What a hook injects before a prompt, and what it stored."""

    block: str = Field(description="The recalled memories between <trimem-memories> tags; empty when none is relevant.")
    recalled_ids: list[str] = Field(description="The ids of the memories the block shows, best first.")
    captured_id: str | None = Field(description="The memory the prompt is stored as, when it was captured.")
