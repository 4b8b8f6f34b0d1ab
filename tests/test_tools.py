"""A tool is a plain function: called directly, on the lifespan's state with a real engine.

No server, no client: ``test_mcp.py`` covers the tools as a client sees them, this covers
what one tool does with the ``Context`` the SDK would hand it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context

from mcp_server.models import MemoryBrief, MemoryOut
from mcp_server.tools.memories import add_memory, get_memory
from mcp_server.tools.state import State
from store import Config, Engine
from store.errors import NotFound


@pytest.fixture
def context(config: Config, engine_factory: Callable[[Config], Engine]) -> Iterator[Context[State]]:
    """The ``Context`` of a tool call, as the SDK builds it, over a ``State`` that opens an engine
    on the test's store with the session's models."""
    state = State(config, engine_factory)
    try:
        yield Context(request_context=ServerRequestContext(
            session=None, lifespan_context=state, protocol_version="2025-11-25", method="tools/call",
        ))
    finally:
        state.close()


def test_a_tool_called_directly_stores_through_the_engine(context: Context[State]) -> None:
    state = context.request_context.lifespan_context
    added = add_memory(context, text="Ana's sister Marta lives in Madrid", metadata={"topic": "family"})
    [result] = added.structured_content["results"]
    scope = {"user_id": state.config.server.user_id}
    stored = state.engine().get(result["id"], **scope)  # the brief's short id stands for the memory
    assert (stored.text, stored.metadata) == ("Ana's sister Marta lives in Madrid", {"topic": "family"})
    assert result == {"event": "ADD", **MemoryBrief.of(stored, scope, state.max_result_chars).model_dump(mode="json")}

    got = get_memory(context, memory_id=stored.id)
    assert got.structured_content == MemoryOut.of(stored, state.max_result_chars).model_dump(mode="json")
    assert got.content[0].text.endswith('Ana\'s sister Marta lives in Madrid | metadata {"topic":"family"}')


def test_a_tool_called_directly_raises_the_engines_refusal(context: Context[State]) -> None:
    """The engine's error reaches the caller as itself: ``server.serving`` is what makes it a tool error."""
    with pytest.raises(NotFound, match="not found"):
        get_memory(context, memory_id="feedbeef")
