"""Capture: a prompt kept as a memory, when the user asked for it (off by default).

What is stored is the prompt without any ``<private>…</private>`` part (an unclosed one hides
everything after it) and without any block trimem injected, so recall never feeds capture.
What is left is not stored when it says too little (shorter than ``hooks.capture_min_chars``)
or is a slash command; the engine answers ``DUPLICATE`` for a text already in the scope.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from mcp_server.hooks.block import without_blocks
from mcp_server.hooks.recall import PROJECT_KEY
from store.config import Config
from store.records import AddedMemory

if TYPE_CHECKING:
    from store.engine import Engine

PRIVATE = re.compile(r"<private>.*?(?:</private>|\Z)", re.DOTALL | re.IGNORECASE)
SOURCE = "claude-code"
"""The metadata ``source`` of every captured prompt, so they can be listed and forgotten together."""


def kept_text(prompt: str) -> str:
    """What of ``prompt`` may be stored: trimem's blocks out first (they are well-formed, while a
    memory shown in one might hold a stray ``<private>``), then the private parts."""
    return PRIVATE.sub("", without_blocks(prompt)).strip()


def worth_keeping(text: str, min_chars: int) -> bool:
    """Whether a prompt's kept text says enough to remember: not a slash command, and at least
    ``min_chars`` characters."""
    return not text.startswith("/") and len(text) >= min_chars


def capture(engine: Engine, config: Config, prompt: str, project: str | None,
            scope: Mapping[str, str]) -> AddedMemory | None:
    """Store ``prompt``'s kept text in ``scope`` (its ``run_id`` the session) with its project and
    source as metadata; ``None`` when it is not worth keeping."""
    text = kept_text(prompt)
    if not worth_keeping(text, config.hooks.capture_min_chars):
        return None
    metadata = {"source": SOURCE, **({PROJECT_KEY: project} if project else {})}
    [added] = engine.add(text, **scope, metadata=metadata)
    return added
