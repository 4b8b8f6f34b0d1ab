"""The MCP server: trimem's engine behind nine tools, over stdio or streamable HTTP.

``build_server(config)`` returns an ``MCPServer`` whose lifespan opens one ``Engine``
and loads the models in a background thread, so the ``initialize`` answer never waits
for the database, ONNX Runtime or spaCy; the first tool call waits only for what it
needs that is still loading. Each tool validates its arguments through its type hints, applies the
default scope, makes one ``Engine`` call and shapes the result: the full record as
structured content (``models.py``), a short text for the model (``replies.py``). No SQL
and no scoring here.
"""

# No ``from __future__ import annotations``: the tools' annotations use argument types
# built from the configuration inside ``build_server``, so they must be evaluated there.

import functools
import inspect
import logging
import math
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import anyio
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, Tool, ToolAnnotations
from pydantic import BaseModel, Field

from store import cancellation
from store.config import Config
from store.errors import DatabaseUnavailable, TrimemError
from store.records import SentRole
from store.validation import DATE_PATTERN, NO_EXPIRATION
from store.versions import trimem_version

if TYPE_CHECKING:
    from store.engine import Engine

from mcp_server import replies
from mcp_server.call_scope import default_scope, named_scope
from mcp_server.models import (
    AddOutput,
    DeletedCount,
    DeletedOut,
    ExplainOutput,
    HistoryOutput,
    MemoryOut,
    MemoryPage,
    SearchOutput,
)
from mcp_server.replies import reply
from mcp_server.service.access_log import TEXT_ARGUMENTS, record, result_count
from mcp_server.service.auth import SCOPE_ARGUMENTS, StoreTokenVerifier, caller, token_scope
from mcp_server.service.limits import RateBudget, token_key
from mcp_server.tools import schemas

log = logging.getLogger(__name__)

INSTRUCTIONS = """\
trimem is the user's long-term memory, stored locally on their machine.
Call search_memory before answering anything that may depend on what you were told in
earlier conversations (preferences, people, projects, plans, facts about the user).
Call add_memory when the user tells you something worth remembering later: one short,
self-contained fact per memory, written so it makes sense without the conversation.
Without user_id, every tool works on the default user's memories; agent_id and run_id
narrow within that user."""

ToolFn = TypeVar("ToolFn", bound=Callable[..., Any])


class State:
    """What the lifespan hands every tool call: the engine, opened and warmed in the background.

    ``initialize`` is answered while a thread opens the database and loads the models, so
    the handshake costs no more than a bare server's; a tool call waits only for what is
    still loading. A failure to open the database is that call's error, not a dead server.
    A database that cannot be reached yet (a PostgreSQL server still starting, or restarting,
    when trimem starts beside it) is tried again with backoff, from ``RETRY_FIRST_SECONDS`` up
    to ``RETRY_MOST_SECONDS`` apart, until it answers; meanwhile every call is told so at once.
    """

    RETRY_FIRST_SECONDS = 0.5
    RETRY_MOST_SECONDS = 15.0

    def __init__(self, config: Config, open_engine: "Callable[[Config], Engine] | None") -> None:
        self._config = config
        self._open_engine = open_engine
        self._engine: Engine | None = None
        self._error: TrimemError | None = None
        self._opened = threading.Event()
        """Set once the first attempt to open the database has ended, either way."""
        self._closing = threading.Event()
        self._lock = threading.Lock()
        threading.Thread(target=self._start, name="trimem-start", daemon=True).start()

    def _start(self) -> None:
        delay = self.RETRY_FIRST_SECONDS
        while (engine := self._open(delay)) is None:
            if self._error is not None and not isinstance(self._error, DatabaseUnavailable):
                return
            if self._closing.wait(delay):
                return
            delay = min(delay * 2, self.RETRY_MOST_SECONDS)
        log.info(
            "trimem serving %s for user_id=%r; models: %s on %s, spaCy %s", engine.location,
            self._config.server.user_id, engine.embedder.name, engine.embedder.backend,
            self._config.store.spacy_pipeline or "(the best installed)",
        )
        warm_up(engine)

    def _open(self, retry_in: float) -> "Engine | None":
        """One attempt to open the engine: it, or ``None`` with ``_error`` saying why."""
        try:
            if self._open_engine is None:
                from store.engine import Engine  # numpy and apsw load here, after the handshake began

                self._open_engine = Engine
            engine = self._open_engine(self._config)
        except DatabaseUnavailable as exc:
            log.warning("%s; trying again in %g s", exc, retry_in)
            return self._failed(unreachable(exc, retry_in))
        except TrimemError as exc:
            log.error("%s", exc)
            return self._failed(exc)
        except Exception as exc:  # what no check foresaw: the log keeps the traceback, the caller a reason
            log.exception("opening %s failed", self._config.location)
            return self._failed(TrimemError(f"the database {self._config.location} could not be opened ({exc})"))
        with self._lock:
            if self._closing.is_set():  # the server stopped while this attempt ran
                engine.close()
                return None
            if self._error is not None:
                log.info("%s answers now; serving", engine.location)
            self._engine, self._error = engine, None
        self._opened.set()
        return engine

    def _failed(self, error: TrimemError) -> None:
        self._error = error
        self._opened.set()

    def engine(self) -> "Engine":
        """The open engine, waiting for it if start-up is still opening the database."""
        self._opened.wait()
        engine, error = self._engine, self._error
        if engine is None:
            raise error or TrimemError("the server is stopping")
        return engine

    def close(self) -> None:
        self._opened.wait()
        with self._lock:
            self._closing.set()
            engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()


