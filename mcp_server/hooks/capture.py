"""Capture: a prompt kept as a memory, when the user asked for it (off by default).

What is stored is the prompt without any block trimem injected (so recall never feeds
capture), without any ``<private>…</private>`` part (``private.py``), and with its secrets
replaced by markers (``secrets.py``; ``hooks.redact_secrets``). What is left is not stored when
it says too little (shorter than ``hooks.capture_min_chars``) or is a slash command; the engine
answers ``DUPLICATE`` for a text already in the scope.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from mcp_server.hooks.block import without_blocks
from mcp_server.hooks.private import without_private
from mcp_server.hooks.project import Project
from mcp_server.hooks.secrets import redact
from store.config import Config
from store.records import AddedMemory

if TYPE_CHECKING:
    from store.engine import Engine

SOURCE = "claude-code"
"""The metadata ``source`` of every captured prompt, so they can be listed and forgotten together."""


def kept_text(prompt: str, redact_secrets: bool) -> str:
    """What of ``prompt`` may be stored: trimem's blocks out first (a block holds no ``<``, so it
    cannot open or close a private span), then the private parts, then, with ``redact_secrets``,
    the secrets."""
    text = without_private(without_blocks(prompt))
    return (redact(text) if redact_secrets else text).strip()


def worth_keeping(text: str, min_chars: int) -> bool:
    """Whether a prompt's kept text says enough to remember: not a slash command, and at least
    ``min_chars`` characters."""
    return not text.startswith("/") and len(text) >= min_chars


def capture(engine: Engine, config: Config, prompt: str, project: Project | None,
            scope: Mapping[str, str]) -> AddedMemory | None:
    """Store ``prompt``'s kept text in ``scope`` (its ``run_id`` the session) with its project
    (name and path) and source as metadata; ``None`` when it is not worth keeping. A prompt is a
    request, never marked standing, even when it reads like a preference ("I always want tests")."""
    text = kept_text(prompt, config.hooks.redact_secrets)
    if not worth_keeping(text, config.hooks.capture_min_chars):
        return None
    metadata = {**(project.metadata() if project else {}), "source": SOURCE}
    [added] = engine.add(text, **scope, metadata=metadata, standing=False)
    return added
