"""The block a hook injects: the recalled memories between trimem's tags, one line each.

    <trimem-memories>
    Memories trimem recalled for this prompt (ids work with get_memory):
    - 2bc388d0 2026-12-03 Ana works as a nurse at Santa Maria hospital
    </trimem-memories>

It is at most ``hooks.max_block_chars`` characters, tags included, and holds whole lines only:
a memory whose line does not fit in what is left is left out, and the next (shorter) one may
still fit. With no line at all there is no block: an empty string, not empty tags.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from store.records import Memory, short_id

OPEN_TAG, CLOSE_TAG = "<trimem-memories>", "</trimem-memories>"
BLOCK = re.compile(re.escape(OPEN_TAG) + r".*?(?:" + re.escape(CLOSE_TAG) + r"|\Z)", re.DOTALL)
"""A block trimem injected, up to its closing tag (or to the end, when a prompt kept only its start)."""
TAG = re.compile(rf"</?{re.escape(OPEN_TAG[1:-1])}>")
WHITESPACE = re.compile(r"\s+")

PROMPT_HEADING = "Memories trimem recalled for this prompt (ids work with get_memory):"


def session_heading(project: str) -> str:
    return f"Memories trimem recalled for project {project} (ids work with get_memory):"


def memory_line(memory: Memory) -> str:
    """One memory on one line: its id, its creation day and its text, with line breaks and
    trimem's own tags taken out, so a memory can neither end the block nor open another."""
    text = WHITESPACE.sub(" ", TAG.sub("", memory.text)).strip()
    return f"- {short_id(memory.id)} {memory.created_at[:10]} {text}"


@dataclass(frozen=True)
class Block:
    """What a hook injects (``""`` for nothing), and the ids of the memories it shows."""

    text: str = ""
    memory_ids: tuple[str, ...] = ()


def render(memories: Sequence[Memory], heading: str, max_chars: int) -> Block:
    """The block for ``memories`` (best first) within ``max_chars``: empty when none fits."""
    frame = f"{OPEN_TAG}\n{heading}\n{CLOSE_TAG}"
    room = max_chars - len(frame)
    lines, shown = [], []
    for memory in memories:
        line = memory_line(memory)
        if len(line) + 1 <= room:  # the line and its line break
            lines.append(line)
            shown.append(memory.id)
            room -= len(line) + 1
    if not lines:
        return Block()
    return Block("\n".join((OPEN_TAG, heading, *lines, CLOSE_TAG)), tuple(shown))


def without_blocks(text: str) -> str:
    """``text`` without any block trimem injected."""
    return BLOCK.sub("", text)