def unreachable(exc: DatabaseUnavailable, retry_in: float) -> DatabaseUnavailable:
    """What a call is told while the database cannot be opened: the reason, and that this
    server keeps trying (``Retry-After`` is the wait before its next attempt)."""
    error = DatabaseUnavailable(f"{exc}. This server keeps trying to open it and serves as soon as it answers")
    error.retry_after_seconds = max(1, math.ceil(retry_in))
    return error


def warm_up(engine: "Engine") -> None:
    """Load the models now, so the first search does not pay for it.

    A failure is logged, not raised: this thread only saves time, and the first tool call
    that needs the model retries the load and reports the error to the caller.
    """
    try:
        engine.warm_up()
    except Exception:
        log.exception("warming up the models failed; the first tool call will try again")
    else:
        log.debug("models loaded; ready")


class Running:
    """The running server's ``State``, for what serves requests outside a tool call (the token
    verifier of ``--auth tokens`` reads the store before any session exists)."""

    def __init__(self) -> None:
        self.state: State | None = None

    def engine(self) -> "Engine":
        if self.state is None:
            raise TrimemError("the server is not running")
        return self.state.engine()


def lifespan(
    config: Config, open_engine: "Callable[[Config], Engine] | None", running: Running
) -> Callable[[MCPServer[State]], AbstractAsyncContextManager[State]]:
    """Start opening the engine for the server's lifetime; close it at the end."""

    @asynccontextmanager
    async def run(_server: MCPServer[State]) -> AsyncIterator[State]:
        state = running.state = State(config, open_engine)
        try:
            yield state
        finally:
            running.state = None
            state.close()

    return run


