"""The tools that recall memories for a question, and explain how a search ranked them.

Each applies the default scope (``call_scope``), makes one ``Engine`` call and shapes the
result: ``search_memory`` as the memories' briefs and lines rendered from them (``models.py``,
``replies.py``), ``explain_search`` as the whole record. The docstrings are the descriptions the
model reads.
"""

# No ``from __future__ import annotations``: the SDK reads these signatures at run time.

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult
from pydantic import Field

from mcp_server import replies
from mcp_server.call_scope import default_scope
from mcp_server.models import ExplainOutput, SearchBrief
from mcp_server.replies import reply
from mcp_server.tools.arguments import (
    SEARCH_TOP_K,
    AgentId,
    Filters,
    RunId,
    ShowExpired,
    Text,
    Threshold,
    TopK,
    UserId,
)
from mcp_server.tools.state import State, state_of


def search_memory(
    ctx: Context[State],
    query: Annotated[Text, Field(description="What to recall, in plain words.")],
    user_id: UserId = None,
    agent_id: AgentId = None,
    run_id: RunId = None,
    top_k: TopK = SEARCH_TOP_K,
    threshold: Threshold = None,
    filters: Filters = None,
    show_expired: ShowExpired = False,
) -> Annotated[CallToolResult, SearchBrief]:
    """Recall memories relevant to a question, best first. Call it before answering whenever earlier
    conversations may matter. A score is the chance the memory answers: above 0.5 usually, below 0.1 rarely.
    """
    state = state_of(ctx)
    scope = default_scope(state.config, user_id, agent_id, run_id)
    hits = state.engine().search(
        query, **scope, top_k=top_k, threshold=threshold, filters=filters, show_expired=show_expired
    )
    found = SearchBrief.of(hits, scope, state.max_result_chars)
    return reply(found, replies.search_text(found))


def explain_search(
    ctx: Context[State],
    query: Annotated[Text, Field(description="The search to explain.")],
    user_id: UserId = None,
    agent_id: AgentId = None,
    run_id: RunId = None,
    top_k: TopK = SEARCH_TOP_K,
    threshold: Threshold = None,
    filters: Filters = None,
    show_expired: ShowExpired = False,
) -> ExplainOutput:
    """search_memory with every part of every score (meaning, keywords, entities and what they are
    divided by), how the query was read, and the candidates dropped: for a memory missing or
    ranked low.
    """
    state = state_of(ctx)
    explanation = state.engine().explain(
        query, **default_scope(state.config, user_id, agent_id, run_id),
        top_k=top_k, threshold=threshold, filters=filters, show_expired=show_expired,
    )
    return ExplainOutput.of(explanation, state.max_result_chars, max_dropped=top_k)
