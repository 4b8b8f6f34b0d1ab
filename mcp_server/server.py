"""The MCP server: trimem's engine behind nine tools, over stdio or streamable HTTP.

``build_server(config)`` returns an ``MCPServer`` whose lifespan opens one ``Engine``
and loads the models in a background thread, so the ``initialize`` answer never waits
for the database, ONNX Runtime or spaCy; the first tool call waits only for what it
needs that is still loading. Each tool validates its arguments through its type hints, applies the
default scope, makes one ``Engine`` call and shapes the result (``models.py``): no SQL
and no scoring here.
"""

# No ``from __future__ import annotations``: the tools' annotations use argument types
# built from the configuration inside ``build_server``, so they must be evaluated there.

import functools
import inspect
import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field

from store.config import Config
from store.errors import TrimemError

if TYPE_CHECKING:
    from store.engine import Engine

from . import default_scope, named_scope
from .models import (
    AddOutput,
    DeletedCount,
    DeletedOut,
    ExplainOutput,
    HistoryOutput,
    MemoryOut,
    MemoryPage,
    SearchOutput,
)

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
    """

    def __init__(self, config: Config, open_engine: "Callable[[Config], Engine] | None") -> None:
        self._config = config
        self._open_engine = open_engine
        self._engine: "Engine | None" = None
        self._error: TrimemError | None = None
        self._opened = threading.Event()
        threading.Thread(target=self._start, name="trimem-start", daemon=True).start()

    def _start(self) -> None:
        try:
            if self._open_engine is None:
                from store.engine import Engine  # numpy and apsw load here, after the handshake began

                self._open_engine = Engine
            self._engine = self._open_engine(self._config)
        except TrimemError as exc:
            log.error("%s", exc)
            self._error = exc
            return
        except Exception as exc:  # what no check foresaw: the log keeps the traceback, the caller a reason
            log.exception("opening %s failed", self._config.database)
            self._error = TrimemError(f"the database {self._config.database} could not be opened ({exc})")
            return
        finally:
            self._opened.set()
        engine = self._engine
        log.info(
            "trimem serving %s for user_id=%r; models: %s on %s, spaCy %s", engine.path,
            self._config.server.user_id, engine.embedder.name, engine.embedder.backend,
            self._config.store.spacy_pipeline or "(the best installed)",
        )
        warm_up(self._engine)

    def engine(self) -> "Engine":
        """The open engine, waiting for it if start-up is still opening the database."""
        self._opened.wait()
        if self._error is not None:
            raise self._error
        assert self._engine is not None
        return self._engine

    def close(self) -> None:
        self._opened.wait()
        if self._engine is not None:
            self._engine.close()


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


def lifespan(
    config: Config, open_engine: "Callable[[Config], Engine] | None"
) -> Callable[[MCPServer[State]], AbstractAsyncContextManager[State]]:
    """Start opening the engine for the server's lifetime; close it at the end."""

    @asynccontextmanager
    async def run(_server: MCPServer[State]) -> AsyncIterator[State]:
        state = State(config, open_engine)
        try:
            yield state
        finally:
            state.close()

    return run


