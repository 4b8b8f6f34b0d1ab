"""What trimem's tools and commands return: pydantic models built from the engine's dataclasses.

Two shapes of a memory. ``MemoryOut`` and the outputs built on it (``AddOutput``,
``SearchOutput``, ``MemoryPage``, ``DeletedOut``, ``HistoryOutput``) are the whole record: what
``trimem … --json`` prints, ``get_memory`` returns, and ``explain_search`` builds on. The briefs
(``MemoryBrief`` and ``SearchBrief``, ``AddBrief``, ``PageBrief``, ``DeletedBrief``,
``HistoryBrief``) are the structured content of the other MCP tools, which clients such as
Claude Code hand the model in place of the text: a short id, the day, the text, a score to two
digits, and only what is set and not implied by the call, with no null and no default (``Lean``).
``MemoryBrief.of`` decides once what a memory shows the model; ``replies.py`` renders its text
line from the brief. Both shapes cut each text to ``max_result_chars`` and say so; the list of
dropped candidates is capped. Score parts and the query analysis are the engine's own
dataclasses, unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer
from pydantic.json_schema import SkipJsonSchema

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
    short_id,
)
from store.scope import SCOPE_KEYS


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
    may_supersede: list[MemoryOut] = Field(
        default_factory=list,
        description="Older memories close in meaning to the one stored now, which may be out of date now (a move, "
        "a new job, a changed date). If the new memory replaces one, update it with update_memory or delete it "
        "with delete_memory; if not, leave it.",
    )


class AddOutput(BaseModel):
    """One entry per stored text (one per user/assistant message when messages were sent)."""

    results: list[AddedOut]

    @classmethod
    def of(cls, added: list[AddedMemory], max_chars: int) -> AddOutput:
        return cls(results=[
            AddedOut(event=a.event, memory=MemoryOut.of(a.memory, max_chars),
                     ignored_metadata_keys=a.ignored_metadata_keys,
                     may_supersede=[MemoryOut.of(older, max_chars) for older in a.may_supersede])
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


HISTORY_EVENTS = ("ADD: stored (new_text). UPDATE: changed from old_text to new_text. DELETE: forgotten (old_text is "
                  "what it said). RESTORE: brought back after a DELETE, with the text it had then.")


class HistoryEventOut(BaseModel):
    memory_id: str
    event: HistoryEventKind = Field(description=HISTORY_EVENTS)
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


# --- The briefs: what the MCP tools hand the model -------------------------------------------------------------------

Absent = SkipJsonSchema[None]
"""The type of a brief's optional field when it is not set: the field is left out of the JSON
(``Lean``), so the output schema states its type alone, not required and never null."""
SHOWN_SCOPE_KEYS = tuple(key for key in SCOPE_KEYS if key != "user_id")
"""The scope ids a brief shows when they are not the call's: never user_id, since a call reads
only its own user's memories."""


def no_null_defaults(schema: dict[str, Any]) -> None:
    """A lean model's JSON schema without ``"default": null``: an unset field is absent, not null."""
    for field in schema.get("properties", {}).values():
        if "default" in field and field["default"] is None:
            del field["default"]


class Lean(BaseModel):
    """A model whose JSON leaves out every field that is None, the ``FIRST`` fields first, and
    whose schema says so: what clients put in the model's context says nothing null or default."""

    model_config = ConfigDict(json_schema_extra=no_null_defaults)
    FIRST: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def without_nulls(self, handler: SerializerFunctionWrapHandler):  # no return type: the schema stays the model's
        data = {key: value for key, value in handler(self).items() if value is not None}
        return {**{key: data.pop(key) for key in self.FIRST if key in data}, **data}


class MemoryBrief(Lean):
    """A memory as the model reads it: only what is set and not implied by the call."""

    id: str = Field(description="A short id every tool taking an id accepts; get_memory shows the whole record.")
    date: str = Field(description="The day it was stored, YYYY-MM-DD (UTC).")
    text: str
    agent_id: str | Absent = Field(None, description="Set, and not the call's own.")
    run_id: str | Absent = Field(None, description="Set, and not the call's own.")
    actor_id: str | Absent = Field(None, description="The speaker's name, for memories added from messages.")
    role: str | Absent = Field(None, description="'user' or 'assistant', for memories added from messages.")
    metadata: dict[str, Any] | Absent = Field(None, description="When not empty.")
    updated: str | Absent = Field(None, description="The day it last changed, YYYY-MM-DD, when not the day stored.")
    expires: str | Absent = Field(None, description="YYYY-MM-DD; the memory is hidden once this day has ended (UTC).")
    truncated: Literal[True] | Absent = Field(
        None, description="The text was cut to the server's limit; get_memory shows as much."
    )

    @classmethod
    def of(cls, memory: Memory, scope: Mapping[str, str], max_chars: int, **extra: Any) -> Self:
        """What ``memory`` shows a call in ``scope``: the one place that decides it."""
        text, truncated = cap(memory.text, max_chars)
        stored, updated = memory.created_at[:10], memory.updated_at[:10]
        return cls(
            id=short_id(memory.id), date=stored, text=text,
            **{key: value for key in SHOWN_SCOPE_KEYS if (value := getattr(memory, key)) != scope.get(key)},
            actor_id=memory.actor_id, role=memory.role, metadata=memory.metadata or None,
            updated=updated if updated != stored else None, expires=memory.expiration_date,
            truncated=True if truncated else None, **extra,
        )


