"""What each hook event does, whichever path it came by: before a prompt, recall and then (when
asked) capture; at session start, recall for the project."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mcp_server.hooks import capture, recall
from mcp_server.hooks.block import Block
from mcp_server.hooks.payload import project_of
from store.config import Config
from store.errors import TrimemError

if TYPE_CHECKING:
    from store.engine import Engine

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PromptOutcome:
    """A prompt's block, and the id of the memory the prompt was captured as (or already was)."""

    block: Block = field(default_factory=Block)
    captured_id: str | None = None


def on_prompt(engine: Engine, config: Config, prompt: str, *, cwd: str | None, session_id: str | None,
              keep: bool, scope: Mapping[str, str]) -> PromptOutcome:
    """Recall for ``prompt`` in ``scope``, then, with ``keep``, capture it in the session's run.

    Capture comes second, so a prompt never recalls itself. A capture the engine refuses (a
    prompt longer than a memory may be, a store that cannot be written) costs the prompt only
    its capture: one line in the log, and the block still goes in. The run is the session,
    unless the caller's scope already names one (a token bound to a run)."""
    block = recall.for_prompt(engine, config, prompt, scope)
    if not keep:
        return PromptOutcome(block)
    try:
        added = capture.capture(engine, config, prompt, project_of(cwd),
                                {**scope, "run_id": scope.get("run_id") or session_id})
    except TrimemError as exc:
        log.warning("trimem did not capture the prompt: %s", exc)
        return PromptOutcome(block)
    return PromptOutcome(block, added and added.memory.id)


def on_session(engine: Engine, config: Config, *, cwd: str | None, scope: Mapping[str, str]) -> Block:
    """Recall for a session starting in ``cwd``."""
    return recall.for_session(engine, config, project_of(cwd), scope)
