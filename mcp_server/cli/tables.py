"""What ``trimem`` prints for a person at a terminal: tables of the tools' outputs.

Scripts get the JSON of the same models (``--json``); these tables choose what a person
reads: the id's first 8 characters (every command that takes an id accepts them), the
score for a search, the dates, the metadata cut to a short column, and the text whole,
wrapped in what is left of the terminal's width.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from mcp_server.wording import NOTHING_RELEVANT, metadata_value
from store.records import short_id

if TYPE_CHECKING:  # the MCP SDK's types, which every command would otherwise import
    from mcp_server.models import AddOutput, HistoryOutput, MemoryOut, MemoryPage, SearchOutput

METADATA_CHARS = 28
MIN_TEXT_CHARS = 30
"""Narrower than this, a text column would hold a few words a line: the text goes below its row."""
GAP = "  "
LABEL_CHARS = 17
"""``one_memory``'s labels, padded so that every value starts in the same column."""
BELOW_INDENT = "    "


def cut(text: str, width: int) -> str:
    """``text`` on one line, at most ``width`` characters, an ellipsis marking a cut."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: max(width - 1, 0)] + "…"


def wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken between words (inside one
    only when it is longer than a line), keeping its own line breaks; at least one line."""
    return [piece for line in text.splitlines() for piece in textwrap.wrap(line, max(width, 1)) or [""]] or [""]


def note(text: str, width: int) -> str:
    """A line of prose wrapped to ``width``, its continuation lines indented."""
    return "\n".join(textwrap.wrap(text, max(width, MIN_TEXT_CHARS), subsequent_indent=BELOW_INDENT)) or text


def day(stamp: str | None) -> str:
    """The date part of an ISO timestamp (UTC), or '-'."""
    return stamp[:10] if stamp else "-"


def metadata_pair(key: str, value: Any) -> str:
    """``key=value`` (``metadata_value``)."""
    return f"{key}={metadata_value(value)}"


def metadata_cell(metadata: dict[str, Any]) -> str:
    """``key=value`` pairs (``metadata_pair``), or '-'."""
    return " ".join(metadata_pair(key, value) for key, value in metadata.items()) or "-"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> str:
    """Columns padded to their widest cell, and the last one (the text) wrapped in what is left
    of ``width``, or below each row when that is less than ``MIN_TEXT_CHARS``."""
    widths = [max([len(header[i])] + [len(row[i]) for row in rows]) for i in range(len(header) - 1)]
    room = width - sum(widths) - len(GAP) * len(widths)
    return "\n".join(line for row in [header, *rows] for line in row_lines(row, widths, room, width))


def row_lines(row: Sequence[str], widths: Sequence[int], room: int, width: int) -> list[str]:
    """One row of a table: its cells padded to ``widths``, then its text wrapped beside them in
    ``room`` characters or, when that is less than ``MIN_TEXT_CHARS``, below them, indented."""
    cells = "".join(cell.ljust(cell_width) + GAP for cell, cell_width in zip(row[:-1], widths, strict=True))
    if room < MIN_TEXT_CHARS:
        return [cells.rstrip(), *(BELOW_INDENT + line for line in wrap(row[-1], width - len(BELOW_INDENT)))]
    first, *rest = wrap(row[-1], room)
    return [(cells + first).rstrip(), *((" " * len(cells) + line).rstrip() for line in rest)]


def memory_cells(memory: MemoryOut) -> list[str]:
    return [
        short_id(memory.id), day(memory.created_at), day(memory.expiration_date),
        cut(metadata_cell(memory.metadata), METADATA_CHARS), memory.text,
    ]


MEMORY_HEADER = ("id", "created", "expires", "metadata", "text")


def memory_page(page: MemoryPage, width: int) -> str:
    if not page.memories:
        return "no memories in this scope"
    lines = table(MEMORY_HEADER, [memory_cells(m) for m in page.memories], width)
    if page.next_offset is not None:
        lines += f"\nmore: the same command with --offset {page.next_offset}"
    return lines


def search_results(output: SearchOutput, width: int) -> str:
    if not output.results:
        return note(f"{NOTHING_RELEVANT} `trimem search --explain` shows the closest memories and why none was "
                    "returned.", width)
    rows = [[f"{hit.score:.3f}", *memory_cells(hit)] for hit in output.results]
    return table(("score", *MEMORY_HEADER), rows, width)


def added(output: AddOutput, width: int) -> str:
    """The memories added, then the older ones they may make out of date, as the add_memory tool's
    text names them (``trimem add`` stores one text, so they are that one's)."""
    from mcp_server.replies import may_update_line  # the MCP types it imports load only for this table

    rows = [[a.event, *memory_cells(a.memory)] for a in output.results]
    older = [note(may_update_line(m.id, m.text), width) for a in output.results for m in a.may_supersede]
    return "\n".join([table(("event", *MEMORY_HEADER), rows, width), *older])


def one_memory(memory: MemoryOut, width: int) -> str:
    """Every field of one memory, one per line, the text whole (wrapped beside its label)."""
    fields = [
        ("id", memory.id), ("text", memory.text),
        *((key, value) for key in ("user_id", "agent_id", "run_id", "actor_id", "role")
          if (value := getattr(memory, key)) is not None),
        ("metadata", json.dumps(memory.metadata, ensure_ascii=False)),
        ("created_at", memory.created_at), ("updated_at", memory.updated_at),
        ("expiration_date", memory.expiration_date or "-"),
    ]
    return "\n".join(line for key, value in fields for line in labelled(key, value, width))


