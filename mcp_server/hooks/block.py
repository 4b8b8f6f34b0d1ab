"""The block a hook injects: the recalled memories between trimem's tags, one line each.

    <trimem-memories>
    Memories trimem recalled for this prompt (ids work with get_memory):
    - 2bc388d0 2026-12-03 Ana works as a nurse at Santa Maria hospital
    </trimem-memories>

It is at most ``hooks.max_block_chars`` characters, tags included, and holds whole lines only:
a memory whose line does not fit in what is left is left out, and the next (shorter) one may
still fit. With no line at all there is no block: an empty string, not empty tags.

No text inside the block can end it or open another: ``&``, ``<`` and ``>`` in a memory (and
in the project's name in the heading) are written as ``&amp;``, ``&lt;`` and ``&gt;``, so the
block's only ``<`` and ``>`` are its two tags, whatever the memories hold (any casing, any
nesting, any spacing of a tag-like text). A model reads the entities as the characters.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass

from store.records import Memory, short_id

OPEN_TAG, CLOSE_TAG = "<trimem-memories>", "</trimem-memories>"
BLOCK = re.compile(re.escape(OPEN_TAG) + r".*?(?:" + re.escape(CLOSE_TAG) + r"|\Z)", re.DOTALL)
"""A block trimem injected, up to its closing tag (or to the end, when a prompt kept only its start):
its text holds no other ``<``, so the first closing tag after the opening one is its own."""
WHITESPACE = re.compile(r"\s+")

PROMPT_HEADING = "Memories trimem recalled for this prompt (ids work with get_memory):"


def inert(text: str) -> str:
    """``text`` on one line, with ``&``, ``<`` and ``>`` as entities: it can form no tag and no
    line of its own, so it can neither end the block nor open another."""
    return WHITESPACE.sub(" ", html.escape(text, quote=False)).strip()


def session_heading(project: str) -> str:
    """The heading of a session's block; ``project`` is a folder's name, which may hold ``<``."""
    return f"Memories trimem recalled for project {inert(project)} (ids work with get_memory):"


def memory_line(memory: Memory) -> str:
    """One memory on one line: its id, its creation day and its text (made ``inert``)."""
    return f"- {short_id(memory.id)} {memory.created_at[:10]} {inert(memory.text)}"


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
