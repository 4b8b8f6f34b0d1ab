"""The text a tool call hands the model: one short line per memory, rendered from its brief.

Every tool answers twice, and both answers are for the model: clients such as Claude Code put
``structuredContent`` in its context in place of the text when a result has it, others the text.
So the structured content of the tools that show memories is the brief of ``models.py``
(``MemoryBrief`` and the outputs built on it): a short id the other tools accept, the day, the
text, the score to two digits, and only what is set and not implied by the call. The text is
one line per memory rendered from that brief, so the two never disagree:

    2bc388d0 0.48 2026-12-03 Ana works as a nurse at Santa Maria hospital | metadata {"category":"work"}

The whole record stays one call away: ``get_memory`` returns it as structured content, and the
CLI's ``--json`` prints the full models. ``explain_search`` is not rendered here: it exists to
show every part of every score, so its text stays the whole record.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel

from mcp_server.models import SHOWN_SCOPE_KEYS, AddBrief, HistoryBrief, MemoryBrief, PageBrief, ScoredBrief, SearchBrief
from mcp_server.wording import NOTHING_RELEVANT
from store.records import short_id


def reply(output: BaseModel, text: str) -> CallToolResult:
    """A tool result: ``text`` for the model, ``output`` (a brief, or a whole record) as structured content."""
    return CallToolResult(content=[TextContent(text=text)], structured_content=output.model_dump(mode="json"))


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


TEXT_CUT = "text cut; get_memory shows more"
"""What a line adds when the text it shows was cut to the server's limit."""


def memory_line(memory: MemoryBrief) -> str:
    """One memory: id, score (when ranked), creation date, text, then what else its brief shows:
    another agent or run than the call's, the speaker, metadata, a later update, an expiry, a cut."""
    score = [f"{memory.score:.2f}"] if isinstance(memory, ScoredBrief) else []
    head = " ".join([memory.id, *score, memory.date])
    extras = [f"{key} {value}" for key in SHOWN_SCOPE_KEYS if (value := getattr(memory, key)) is not None]
    if memory.actor_id or memory.role:
        extras.append(f"said by {' '.join(filter(None, (memory.actor_id, memory.role and f'({memory.role})')))}")
    if memory.metadata:
        extras.append(f"metadata {compact_json(memory.metadata)}")
    if memory.updated:
        extras.append(f"updated {memory.updated}")
    if memory.expires:
        extras.append(f"expires {memory.expires}")
    if memory.truncated:
        extras.append(TEXT_CUT)
    return " | ".join([f"{head} {memory.text}", *extras])


def may_update_line(memory_id: str, text: str, truncated: bool = False) -> str:
    """An older memory the one stored just above may make out of date, on a line of its own: the
    add_memory reply and ``trimem add`` both show it so."""
    return f"  may update: {short_id(memory_id)} {text}" + (f" | {TEXT_CUT}" if truncated else "")


def memory_lines(memories: Sequence[MemoryBrief]) -> str:
    return "\n".join(memory_line(m) for m in memories)


def memories(count: int) -> str:
    return f"{count} {'memory' if count == 1 else 'memories'}"


def search_text(output: SearchBrief) -> str:
    if not output.results:
        return NOTHING_RELEVANT
    return f"{memories(len(output.results))}, best first (id score date text):\n" + memory_lines(output.results)


def page_text(output: PageBrief) -> str:
    if not output.memories:
        return "No memories on this page." if output.next_offset is None else "No memories here."
    more = "" if output.next_offset is None else f"; more with offset {output.next_offset}"
    return f"{memories(len(output.memories))}, newest first (id date text){more}:\n" + memory_lines(output.memories)


def added_text(output: AddBrief) -> str:
    lines = []
    for added in output.results:
        verb = "Stored" if added.event == "ADD" else "Already stored (DUPLICATE)"
        line = f"{verb}: {memory_line(added)}"
        if added.ignored_metadata_keys:
            line += (f" | not stored in metadata: {', '.join(added.ignored_metadata_keys)} "
                     "(pass them as arguments)")
        lines.append(line)
        lines += [may_update_line(older.id, older.text, bool(older.truncated)) for older in added.may_supersede or []]
    return "\n".join(lines)


def history_text(output: HistoryBrief) -> str:
    """Each event on one line, oldest first: what changed, and only that."""
    lines = []
    for event in output.events:
        line = f"{event.at} {event.event}"
        if event.event == "DELETE":
            line += f": {event.old_text}"
        elif event.old_text is not None and event.old_text != event.new_text:
            line += f": {event.old_text} -> {event.new_text}"
        elif event.new_text is not None and event.event != "UPDATE":
            line += f": {event.new_text}"
        if event.new_metadata is not None:  # the brief shows metadata only when the event changed it
            line += f" | metadata {compact_json(event.new_metadata)}"
        lines.append(line)
    return f"History of {output.memory_id}, oldest first:\n" + "\n".join(lines)
