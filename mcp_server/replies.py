"""The text a tool call hands the model: one short line per memory, nothing that is null,
default, or the caller's own scope.

Every tool answers twice. ``structuredContent`` is the full typed record of ``models.py``, for
programs; the text content is what a client puts in the model's context, on every turn
that searches, so it says only what the model can use: the memory's words, an id the other
tools accept, its date, the score to two digits, and what is set beyond that. A line reads

    2bc388d0 0.48 2026-12-03 Ana works as a nurse at Santa Maria hospital | metadata {"category":"work"}

``explain_search`` is not rendered here: it exists to show every part of every score, so its
text stays the whole record.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel

from mcp_server.models import AddOutput, HistoryOutput, MemoryOut, MemoryPage, ScoredMemory, SearchOutput
from store.records import short_id
from store.scope import SCOPE_KEYS


def reply(output: BaseModel, text: str) -> CallToolResult:
    """A tool result: ``text`` for the model, the whole record as structured content."""
    return CallToolResult(content=[TextContent(text=text)], structured_content=output.model_dump(mode="json"))


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def memory_line(memory: MemoryOut, scope: Mapping[str, str], score: float | None = None) -> str:
    """One memory: id, score (when ranked), creation date, text, then only what is set and not
    implied by the call: another agent or run than the call's, the speaker, metadata, a later
    update, an expiry, a cut."""
    head = [short_id(memory.id)] + ([f"{score:.2f}"] if score is not None else []) + [memory.created_at[:10]]
    extras = [f"{key} {value}" for key in SCOPE_KEYS
              if (value := getattr(memory, key)) is not None and value != scope.get(key)]
    if memory.actor_id or memory.role:
        extras.append(f"said by {' '.join(filter(None, (memory.actor_id, memory.role and f'({memory.role})')))}")
    if memory.metadata:
        extras.append(f"metadata {compact_json(memory.metadata)}")
    if memory.updated_at[:10] != memory.created_at[:10]:
        extras.append(f"updated {memory.updated_at[:10]}")
    if memory.expiration_date:
        extras.append(f"expires {memory.expiration_date}")
    if memory.truncated:
        extras.append("text cut; get_memory shows more")
    return " | ".join([f"{' '.join(head)} {memory.text}", *extras])


def memory_lines(memories: Sequence[MemoryOut], scope: Mapping[str, str]) -> str:
    return "\n".join(
        memory_line(m, scope, m.score if isinstance(m, ScoredMemory) else None) for m in memories
    )


def memories(count: int) -> str:
    return f"{count} {'memory' if count == 1 else 'memories'}"


NOTHING_RELEVANT = "No stored memory is relevant to this query."
"""What a search that returns nothing says, on every front end."""


def search_text(output: SearchOutput, scope: Mapping[str, str]) -> str:
    if not output.results:
        return NOTHING_RELEVANT
    return f"{memories(len(output.results))}, best first (id score date text):\n" + memory_lines(
        output.results, scope
    )


def page_text(output: MemoryPage, scope: Mapping[str, str]) -> str:
    if not output.memories:
        return "No memories on this page." if output.next_offset is None else "No memories here."
    more = "" if output.next_offset is None else f"; more with offset {output.next_offset}"
    return f"{memories(len(output.memories))}, newest first (id date text){more}:\n" + memory_lines(
        output.memories, scope
    )


def added_text(output: AddOutput, scope: Mapping[str, str]) -> str:
    lines = []
    for added in output.results:
        verb = "Stored" if added.event == "ADD" else "Already stored (DUPLICATE)"
        line = f"{verb}: {memory_line(added.memory, scope)}"
        if added.ignored_metadata_keys:
            line += (f" | not stored in metadata: {', '.join(added.ignored_metadata_keys)} "
                     "(pass them as arguments)")
        lines.append(line)
    return "\n".join(lines)


def history_text(output: HistoryOutput) -> str:
    """Each event on one line, oldest first: what changed, and only that."""
    lines = []
    for event in output.events:
        line = f"{event.created_at[:19]} {event.event}"
        if event.event == "DELETE":
            line += f": {event.old_text}"
        elif event.old_text is not None and event.old_text != event.new_text:
            line += f": {event.old_text} -> {event.new_text}"
        elif event.new_text is not None and event.event != "UPDATE":
            line += f": {event.new_text}"
        if event.new_metadata is not None and event.new_metadata != (event.old_metadata or {}):
            line += f" | metadata {compact_json(event.new_metadata)}"
        lines.append(line)
    return f"History of {short_id(output.events[0].memory_id)}, oldest first:\n" + "\n".join(lines)
