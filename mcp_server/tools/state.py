"""The server's lifetime state: one ``Engine``, opened and warmed in the background, that every
tool call reaches through its ``Context`` (the SDK's lifespan context)."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING

from mcp.server.mcpserver import Context, MCPServer

from store.config import Config
from store.errors import DatabaseUnavailable, TrimemError

if TYPE_CHECKING:
    from store.engine import Engine

log = logging.getLogger(__name__)


class State:
    """What the lifespan hands every tool call: the configuration, and the engine, opened and
    warmed in the background.

    ``initialize`` is answered while a thread opens the database and loads the models, so
    the handshake costs no more than a bare server's; a tool call waits only for what is
    still loading. Memories made by older analysis rules are then analysed again on another
    thread, while calls are served (``_begin_reanalysis``). A failure to open the database is
    that call's error, not a dead server.
    A database that cannot be reached yet (a PostgreSQL server still starting, or restarting,
    when trimem starts beside it) is tried again with backoff, from ``RETRY_FIRST_SECONDS`` up
    to ``RETRY_MOST_SECONDS`` apart, until it answers; meanwhile every call is told so at once.
    """

    RETRY_FIRST_SECONDS = 0.5
    RETRY_MOST_SECONDS = 15.0

    def __init__(self, config: Config, open_engine: Callable[[Config], Engine] | None) -> None:
        self.config = config
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
            self.config.server.user_id, engine.embedder.name, engine.embedder.backend,
            self.config.store.spacy_pipeline or "(the best installed)",
        )
        warm_up(engine)
        self._begin_reanalysis(engine)

    def _begin_reanalysis(self, engine: Engine) -> None:
        """Analyse again, in the background, the stored memories made by older analysis rules
        (``Engine.reanalysis``), once the models are warm and unless the server is stopping; its
        ``close`` stops the pass. Calls are served meanwhile, from what is stored."""
        with self._lock:  # so that close(), which takes it too, stops a pass that has begun
            if self._closing.is_set():
                return
            try:
                engine.reanalysis.begin()
            except TrimemError as exc:
                log.error("analysing stored memories again could not start (%s); the next start tries again", exc)
            except Exception:
                log.exception("analysing stored memories again could not start; the next start tries again")

    def _open(self, retry_in: float) -> Engine | None:
        """One attempt to open the engine: it, or ``None`` with ``_error`` saying why."""
        try:
            if self._open_engine is None:
                from store.engine import Engine  # numpy and apsw load here, after the handshake began

                self._open_engine = Engine
            engine = self._open_engine(self.config)
        except DatabaseUnavailable as exc:
            log.warning("%s; trying again in %g s", exc, retry_in)
            return self._failed(unreachable(exc, retry_in))
        except TrimemError as exc:
            log.error("%s", exc)
            return self._failed(exc)
        except Exception as exc:  # what no check foresaw: the log keeps the traceback, the caller a reason
            log.exception("opening %s failed", self.config.location)
            return self._failed(TrimemError(f"the database {self.config.location} could not be opened ({exc})"))
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

    @property
    def max_result_chars(self) -> int:
        """The longest text a tool result carries (``server.max_result_chars``)."""
        return self.config.server.max_result_chars

    def engine(self) -> Engine:
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


def warm_up(engine: Engine) -> None:
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

    def engine(self) -> Engine:
        if self.state is None:
            raise TrimemError("the server is not running")
        return self.state.engine()


def lifespan(
    config: Config, open_engine: Callable[[Config], Engine] | None, running: Running
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


def state_of(ctx: Context[State]) -> State:
    """The state a tool call runs in, as the SDK hands the lifespan's to every request."""
    return ctx.request_context.lifespan_context