class ScoredBrief(MemoryBrief):
    FIRST = ("id", "score")
    score: float = Field(description="The chance it answers, 0 to 1, to 2 decimals (explain_search gives it whole).")

    @classmethod
    def of_hit(cls, hit: SearchHit, scope: Mapping[str, str], max_chars: int) -> ScoredBrief:
        return cls.of(hit.memory, scope, max_chars, score=round(hit.score, 2))


class SearchBrief(BaseModel):
    """The best memories first."""

    results: list[ScoredBrief]

    @classmethod
    def of(cls, hits: list[SearchHit], scope: Mapping[str, str], max_chars: int) -> SearchBrief:
        return cls(results=[ScoredBrief.of_hit(hit, scope, max_chars) for hit in hits])


class SupersededBrief(Lean):
    """An older memory a new one may replace: what to recognise it by and the id to act on it."""

    id: str = Field(description=MemoryBrief.model_fields["id"].description)
    text: str
    truncated: Literal[True] | Absent = Field(None, description=MemoryBrief.model_fields["truncated"].description)

    @classmethod
    def of(cls, memory: Memory, max_chars: int) -> SupersededBrief:
        text, truncated = cap(memory.text, max_chars)
        return cls(id=short_id(memory.id), text=text, truncated=True if truncated else None)


class AddedBrief(MemoryBrief):
    FIRST = ("event",)
    event: AddEvent = Field(description=AddedOut.model_fields["event"].description)
    ignored_metadata_keys: list[str] | Absent = Field(
        None, description=AddedOut.model_fields["ignored_metadata_keys"].description
    )
    may_supersede: list[SupersededBrief] | Absent = Field(
        None, description=AddedOut.model_fields["may_supersede"].description
    )


class AddBrief(BaseModel):
    """One entry per stored text (one per user/assistant message when messages were sent)."""

    results: list[AddedBrief]

    @classmethod
    def of(cls, added: list[AddedMemory], scope: Mapping[str, str], max_chars: int) -> AddBrief:
        return cls(results=[
            AddedBrief.of(a.memory, scope, max_chars, event=a.event, ignored_metadata_keys=a.ignored_metadata_keys or None,
                          may_supersede=[SupersededBrief.of(older, max_chars) for older in a.may_supersede] or None)
            for a in added
        ])


class PageBrief(Lean):
    """One page of memories, newest first."""

    memories: list[MemoryBrief]
    next_offset: int | Absent = Field(None, description="Pass as offset for the next page; absent on the last one.")

    @classmethod
    def of(cls, memories: list[Memory], scope: Mapping[str, str], limit: int, offset: int, max_chars: int
           ) -> PageBrief:
        """A full page may have a next one; a short page is the last."""
        return cls(memories=[MemoryBrief.of(m, scope, max_chars) for m in memories],
                   next_offset=offset + limit if len(memories) == limit else None)


class DeletedBrief(BaseModel):
    deleted: MemoryBrief = Field(description=DeletedOut.model_fields["deleted"].description)


class HistoryEventBrief(Lean):
    event: HistoryEventKind = Field(description=HISTORY_EVENTS)
    at: str = Field(description="When, to the second (UTC).")
    old_text: str | Absent = None
    new_text: str | Absent = None
    truncated: Literal[True] | Absent = Field(
        None, description="old_text or new_text was cut to the server's limit."
    )
    old_metadata: dict[str, Any] | Absent = Field(None, description="Before the event, when it changed the metadata.")
    new_metadata: dict[str, Any] | Absent = Field(None, description="After the event, when it changed the metadata.")

    @classmethod
    def of(cls, event: HistoryEvent, max_chars: int) -> HistoryEventBrief:
        old, old_cut = cap(event.old_text, max_chars) if event.old_text is not None else (None, False)
        new, new_cut = cap(event.new_text, max_chars) if event.new_text is not None else (None, False)
        changed = event.new_metadata is not None and event.new_metadata != (event.old_metadata or {})
        return cls(
            event=event.event, at=event.created_at[:19], old_text=old, new_text=new,
            truncated=True if old_cut or new_cut else None,
            old_metadata=(event.old_metadata or None) if changed else None,
            new_metadata=event.new_metadata if changed else None,
        )


class HistoryBrief(BaseModel):
    """A memory's changes, oldest first."""

    memory_id: str = Field(description="The memory's short id.")
    events: list[HistoryEventBrief]

    @classmethod
    def of(cls, events: list[HistoryEvent], max_chars: int) -> HistoryBrief:
        return cls(memory_id=short_id(events[0].memory_id), events=[HistoryEventBrief.of(e, max_chars) for e in events])

