"""The tool Claude Code's ``mcp_tool`` hook calls before each prompt (``mcp_server.hooks``).

It answers hook JSON, the only text of an ``mcp_tool`` hook that Claude Code injects: the block
as ``UserPromptSubmit``'s ``additionalContext``, or ``{}`` when nothing is relevant, which adds
nothing at all. The structured content is the same object, so a client reading either sees the
same answer. Since a hook must never break a session, an engine refusal (no database yet, a
store that cannot be read) is one line in the server's log and ``{}``, never a tool error.
"""

# No ``from __future__ import annotations``: the SDK reads these signatures at run time.

import json
import logging
from typing import Annotated, Literal

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, Field

from mcp_server.call_scope import default_scope
from mcp_server.hooks.events import PromptOutcome, hook_output, on_prompt
from mcp_server.hooks.settings import PROMPT_EVENT
from mcp_server.tools.arguments import AgentId, RunId, UserId
from mcp_server.tools.state import State, state_of
from store.errors import TrimemError

log = logging.getLogger(__name__)

# Optional texts are ``str = None``, as ``arguments.Text``: a session id of digits must stay a string.
Prompt = Annotated[str, Field(description="The user's prompt.")]
Folder = Annotated[str, Field(description="The session's folder: the project.")]
SessionId = Annotated[str, Field(description="A captured prompt's run_id.")]


class PromptContext(BaseModel):
    """What Claude Code adds to the model's context before the prompt."""

    hookEventName: Literal["UserPromptSubmit"]  # Claude Code's own spelling
    additionalContext: str = Field(description="The recalled memories between <trimem-memories> tags.")


class RecallOutput(BaseModel):
    """Claude Code's hook output: the block to inject, or ``{}`` when none is relevant."""

    hookSpecificOutput: PromptContext | None = None


def recall_for_prompt(
    ctx: Context[State],
    prompt: Prompt,
    cwd: Folder = None,
    session_id: SessionId = None,
    capture: Annotated[bool, Field(description="Store the prompt too.")] = False,
    user_id: UserId = None,
    agent_id: AgentId = None,
    run_id: RunId = None,
) -> Annotated[CallToolResult, RecallOutput]:
    """For Claude Code's prompt hook, not the model: hook JSON that injects the memories relevant to
    a prompt ({} if none is).
    """
    state = state_of(ctx)
    scope = default_scope(state.config, user_id, agent_id, run_id)
    try:
        outcome = on_prompt(state.engine(), state.config, prompt, cwd=cwd, session_id=session_id, keep=capture,
                            scope=scope)
    except TrimemError as exc:
        log.warning("recall_for_prompt injected nothing: %s", exc)
        outcome = PromptOutcome()
    if outcome.captured_id:
        log.debug("recall_for_prompt captured the prompt as %s", outcome.captured_id)
    output = hook_output(PROMPT_EVENT, outcome.block)
    return CallToolResult(content=[TextContent(text=json.dumps(output, ensure_ascii=False))],
                          structured_content=output)
