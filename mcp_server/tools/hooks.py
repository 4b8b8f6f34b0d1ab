"""The tool Claude Code's ``mcp_tool`` hook calls before each prompt (``mcp_server.hooks``).

Its text is exactly what the hook injects: the block, or nothing. Since a hook must never
break a session, an engine refusal (no database yet, a store that cannot be read) is one line
in the server's log and an empty result, never a tool error.
"""

# No ``from __future__ import annotations``: the SDK reads these signatures at run time.

import logging
from typing import Annotated

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult
from pydantic import Field

from mcp_server.call_scope import default_scope
from mcp_server.hooks.events import PromptOutcome, on_prompt
from mcp_server.models import RecallOutput
from mcp_server.replies import reply
from mcp_server.tools.arguments import AgentId, RunId, UserId
from mcp_server.tools.state import State, state_of
from store.errors import TrimemError

log = logging.getLogger(__name__)

# Optional texts are ``str = None``, as ``arguments.Text``: a session id of digits must stay a string.
Prompt = Annotated[str, Field(description="The user's prompt.")]
Folder = Annotated[str, Field(description="The session's folder: the project.")]
SessionId = Annotated[str, Field(description="A captured prompt's run_id.")]


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
    """For Claude Code's prompt hook, not the model: the memories relevant to a prompt as a block to
    inject (empty if none is).
    """
    state = state_of(ctx)
    scope = default_scope(state.config, user_id, agent_id, run_id)
    try:
        outcome = on_prompt(state.engine(), state.config, prompt, cwd=cwd, session_id=session_id, keep=capture,
                            scope=scope)
    except TrimemError as exc:
        log.warning("recall_for_prompt injected nothing: %s", exc)
        outcome = PromptOutcome()
    output = RecallOutput(block=outcome.block.text, recalled_ids=list(outcome.block.memory_ids),
                          captured_id=outcome.captured_id)
    return reply(output, output.block)