def serving(fn: ToolFn, config: Config, *, must_name: bool, access_log: bool, budget: RateBudget | None = None,
            per_memory: bool = False) -> Callable[..., Any]:
    """``fn`` as the server calls it: in the calling token's scope (``auth.token_scope``), in a
    worker thread under the configured time limit, logged (``access_log``), and with the
    engine's refusals as tool errors that show the engine's message.

    ``per_memory``: the call costs the token's rate ``budget`` one unit per memory it returns,
    not one per request (the request paid the first; ``limits.RateBudget``). It is charged once
    the call has succeeded, so a refused or stopped call costs only its request, and it may run
    the bucket into debt: the token's next requests wait until it is paid back (429 with
    ``Retry-After``), and a call that finds it in debt already is refused with the wait.

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
        token = caller()
        access = get_access_token() if budget is not None and per_memory else None
        scope = {key: arguments[key] for key in SCOPE_ARGUMENTS if arguments.get(key) is not None}  # as asked
        try:
            arguments = token_scope(arguments, must_name=must_name)
            scope = default_scope(config, *(arguments.get(key) for key in SCOPE_ARGUMENTS))
            if access is not None and (wait := budget.charge(token_key(access), 0)):
                raise ToolError(budget.refused(wait))
            with anyio.fail_after(timeout):
                output = await anyio.to_thread.run_sync(
                    functools.partial(stoppable, fn, arguments, anyio.get_cancelled_exc_class()), abandon_on_cancel=True
                )
            status, count = "ok", result_count(output)
            if access is not None:
                budget.charge(token_key(access), count - 1)
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
            if access_log:
                texts = {key: arguments.get(key) for key in TEXT_ARGUMENTS if key in arguments} \
                    if config.service.log_texts else {}
                record(fn.__name__, token and token["name"], scope, count, time.perf_counter() - started, status,
                       texts)

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


def engine_of(ctx: Context) -> "Engine":
    state: State = ctx.request_context.lifespan_context
    return state.engine()


# Argument types shared by the tools; descriptions are what the model reads.
# The server's instructions explain scopes once; each argument says only what its name does not.
UserId = Annotated[str | None, Field(description="Omitted: the default user.")]
AgentId = Annotated[str | None, Field(description="Narrows within the user.")]
RunId = Annotated[str | None, Field(description="Narrows within the user.")]
MemoryId = Annotated[str, Field(min_length=1, description="An id as the other tools show it.")]
Metadata = Annotated[dict[str, Any] | None, Field(description="A JSON object, e.g. {\"category\": \"food\"}.")]
Filters = Annotated[
    dict[str, Any] | None,
    Field(description="On metadata, created_at or updated_at: {\"category\": \"work\"}, {\"priority\": {\"gte\": "
          "3}}, {\"OR\": [...]}, {\"NOT\": {...}}; ops eq ne gt gte lt lte in nin contains icontains."),
]
ShowExpired = Annotated[bool, Field(description="Include memories past their expiration_date.")]
ExpirationDate = Annotated[
    str | None,
    Field(pattern=rf"^\s*{DATE_PATTERN}\s*$", description="YYYY-MM-DD (UTC), today or later; hidden after it."),
]


class Message(BaseModel):
    """One turn of a conversation to remember."""

    role: SentRole = Field(description="system is skipped.")
    content: str = Field(min_length=1)
    name: str | None = Field(default=None, description="The speaker.")


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
    config: Config, open_engine: "Callable[[Config], Engine] | None" = None, *, auth: AuthSettings | None = None,
    access_log: bool = False, budget: RateBudget | None = None,
) -> TrimemServer:
    """The MCP server for ``config``; ``open_engine`` lets tests share loaded models. With
    ``auth``, HTTP requests need a token of the store (``StoreTokenVerifier``) and each tool
    call acts in its scope; ``access_log`` logs every call (``access_log.py``); ``budget`` is
    the HTTP service's rate per token, which an add charges per memory (``serving``)."""
    running = Running()
    server = TrimemServer(
        "trimem",
        title="trimem memory",
        instructions=INSTRUCTIONS,
        version=trimem_version(),
        log_level=config.server.log_level.upper(),
        lifespan=lifespan(config, open_engine, running),
        auth=auth,
        token_verifier=StoreTokenVerifier(running.engine) if auth else None,
    )
    limits, max_chars = config.limits, config.server.max_result_chars
    # Counts carry their range in the schema only: the engine checks them, so an out-of-range
    # count gets the engine's plain message (as on the command line), not pydantic's text and link.
    count_range = {"minimum": 1, "maximum": limits.max_top_k}
    TopK = Annotated[
        int,
        Field(json_schema_extra=count_range, description="How many to return."),
    ]
    Threshold = Annotated[
        float,
        Field(ge=0.0, le=1.0, description="Least similarity in meaning (0.3+: close ones). Omitted: none if none is "
              "relevant."),
    ]
    # Optional texts are ``Text = None``, not ``Text | None``: the SDK JSON-decodes string
    # arguments of every field not typed plain ``str`` (for clients that send objects as JSON
    # text), which would turn the fact '["milk", "eggs"]' into a list and refuse it.
    Text = Annotated[str, Field(min_length=1, max_length=limits.max_text_chars)]

    def tool(*, read_only: bool, destructive: bool = False, idempotent: bool = True) -> Callable[[ToolFn], ToolFn]:
        hints = ToolAnnotations(
            read_only_hint=read_only, destructive_hint=destructive, idempotent_hint=idempotent, open_world_hint=False
        )

        def register(fn: ToolFn) -> ToolFn:
            # cleandoc: clients show the description as is, indentation included.
            description = inspect.cleandoc(fn.__doc__ or "")
            served = serving(fn, config, must_name=fn.__name__ == "delete_all_memories", access_log=access_log,
                             budget=budget, per_memory=fn.__name__ == "add_memory")
            server.add_tool(served, description=description, annotations=hints, structured_output=True)
            return fn

        return register

    @tool(read_only=False)
    def add_memory(
        ctx: Context,
        text: Annotated[Text, Field(description="One self-contained fact. Send text or messages.")] = None,
        messages: Annotated[list[Message] | None, Field(min_length=1, description="Each message becomes a "
                                                        "memory.")] = None,
        user_id: UserId = None,
        agent_id: AgentId = None,
        run_id: RunId = None,
        metadata: Metadata = None,
        expiration_date: ExpirationDate = None,
    ) -> Annotated[CallToolResult, AddOutput]:
        """Remember what the user shares that is worth recalling later: a preference, plan, person or
        decision, as one short fact that reads well on its own. A repeat returns the stored one.
        """
        if (text is None) == (messages is None):
            raise ToolError("send exactly one of text (a fact as a sentence) or messages (a list of {role, content})")
        content = text if text is not None else [m.model_dump(exclude_none=True) for m in messages]
        scope = default_scope(config, user_id, agent_id, run_id)
        added = AddOutput.of(
            engine_of(ctx).add(content, **scope, metadata=metadata, expiration_date=expiration_date), max_chars
        )
        return reply(added, replies.added_text(added, scope))

    @tool(read_only=True)
    def search_memory(
        ctx: Context,
        query: Annotated[Text, Field(description="What to recall, in plain words.")],
        user_id: UserId = None,
        agent_id: AgentId = None,
        run_id: RunId = None,
        top_k: TopK = config.search.top_k,
        threshold: Threshold = None,
        filters: Filters = None,
        show_expired: ShowExpired = False,
    ) -> Annotated[CallToolResult, SearchOutput]:
        """Recall memories relevant to a question, best first. Call it before answering whenever earlier
        conversations may matter. Scores run 0 to 1: above 0.5 is a strong match, below 0.2 loose.
        """
        scope = default_scope(config, user_id, agent_id, run_id)
        hits = engine_of(ctx).search(
            query, **scope, top_k=top_k, threshold=threshold, filters=filters, show_expired=show_expired
        )
        found = SearchOutput.of(hits, max_chars)
        return reply(found, replies.search_text(found, scope))

    @tool(read_only=True)
    def explain_search(
        ctx: Context,
        query: Annotated[Text, Field(description="The search to explain.")],
        user_id: UserId = None,
        agent_id: AgentId = None,
        run_id: RunId = None,
        top_k: TopK = config.search.top_k,
        threshold: Threshold = None,
        filters: Filters = None,
        show_expired: ShowExpired = False,
    ) -> ExplainOutput:
        """search_memory with every part of every score (meaning, keywords, entities and what they are
        divided by), how the query was read, and the candidates dropped: for a memory missing or
        ranked low.
        """
        explanation = engine_of(ctx).explain(
            query, **default_scope(config, user_id, agent_id, run_id),
            top_k=top_k, threshold=threshold, filters=filters, show_expired=show_expired,
        )
        return ExplainOutput.of(explanation, max_chars, max_dropped=top_k)

    @tool(read_only=True)
    def get_memory(
        ctx: Context, memory_id: MemoryId, user_id: UserId = None, agent_id: AgentId = None, run_id: RunId = None
    ) -> Annotated[CallToolResult, MemoryOut]:
        """One memory by id, with its metadata and dates."""
        scope = default_scope(config, user_id, agent_id, run_id)
        memory = MemoryOut.of(engine_of(ctx).get(memory_id, **scope), max_chars)
        return reply(memory, replies.memory_line(memory, scope))

    @tool(read_only=True)
    def list_memories(
        ctx: Context,
        user_id: UserId = None,
        agent_id: AgentId = None,
        run_id: RunId = None,
        filters: Filters = None,
        show_expired: ShowExpired = False,
        limit: Annotated[int, Field(json_schema_extra=count_range)] = 20,
        offset: Annotated[int, Field(ge=0, description="From the last page's next_offset.")] = 0,
    ) -> Annotated[CallToolResult, MemoryPage]:
        """A page of memories, newest first, to review them or find an id (search_memory answers
        questions better)."""
        scope = default_scope(config, user_id, agent_id, run_id)
        memories = engine_of(ctx).list(**scope, filters=filters, show_expired=show_expired, limit=limit, offset=offset)
        page = MemoryPage.of(memories, limit, offset, max_chars)
        return reply(page, replies.page_text(page, scope))

    @tool(read_only=False, destructive=True)
    def update_memory(
        ctx: Context,
        memory_id: MemoryId,
        text: Annotated[Text, Field(description="The corrected fact.")] = None,
        metadata: Annotated[Metadata, Field(description="Keys to set; a key sent as null is removed.")] = None,
        replace_metadata: Annotated[bool, Field(description="Replace the metadata instead of merging.")] = False,
        expiration_date: Annotated[
            str | None,
            Field(pattern=rf"^\s*({DATE_PATTERN}|{NO_EXPIRATION})\s*$",
                  description=f"YYYY-MM-DD (UTC), or '{NO_EXPIRATION}'."),
        ] = None,
        user_id: UserId = None,
        agent_id: AgentId = None,
        run_id: RunId = None,
    ) -> Annotated[CallToolResult, MemoryOut]:
        """Correct a memory that has become wrong or outdated, rather than adding a contradicting one;
        memory_history keeps the old text."""
        scope = default_scope(config, user_id, agent_id, run_id)
        memory = MemoryOut.of(engine_of(ctx).update(
            memory_id, text=text, metadata=metadata, replace_metadata=replace_metadata,
            expiration_date=expiration_date, **scope,
        ), max_chars)
        return reply(memory, f"Updated: {replies.memory_line(memory, scope)}")

    @tool(read_only=False, destructive=True)
    def delete_memory(
        ctx: Context, memory_id: MemoryId, user_id: UserId = None, agent_id: AgentId = None, run_id: RunId = None
    ) -> Annotated[CallToolResult, DeletedOut]:
        """Forget one memory, when the user asks or it is plainly wrong."""
        scope = default_scope(config, user_id, agent_id, run_id)
        deleted = DeletedOut(deleted=MemoryOut.of(engine_of(ctx).delete(memory_id, **scope), max_chars))
        return reply(deleted, f"Deleted: {replies.memory_line(deleted.deleted, scope)}")

    @tool(read_only=False, destructive=True)
    def delete_all_memories(
        ctx: Context, user_id: UserId = None, agent_id: AgentId = None, run_id: RunId = None
    ) -> Annotated[CallToolResult, DeletedCount]:
        """Forget every memory of a named user, agent or run, only when the user explicitly asks."""
        scope = named_scope(config, user_id, agent_id, run_id)
        deleted = DeletedCount(deleted_count=engine_of(ctx).delete_all(**scope))
        return reply(deleted, f"Deleted {replies.memories(deleted.deleted_count)}.")

    @tool(read_only=True)
    def memory_history(
        ctx: Context, memory_id: MemoryId, user_id: UserId = None, agent_id: AgentId = None, run_id: RunId = None
    ) -> Annotated[CallToolResult, HistoryOutput]:
        """How a memory changed (added, updated, deleted, restored), oldest first."""
        events = HistoryOutput.of(
            engine_of(ctx).history(memory_id, **default_scope(config, user_id, agent_id, run_id)), max_chars
        )
        return reply(events, replies.history_text(events))

    return server


