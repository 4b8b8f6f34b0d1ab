"""What ``trimem`` prints for a person at a terminal: compact tables of the tools' outputs.

Scripts get the JSON of the same models (``--json``); these tables only choose what
fits on one line per memory: the id's first 8 characters (every command that takes an
id accepts them), the score for a search, the dates, the metadata and the text, cut to
the terminal's width.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from .models import AddOutput, HistoryOutput, MemoryOut, MemoryPage, SearchOutput

ID_CHARS = 8
METADATA_CHARS = 28
MIN_TEXT_CHARS = 20


def cut(text: str, width: int) -> str:
    """``text`` on one line, at most ``width`` characters, an ellipsis marking a cut."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: max(width - 1, 0)] + "…"


def day(stamp: str | None) -> str:
    """The date part of an ISO timestamp (UTC), or '-'."""
    return stamp[:10] if stamp else "-"


def metadata_value(value: Any) -> str:
    """A metadata value as shown: compact JSON unless it is a plain string."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def metadata_pair(key: str, value: Any) -> str:
    """``key=value`` (``metadata_value``)."""
    return f"{key}={metadata_value(value)}"


def metadata_cell(metadata: dict[str, Any]) -> str:
    """``key=value`` pairs (``metadata_pair``), or '-'."""
    return " ".join(metadata_pair(key, value) for key, value in metadata.items()) or "-"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> str:
    """Columns padded to their widest cell; the last column (the text) takes what is left
    of ``width`` and is cut to it."""
    fixed = [max([len(header[i])] + [len(row[i]) for row in rows]) for i in range(len(header) - 1)]
    text_width = max(width - sum(fixed) - 2 * len(fixed), MIN_TEXT_CHARS)
    lines = []
    for row in [header, *rows]:
        cells = [cell.ljust(fixed[i]) for i, cell in enumerate(row[:-1])]
        lines.append("  ".join([*cells, cut(row[-1], text_width)]).rstrip())
    return "\n".join(lines)


def memory_cells(memory: MemoryOut) -> list[str]:
    return [
        memory.id[:ID_CHARS], day(memory.created_at), day(memory.expiration_date),
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
        return "no memory relevant enough"
    rows = [[f"{hit.score:.3f}", *memory_cells(hit)] for hit in output.results]
    return table(("score", *MEMORY_HEADER), rows, width)


def added(output: AddOutput, width: int) -> str:
    rows = [[a.event, *memory_cells(a.memory)] for a in output.results]
    return table(("event", *MEMORY_HEADER), rows, width)


def one_memory(memory: MemoryOut, width: int) -> str:
    """Every field of one memory, one per line, the text whole."""
    fields = [
        ("id", memory.id), ("text", memory.text),
        *((key, value) for key in ("user_id", "agent_id", "run_id", "actor_id", "role")
          if (value := getattr(memory, key)) is not None),
        ("metadata", json.dumps(memory.metadata, ensure_ascii=False)),
        ("created_at", memory.created_at), ("updated_at", memory.updated_at),
        ("expiration_date", memory.expiration_date or "-"),
    ]
    return "\n".join(f"{key + ':':<16} {value}" for key, value in fields)


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
    embedding_model: str
    embedding_backend: str


def scopes(output: ScopesOut, width: int) -> str:
    if not output.scopes:
        return f"no memories yet; the default user is {output.default_user_id!r}"
    rows = [
        [scope["user_id"] or "-", scope["agent_id"] or "-", scope["run_id"] or "-", str(scope["memories"]),
         str(scope["expired"]), "default" if scope["user_id"] == output.default_user_id else ""]
        for scope in output.scopes
    ]
    return table(("user_id", "agent_id", "run_id", "memories", "expired", ""), rows, width)


def stats(output: StatsOut, width: int) -> str:
    size = f"{output.file_bytes / 1e6:.1f} MB" if output.file_bytes >= 1e5 else f"{output.file_bytes / 1e3:.0f} kB"
    lines = [
        f"database:   {output.database} ({size})",
        f"models:     {output.embedding_model} on {output.embedding_backend}",
        f"memories:   {output.memories} ({output.expired} expired)",
        "",
        table(("user_id", "memories", "expired"),
              [[user or "-", str(n["memories"]), str(n["expired"])] for user, n in output.users.items()], width),
    ]
    return "\n".join(lines)