def labelled(label: str, value: str, width: int) -> list[str]:
    """``label: value``, the value wrapped in what ``width`` leaves beside the labels."""
    first, *rest = wrap(value, max(width - LABEL_CHARS, MIN_TEXT_CHARS))
    return [f"{label + ':':<{LABEL_CHARS - 1}} {first}", *((" " * LABEL_CHARS + line).rstrip() for line in rest)]


def history(output: HistoryOutput, width: int) -> str:
    rows = [
        [event.created_at[:19].replace("T", " "), event.event,
         event.new_text if event.new_text is not None else event.old_text or ""]
        for event in output.events
    ]
    return table(("at (UTC)", "event", "text"), rows, width)


class ScopesOut(BaseModel):
    """``trimem users``: no tool has this shape (the assistant never lists users)."""

    scopes: list[dict[str, Any]]
    default_user_id: str


class StatsOut(BaseModel):
    """``trimem stats``."""

    database: str
    file_bytes: int
    memories: int
    expired: int
    users: dict[str, dict[str, int]]
    awaiting_reanalysis: int
    """Memories still holding the terms and links of older analysis rules."""
    embedding_model: str
    embedding_backend: str


def scopes(output: ScopesOut, width: int) -> str:
    if not output.scopes:
        return f"no memories yet; the default user is {output.default_user_id!r}"
    rows = [
        [scope["user_id"] or "-", scope["agent_id"] or "-", scope["run_id"] or "-", str(scope["memories"]),
         str(scope["expired"]), "yes" if scope["user_id"] == output.default_user_id else "no"]
        for scope in output.scopes
    ]
    return table(("user_id", "agent_id", "run_id", "memories", "expired", "default"), rows, width)


def stats(output: StatsOut, width: int) -> str:
    size = f"{output.file_bytes / 1e6:.1f} MB" if output.file_bytes >= 1e5 else f"{output.file_bytes / 1e3:.0f} kB"
    lines = [
        f"database:   {output.database} ({size})",
        f"models:     {output.embedding_model} on {output.embedding_backend}",
        f"memories:   {output.memories} ({output.expired} expired)",
        *awaiting_reanalysis(output.awaiting_reanalysis),
        "",
        table(("user_id", "memories", "expired"),
              [[user or "-", str(n["memories"]), str(n["expired"])] for user, n in output.users.items()], width),
    ]
    return "\n".join(lines)


def awaiting_reanalysis(memories: int) -> list[str]:
    """The stats line about memories that still hold older analysis rules' terms, when any do."""
    if not memories:
        return []
    line = (f"analysis:   {memories:,} memories still hold older rules' terms; a server analyses them again in the "
            "background (or `trimem doctor --repair`)")
    return [line]


def added_count(output: dict[str, int], _width: int) -> str:
    """``trimem add --file``: how many lines became memories, and how many were stored already."""
    return f"added:          {output['added']}\nalready stored: {output['duplicates']} (duplicates, skipped)"


def repaired(report: Any, _width: int) -> str:
    """``trimem doctor --repair``'s ``RepairReport`` in words, then anything still broken."""
    lines = [
        f"vectors rebuilt:       {report.vectors_rebuilt}",
        f"keyword index rebuilt: {'yes' if report.fts_rebuilt else 'no'}",
        f"entity links rebuilt:  {report.entity_links_rebuilt}",
        f"orphan rows removed:   {report.orphans_removed}",
    ]
    if report.remaining:
        lines += ["still broken (below the tables; restore a backup):",
                  *(f"  {violation.check}: {violation.detail}" for violation in report.remaining)]
    return "\n".join(lines)


def outline(data: dict[str, Any], _width: int) -> str:
    """Nested data (``trimem doctor``) as indented ``key: value`` lines, the values of each level
    aligned, the items of a list as ``- item``."""
    return "\n".join(outline_lines(data, ""))


def outline_lines(value: dict[str, Any] | list[Any], indent: str) -> list[str]:
    if isinstance(value, list):
        return [f"{indent}- {scalar(item)}" for item in value]
    key_chars = max(len(key) for key in value) + 1
    lines = []
    for key, item in value.items():
        if isinstance(item, (dict, list)) and item:
            lines += [f"{indent}{key}:", *outline_lines(item, indent + "  ")]
        else:
            lines.append(f"{indent}{key + ':':<{key_chars}} {scalar(item)}")
    return lines


def scalar(value: Any) -> str:
    """A string as it is (unless empty), anything else as JSON (``true``, ``null``, ``[]``, ``""``)."""
    return value if isinstance(value, str) and value else json.dumps(value, ensure_ascii=False)


def token_scope_cell(token: dict[str, Any]) -> str:
    """A token's scope as ``user_id=alice agent_id=bot``, or ``admin: any scope``."""
    if token["admin"]:
        return "admin: any scope"
    return " ".join(f"{key}={token[key]}" for key in ("user_id", "agent_id", "run_id") if token[key])


def tokens(output: dict[str, Any], width: int) -> str:
    if not output["tokens"]:
        return "no tokens; `trimem token create --user-id ID` makes one"
    rows = [[token["prefix"] + "…", token_scope_cell(token), day(token["created_at"]), day(token["last_used_at"]),
             token["expires_on"] or "never", token["name"]] for token in output["tokens"]]
    return table(("prefix", "scope", "created", "last used", "expires", "name"), rows, width)


def issued_token(output: dict[str, Any], width: int) -> str:
    """The new secret, alone on its line so it copies cleanly, and what it may do."""
    token = output["token"]
    return "\n".join([
        output["secret"], "",
        note(f"Shown once: only its hash is stored. Name {token['name']!r}, {token_scope_cell(token)}, expires "
             f"{token['expires_on'] or 'never'}. Clients send it as 'Authorization: Bearer <token>'.", width),
    ])
