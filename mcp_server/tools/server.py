"""The MCP server: trimem's engine behind ten tools, over stdio or streamable HTTP.

``build_server(config)`` returns an ``MCPServer`` whose lifespan opens one ``Engine`` and loads
the models in a background thread (``state.py``), so the ``initialize`` answer never waits for
the database, ONNX Runtime or spaCy; the first tool call waits only for what it needs that is
still loading. The tools are plain functions in ``memories.py``, ``search.py`` and ``hooks.py``
(the one Claude Code's hooks call); this module registers them, each wrapped by ``serving``.
No SQL and no scoring here.
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import Tool, ToolAnnotations

from store import cancellation
from store.config import Config
from store.errors import TrimemError
from store.scope import SCOPE_KEYS
from store.versions import trimem_version

if TYPE_CHECKING:
    from store.engine import Engine

from mcp_server.call_scope import default_scope
from mcp_server.tools import schemas
from mcp_server.tools.arguments import ToolFn, configured
from mcp_server.tools.calls import CallRules, result_count
from mcp_server.tools.hooks import recall_for_prompt
from mcp_server.tools.memories import (
    add_memory,
    delete_all_memories,
    delete_memory,
    get_memory,
    list_memories,
    memory_history,
    update_memory,
)
from mcp_server.tools.search import explain_search, search_memory
from mcp_server.tools.state import Running, State, lifespan

log = logging.getLogger(__name__)

INSTRUCTIONS = """\
trimem is the user's long-term memory, stored locally on their machine.
Call search_memory before answering anything that may depend on what you were told in
earlier conversations (preferences, people, projects, plans, facts about the user).
Call add_memory when the user tells you something worth remembering later: one short,
self-contained fact per memory, written so it makes sense without the conversation.
Without user_id, every tool works on the default user's memories; agent_id and run_id
narrow within that user."""


def hints(*, read_only: bool, destructive: bool = False) -> ToolAnnotations:
    """A tool's annotations. Every tool is idempotent (a repeated add returns the stored memory)
    and touches nothing outside the store."""
    return ToolAnnotations(
        read_only_hint=read_only, destructive_hint=destructive, idempotent_hint=True, open_world_hint=False
    )


TOOLS: tuple[tuple[Callable[..., Any], ToolAnnotations], ...] = (
    (add_memory, hints(read_only=False)),
    (search_memory, hints(read_only=True)),
    (explain_search, hints(read_only=True)),
    (get_memory, hints(read_only=True)),
    (list_memories, hints(read_only=True)),
    (update_memory, hints(read_only=False, destructive=True)),
    (delete_memory, hints(read_only=False, destructive=True)),
    (delete_all_memories, hints(read_only=False, destructive=True)),
    (memory_history, hints(read_only=True)),
    (recall_for_prompt, hints(read_only=False)),  # it writes when asked to capture
)
"""Every tool with its annotations, in the order ``tools/list`` gives them."""


def serving(fn: ToolFn, config: Config, rules: CallRules, *, must_name: bool, per_memory: bool = False
            ) -> Callable[..., Any]:
    """``fn`` as the server calls it: in the scope its caller may reach (``rules.scoped``), in a
    worker thread under the configured time limit, recorded (``rules.record``), and with the
    engine's refusals as tool errors that show the engine's message.

    ``per_memory``: the call costs its caller one unit per memory it returns, not one per request
    (on the HTTP service, the token's rate: ``limits.RateBudget``). It is admitted only while the
    caller may spend and charged once it has succeeded (``rules.admit``, ``rules.settle``), so a
    refused or stopped call costs only its request.

    The SDK shows a ``ToolError``'s text to the model but hides other exceptions' text
    (logging them as crashes), and ``TrimemError`` messages are written for the model:
    they say what was wrong and what to send instead. Other exceptions stay crashes: the
    SDK logs the traceback, answers ``is_error``, and the server keeps serving. A call past
    the time limit is answered at once; its thread stops at the engine's next checkpoint, before
    the write's transaction (``stoppable``), and a write already in its transaction is still whole.
    """
    timeout = config.service.tool_timeout_seconds

    @functools.wraps(fn)
    async def call(**arguments: Any) -> Any:
        started, status, count = time.perf_counter(), "error", 0
        scope = {key: arguments[key] for key in SCOPE_KEYS if arguments.get(key) is not None}  # as asked
        try:
            arguments = rules.scoped(arguments, must_name=must_name)
            scope = default_scope(config, *(arguments.get(key) for key in SCOPE_KEYS))
            if per_memory:
                rules.admit()
            with anyio.fail_after(timeout):
                output = await anyio.to_thread.run_sync(
                    functools.partial(stoppable, fn, arguments, anyio.get_cancelled_exc_class()), abandon_on_cancel=True
                )
            status, count = "ok", result_count(output)
            if per_memory:
                rules.settle(count)
            return output
        except TimeoutError:
            status = "timeout"
            raise ToolError(f"the call took longer than {timeout:g} seconds (service.tool_timeout_seconds) and was "
                            "abandoned; a write it was making may still complete: check before repeating it") from None
        except TrimemError as exc:
            status = "refused"
            raise ToolError(str(exc)) from exc
        except ToolError:
            status = "refused"
            raise
        finally:
            rules.record(fn.__name__, scope, arguments, count, time.perf_counter() - started, status)

    return call


def stoppable(fn: Callable[..., Any], arguments: dict[str, Any], cancelled: type[BaseException]) -> Any:
    """``fn(**arguments)`` on a worker thread, stopped at the engine's checkpoints once its caller
    no longer waits (``store.cancellation``): past the time limit, or cancelled by the client.
    ``cancelled`` is the event loop's cancellation exception, which the check raises."""
    try:
        with cancellation.stopping_when(anyio.from_thread.check_cancelled):
            return fn(**arguments)
    except cancelled:
        log.info("%s stopped: its caller no longer waits, and nothing of it was written", fn.__name__)
        raise


class TrimemServer(MCPServer[State]):
    """The SDK's server, listing its tools as ``schemas.py`` trims them: leaner inputs for the
    model, outputs quicker for a client to validate. Arguments are still validated against the
    full signatures, and the output schemas keep every type."""

    async def list_tools(self) -> list[Tool]:
        return [
            tool.model_copy(update={
                "input_schema": schemas.for_model(tool.input_schema),
                "output_schema": schemas.for_validation(tool.output_schema),
            })
            for tool in await super().list_tools()
        ]


def build_server(
    config: Config, open_engine: Callable[[Config], Engine] | None = None, *, rules: CallRules | None = None
) -> TrimemServer:
    """The MCP server for ``config``; ``open_engine`` lets tests share loaded models. ``rules``
    are what a front end adds around every call (``calls.py``): by default nothing, as over
    stdio; the HTTP service's tokens, rate and access log (``service.calls``)."""
    rules = rules or CallRules()
    running = Running()
    server = TrimemServer(
        "trimem",
        title="trimem memory",
        instructions=INSTRUCTIONS,
        version=trimem_version(),
        log_level=config.server.log_level.upper(),
        lifespan=lifespan(config, open_engine, running),
        auth=rules.auth,
        token_verifier=rules.verifier(running.engine),
    )
    for fn, tool_hints in TOOLS:
        served = serving(configured(fn, config), config, rules, must_name=fn is delete_all_memories,
                         per_memory=fn is add_memory)
        # cleandoc: clients show the description as is, indentation included.
        server.add_tool(served, description=inspect.cleandoc(fn.__doc__ or ""), annotations=tool_hints,
                        structured_output=True)
    return server
