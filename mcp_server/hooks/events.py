"""What each hook event does, whichever path it came by: before a prompt, recall and then (when
asked) capture; at session start, recall for the project. And what a hook hands back to Claude
Code: hook JSON (``hook_output``), the one form both the ``command`` and the ``mcp_tool`` paths
inject (an ``mcp_tool`` hook's plain text is dropped)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mcp_server.hooks import capture, recall
from mcp_server.hooks.block import Block
from mcp_server.hooks.project import project_of
from mcp_server.hooks.settings import EVENTS
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


def hook_output(event: str, block: Block) -> dict[str, Any]:
    """What a hook answers Claude Code: the block as the event's ``additionalContext``, which
    Claude Code adds to the model's context, or ``{}`` when there is no block, which adds nothing
    at all (not even a line saying the hook ran). Claude Code's hook output contract, for
    ``UserPromptSubmit`` and ``SessionStart``."""
    if event not in EVENTS:
        raise ValueError(f"trimem hooks no {event!r} event")
    if not block.text:
        return {}
    return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": block.text}}
