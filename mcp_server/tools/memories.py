"""The tools that write, read and forget memories one by one or by scope, and show their history.

Each applies the default scope (``call_scope``), makes one ``Engine`` call and shapes the
result: as structured content, the memories' briefs (``models.py``: short ids, only what is set
and not implied by the call), or the whole record from ``get_memory``; as text, lines rendered
from the briefs (``replies.py``). The docstrings are the descriptions the model reads.
"""

# No ``from __future__ import annotations``: the SDK reads these signatures at run time.

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult
from pydantic import Field

from mcp_server import replies
from mcp_server.call_scope import default_scope, named_scope
from mcp_server.models import AddBrief, DeletedBrief, DeletedCount, HistoryBrief, MemoryBrief, MemoryOut, PageBrief
from mcp_server.replies import reply
from mcp_server.tools.arguments import (
    AgentId,
    Count,
    ExpirationDate,
    Filters,
    MemoryId,
    Message,
    Metadata,
    NewExpirationDate,
    RunId,
    ShowExpired,
    Text,
    UserId,
)
from mcp_server.tools.state import State, state_of


def add_memory(
    ctx: Context[State],
    text: Annotated[Text, Field(description="One self-contained fact. Send text or messages.")] = None,
    messages: Annotated[list[Message] | None, Field(min_length=1, description="Each message becomes a "
                                                    "memory.")] = None,
    user_id: UserId = None,
    agent_id: AgentId = None,
    run_id: RunId = None,
    metadata: Metadata = None,
    expiration_date: ExpirationDate = None,
    standing: Annotated[bool | None, Field(description="true: shapes every answer of its kind (a diet, injury, "
                                           "spelling, code style, editor).")] = None,
) -> Annotated[CallToolResult, AddBrief]:
    """Remember what the user shares that is worth recalling later: a preference, plan, person or
    decision, as one short fact that reads well on its own. A repeat returns the stored one.
    """
    if (text is None) == (messages is None):
        raise ToolError("send exactly one of text (a fact as a sentence) or messages (a list of {role, content})")
    state = state_of(ctx)
    content = text if text is not None else [m.model_dump(exclude_none=True) for m in messages]
    scope = default_scope(state.config, user_id, agent_id, run_id)
    added = AddBrief.of(
        state.engine().add(content, **scope, metadata=metadata, expiration_date=expiration_date, standing=standing),
        scope, state.max_result_chars,
    )
    return reply(added, replies.added_text(added))


def get_memory(
    ctx: Context[State], memory_id: MemoryId, user_id: UserId = None, agent_id: AgentId = None, run_id: RunId = None
) -> Annotated[CallToolResult, MemoryOut]:
    """One memory by id: its whole record, every field."""
    state = state_of(ctx)
    scope = default_scope(state.config, user_id, agent_id, run_id)
    memory = state.engine().get(memory_id, **scope)
    return reply(MemoryOut.of(memory, state.max_result_chars),
                 replies.memory_line(MemoryBrief.of(memory, scope, state.max_result_chars)))


def list_memories(
    ctx: Context[State],
    user_id: UserId = None,
    agent_id: AgentId = None,
    run_id: RunId = None,
    filters: Filters = None,
    show_expired: ShowExpired = False,
    limit: Count = 20,
    offset: Annotated[int, Field(ge=0, description="From the last page's next_offset.")] = 0,
) -> Annotated[CallToolResult, PageBrief]:
    """A page of memories, newest first, to review them or find an id (search_memory answers
    questions better)."""
    state = state_of(ctx)
    scope = default_scope(state.config, user_id, agent_id, run_id)
    memories = state.engine().list(**scope, filters=filters, show_expired=show_expired, limit=limit, offset=offset)
    page = PageBrief.of(memories, scope, limit, offset, state.max_result_chars)
    return reply(page, replies.page_text(page))


def update_memory(
    ctx: Context[State],
    memory_id: MemoryId,
    text: Annotated[Text, Field(description="The corrected fact.")] = None,
    metadata: Annotated[Metadata, Field(description="Keys to set; a key sent as null is removed.")] = None,
    replace_metadata: Annotated[bool, Field(description="Replace the metadata instead of merging.")] = False,
    expiration_date: NewExpirationDate = None,
    user_id: UserId = None,
    agent_id: AgentId = None,
    run_id: RunId = None,
) -> Annotated[CallToolResult, MemoryBrief]:
    """Correct a memory that has become wrong or outdated, rather than adding a contradicting one;
    memory_history keeps the old text."""
    state = state_of(ctx)
    scope = default_scope(state.config, user_id, agent_id, run_id)
    memory = MemoryBrief.of(state.engine().update(
        memory_id, text=text, metadata=metadata, replace_metadata=replace_metadata,
        expiration_date=expiration_date, **scope,
    ), scope, state.max_result_chars)
    return reply(memory, f"Updated: {replies.memory_line(memory)}")


def delete_memory(
    ctx: Context[State], memory_id: MemoryId, user_id: UserId = None, agent_id: AgentId = None, run_id: RunId = None
) -> Annotated[CallToolResult, DeletedBrief]:
    """Forget one memory, when the user asks or it is plainly wrong."""
    state = state_of(ctx)
    scope = default_scope(state.config, user_id, agent_id, run_id)
    deleted = DeletedBrief(deleted=MemoryBrief.of(state.engine().delete(memory_id, **scope), scope,
                                                  state.max_result_chars))
    return reply(deleted, f"Deleted: {replies.memory_line(deleted.deleted)}")


def delete_all_memories(
    ctx: Context[State], user_id: UserId = None, agent_id: AgentId = None, run_id: RunId = None
) -> Annotated[CallToolResult, DeletedCount]:
    """Forget every memory of a named user, agent or run, only when the user explicitly asks."""
    state = state_of(ctx)
    scope = named_scope(state.config, user_id, agent_id, run_id)
    deleted = DeletedCount(deleted_count=state.engine().delete_all(**scope))
    return reply(deleted, f"Deleted {replies.memories(deleted.deleted_count)}.")


def memory_history(
    ctx: Context[State], memory_id: MemoryId, user_id: UserId = None, agent_id: AgentId = None, run_id: RunId = None
) -> Annotated[CallToolResult, HistoryBrief]:
    """How a memory changed (added, updated, deleted, restored), oldest first."""
    state = state_of(ctx)
    events = HistoryBrief.of(
        state.engine().history(memory_id, **default_scope(state.config, user_id, agent_id, run_id)),
        state.max_result_chars,
    )
    return reply(events, replies.history_text(events))