def engine_errors(fn: ToolFn) -> ToolFn:
    """Turn the engine's refusals into tool errors that show the engine's message.

    The SDK shows a ``ToolError``'s text to the model but hides other exceptions' text
    (logging them as crashes), and ``TrimemError`` messages are written for the model:
    they say what was wrong and what to send instead. Other exceptions stay crashes: the
    SDK logs the traceback, answers ``is_error``, and the server keeps serving.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TrimemError as exc:
            raise ToolError(str(exc)) from exc

    return wrapper  # type: ignore[return-value]


def engine_of(ctx: Context) -> "Engine":
    state: State = ctx.request_context.lifespan_context
    return state.engine()


# Argument types shared by the tools; descriptions are what the model reads.
UserId = Annotated[
    str | None,
    Field(description="Whose memories: a user id such as 'ana'. Omitted, it is the default user."),
]
AgentId = Annotated[str | None, Field(description="Narrows to one agent's memories of that user, e.g. "
                                      "'travel_planner'.")]
RunId = Annotated[str | None, Field(description="Narrows to one session or task run of that user.")]
MemoryId = Annotated[str, Field(min_length=1, description="A memory id, as returned by add_memory, search_memory "
                                "or list_memories; its first 8 characters are enough when no other id starts "
                                "with them.")]
Metadata = Annotated[
    dict[str, Any] | None,
    Field(description="Any JSON object stored with the memory, e.g. {\"category\": \"food\"}; searchable by filters."),
]
Filters = Annotated[
    dict[str, Any] | None,
    Field(description="Metadata filter, Mem0 style: {\"category\": \"work\"}, {\"priority\": {\"gte\": 3}}, "
          "{\"tags\": {\"contains\": \"x\"}}, {\"OR\": [{...}, {...}]}, {\"NOT\": {...}}. Operators: eq ne gt gte "
          "lt lte in nin contains icontains; \"*\" means the key exists. created_at and updated_at are the memory's "
          "own UTC timestamps, compared as dates or times: {\"created_at\": {\"gte\": \"2026-12-01\"}}."),
]
ShowExpired = Annotated[bool, Field(description="Also return memories whose expiration_date has passed.")]
ExpirationDate = Annotated[
    str | None,
    Field(pattern=r"^\s*\d{4}-\d{2}-\d{2}\s*$", description="YYYY-MM-DD, today or later: hidden once this day has ended (UTC), e.g. for "
          "plans."),
]


class Message(BaseModel):
    """One turn of a conversation to remember."""

    role: Literal["user", "assistant", "system"] = Field(description="System messages are skipped.")
    content: str = Field(min_length=1)
    name: str | None = Field(default=None, description="The speaker's name, stored as actor_id.")


def build_server(config: Config, open_engine: "Callable[[Config], Engine] | None" = None) -> MCPServer[State]:
    """The MCP server for ``config``; ``open_engine`` lets tests share loaded models."""
    server: MCPServer[State] = MCPServer(
        "trimem",
        title="trimem memory",
        instructions=INSTRUCTIONS,
        version=_version(),
        log_level=config.server.log_level.upper(),
        lifespan=lifespan(config, open_engine),
    )
    limits, max_chars = config.limits, config.server.max_result_chars
    # Counts carry their range in the schema only: the engine checks them, so an out-of-range
    # count gets the engine's plain message (as on the command line), not pydantic's text and link.
    count_range = {"minimum": 1, "maximum": limits.max_top_k}
    TopK = Annotated[
        int,
        Field(json_schema_extra=count_range, description=f"How many memories to return, 1 to {limits.max_top_k}."),
    ]
    Threshold = Annotated[
        float,
        Field(ge=0.0, le=1.0, description="The semantic gate: memories less similar in meaning than this are never "
              "returned, whatever their keywords. 0.1 keeps loosely related ones; 0.3 or more only close ones."),
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
            server.add_tool(engine_errors(fn), description=description, annotations=hints, structured_output=True)
            return fn

        return register

    @tool(read_only=False)
    def add_memory(
        ctx: Context,
        text: Annotated[Text, Field(description="One self-contained fact, e.g. 'Ana is allergic to "
                                          "peanuts'. Send text or messages, not both.")] = None,
        messages: Annotated[list[Message] | None, Field(min_length=1, description="A conversation: each user and "
                                                        "assistant message is stored as its own memory.")] = None,
        user_id: UserId = None,
        agent_id: AgentId = None,
        run_id: RunId = None,
        metadata: Metadata = None,
        expiration_date: ExpirationDate = None,
    ) -> AddOutput:
        """Remember a fact for later conversations.

        Call this when the user shares something worth recalling later: a preference, a
        plan, a person, a decision. Store one short fact that reads well on its own
        ("Ana's daughter Lucía starts school in September"), not a transcript. Storing the
        same text twice is harmless: event DUPLICATE returns the memory already stored.
        """
        if (text is None) == (messages is None):
            raise ToolError("send exactly one of text (a fact as a sentence) or messages (a list of {role, content})")
        content = text if text is not None else [m.model_dump(exclude_none=True) for m in messages]
        added = engine_of(ctx).add(
            content, **default_scope(config, user_id, agent_id, run_id),
            metadata=metadata, expiration_date=expiration_date,
        )
        return AddOutput.of(added, max_chars)

    @tool(read_only=True)
    def search_memory(
        ctx: Context,
        query: Annotated[Text, Field(description="What you want to recall, in plain words, e.g. 'Ana food "
                                     "allergies'.")],
        user_id: UserId = None,
        agent_id: AgentId = None,
        run_id: RunId = None,
        top_k: TopK = config.search.top_k,
        threshold: Threshold = config.search.threshold,
        filters: Filters = None,
        show_expired: ShowExpired = False,
    ) -> SearchOutput:
        """Recall stored memories relevant to a question, best first.

        Call this before answering whenever earlier conversations might matter: the
        user's preferences, people, projects, plans. Ranking fuses meaning (embeddings),
        keywords (BM25) and named things (people, places, products) into a score from 0
        to 1; above about 0.5 is a strong match, below 0.2 is loosely related. An empty
        result means nothing relevant is stored. explain_search shows why a memory ranked
        where it did.
        """
        hits = engine_of(ctx).search(
            query, **default_scope(config, user_id, agent_id, run_id),
            top_k=top_k, threshold=threshold, filters=filters, show_expired=show_expired,
        )
        return SearchOutput.of(hits, max_chars)

    @tool(read_only=True)
    def explain_search(
        ctx: Context,
        query: Annotated[Text, Field(description="The search to explain.")],
        user_id: UserId = None,
        agent_id: AgentId = None,
        run_id: RunId = None,
        top_k: TopK = config.search.top_k,
        threshold: Threshold = config.search.threshold,
        filters: Filters = None,
        show_expired: ShowExpired = False,
    ) -> ExplainOutput:
        """Run search_memory and show every part of every score, to debug a ranking.

        Use it when a memory you expected is missing or ranked low. Each result carries
        semantic_score (meaning, 0 to 1), bm25_score (keywords, squashed from bm25_raw by a
        sigmoid whose midpoint and steepness depend on the query's term count),
        entity_boost (up to 0.5, from a matched entity), raw_score, and the
        max_possible_score it is divided by (1, +1 if any keyword matched, +0.5 if any
        entity did). The analysis shows the lemmatized terms and entities of the query;
        dropped lists candidates below the semantic threshold, expired, or kept out by
        the filters.
        """
        explanation = engine_of(ctx).explain(
            query, **default_scope(config, user_id, agent_id, run_id),
            top_k=top_k, threshold=threshold, filters=filters, show_expired=show_expired,
        )
        return ExplainOutput.of(explanation, max_chars, max_dropped=top_k)

    @tool(read_only=True)
    def get_memory(
        ctx: Context, memory_id: MemoryId, user_id: UserId = None, agent_id: AgentId = None, run_id: RunId = None
    ) -> MemoryOut:
        """Fetch one memory by its id (from search_memory or list_memories), with its metadata and dates."""
        memory = engine_of(ctx).get(memory_id, **default_scope(config, user_id, agent_id, run_id))
        return MemoryOut.of(memory, max_chars)

    @tool(read_only=True)
    def list_memories(
        ctx: Context,
        user_id: UserId = None,
        agent_id: AgentId = None,
        run_id: RunId = None,
        filters: Filters = None,
        show_expired: ShowExpired = False,
        limit: Annotated[int, Field(json_schema_extra=count_range, description=f"Page size, 1 to "
                                    f"{limits.max_top_k}.")] = 20,
        offset: Annotated[int, Field(ge=0, description="Memories to skip; use next_offset from the last page.")] = 0,
    ) -> MemoryPage:
        """List stored memories, newest first, one page at a time.

        Use it to review everything remembered about someone or to find an id; to answer
        a question, search_memory is better.
        """
        memories = engine_of(ctx).list(
            **default_scope(config, user_id, agent_id, run_id),
            filters=filters, show_expired=show_expired, limit=limit, offset=offset,
        )
        return MemoryPage.of(memories, limit, offset, max_chars)

    @tool(read_only=False, destructive=True)
    def update_memory(
        ctx: Context,
        memory_id: MemoryId,
        text: Annotated[Text, Field(description="The corrected fact, replacing the old text.")] = None,
        metadata: Annotated[Metadata, Field(description="Keys to set in the stored metadata (a key sent as null is "
                                            "removed); with replace_metadata, the whole new metadata object.")] = None,
        replace_metadata: Annotated[bool, Field(description="Replace the whole metadata object instead of merging "
                                                "into it.")] = False,
        expiration_date: Annotated[
            str | None,
            Field(pattern=r"^\s*(\d{4}-\d{2}-\d{2}|never)\s*$", description="A new YYYY-MM-DD expiration date, today "
                  "or later, or 'never' to keep the memory until it is deleted."),
        ] = None,
        user_id: UserId = None,
        agent_id: AgentId = None,
        run_id: RunId = None,
    ) -> MemoryOut:
        """Correct a memory that has become wrong or outdated ("Ana moved to Lisbon").

        Prefer this to adding a contradicting memory. The old text stays in memory_history.
        """
        memory = engine_of(ctx).update(
            memory_id, text=text, metadata=metadata, replace_metadata=replace_metadata,
            expiration_date=expiration_date, **default_scope(config, user_id, agent_id, run_id),
        )
        return MemoryOut.of(memory, max_chars)

    @tool(read_only=False, destructive=True)
    def delete_memory(
        ctx: Context, memory_id: MemoryId, user_id: UserId = None, agent_id: AgentId = None, run_id: RunId = None
    ) -> DeletedOut:
        """Forget one memory, e.g. when the user asks you to or it is plainly wrong."""
        memory = engine_of(ctx).delete(memory_id, **default_scope(config, user_id, agent_id, run_id))
        return DeletedOut(deleted=MemoryOut.of(memory, max_chars))

    @tool(read_only=False, destructive=True)
    def delete_all_memories(
        ctx: Context, user_id: UserId = None, agent_id: AgentId = None, run_id: RunId = None
    ) -> DeletedCount:
        """Forget every memory of one user, agent or run. Only when the user explicitly asks.

        The scope must be named (at least one id); agent_id or run_id alone mean the default
        user's agent or run, as in every other tool.
        """
        scope = named_scope(config, user_id, agent_id, run_id)
        return DeletedCount(deleted_count=engine_of(ctx).delete_all(**scope))

    @tool(read_only=True)
    def memory_history(
        ctx: Context, memory_id: MemoryId, user_id: UserId = None, agent_id: AgentId = None, run_id: RunId = None
    ) -> HistoryOutput:
        """Show how a memory changed (added, updated, deleted, restored), oldest first; works after deletion too."""
        events = engine_of(ctx).history(memory_id, **default_scope(config, user_id, agent_id, run_id))
        return HistoryOutput.of(events, max_chars)

    return server


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trimem")
    except PackageNotFoundError:
        return "0+unknown"
