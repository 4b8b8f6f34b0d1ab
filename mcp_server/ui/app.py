"""``trimem ui``'s routes: the page, the fragments it swaps in, the export download, and the two writes.

Each route parses the query string or JSON body, makes one ``Engine`` call and renders
its result (``render.py``). Handlers are plain functions run in worker threads, and the
engine serves concurrent reads from its pool of read connections.
Nothing in a request names a database file: the app holds the one engine it was built
with. A memory is named by ``?id=`` rather than in the path, so every id an import accepts
(``a/b``, ``..``) reaches it unchanged. An engine error is answered with its message (400,
or 404 for ``NotFound``); any other failure is logged to stderr in one line (the traceback
only at ``--log-level debug``) and answered with a short line, never a traceback.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Awaitable, Callable, Iterable
from typing import IO, Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from mcp_server.call_scope import default_scope
from store.engine import Engine
from store.errors import InvalidArgument, NotFound, TrimemError, shown
from store.scope import SCOPE_KEYS
from store.validation import json_object

from . import render
from .guard import SAFE_METHODS, Guard

logger = logging.getLogger(__name__)

PAGE_SIZE = 50
ASSETS = {"ui.js": "text/javascript", "ui.css": "text/css", "icon.svg": "image/svg+xml"}
FORM_FIELDS = ("text", "metadata")
"""What the edit form sends, each as the text of its box; a field left out stays as stored."""
SPOOL_BYTES = 8 * 2**20
"""An export up to this size is held in memory before it is sent; a larger one on disk."""


def scope_of(request: Request, engine: Engine) -> dict[str, str]:
    """The scope the page's pickers name (blank pickers are unset): the configured user by default."""
    chosen = {key: request.query_params.get(key) or None for key in SCOPE_KEYS}
    return default_scope(engine.config, **chosen)


def json_box(text: str | None, what: str) -> dict[str, Any] | None:
    """A JSON object typed into a box, or None when the box is blank."""
    if text is None or not text.strip():
        return None
    try:
        return json_object(text, '{"category": "work"}')
    except InvalidArgument as exc:
        raise InvalidArgument(f"{what}: {exc}") from None


def required(request: Request, name: str, ask: str) -> str:
    """A query-string value that must hold something; ``ask`` is the message when it is blank."""
    value = request.query_params.get(name, "")
    if not value.strip():
        raise InvalidArgument(ask)
    return value


def switch(request: Request, name: str) -> bool:
    """A signal's on/off switch from the query string: ``1`` (the default) or ``0``."""
    raw = request.query_params.get(name, "1")
    if raw not in ("0", "1"):
        raise InvalidArgument(f"{name} must be 1 (on) or 0 (off), got {shown(raw)}")
    return raw == "1"


def memory_id(request: Request) -> str:
    return required(request, "id", "which memory? give its id as ?id=…")


def form_fields(body: dict[str, Any]) -> dict[str, str]:
    """The edit form's fields that were sent, each checked to be the text of its box."""
    for name, value in body.items():
        if name not in FORM_FIELDS:
            raise InvalidArgument(f"unknown field {shown(name)}; the form sends {' and '.join(FORM_FIELDS)}")
        if not isinstance(value, str):
            raise InvalidArgument(f"{name} must be the text of its box (a string), got {type(value).__name__}")
    if not body:
        raise InvalidArgument(f"nothing to save: send {' and/or '.join(FORM_FIELDS)}")
    return body


def number(request: Request, name: str, kind: type[int | float], default: float | None = None) -> Any:
    """A number from the query string (``kind`` int or float), or ``default`` when absent."""
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    try:
        return kind(raw)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise InvalidArgument(f"{name} must be {what}, got {shown(raw)}") from None


def answered(handler: Callable[[Request, Engine], Response]) -> Callable[[Request], Awaitable[Response]]:
    """A route that runs ``handler`` with the app's engine in a worker thread (a write's JSON
    body read first, into ``request.state.body``), turning engine errors into their message."""

    async def route(request: Request) -> Response:
        try:
            if request.method not in SAFE_METHODS:
                request.state.body = json_box(await body_text(request), "the request") or {}
            return await run_in_threadpool(handler, request, request.app.state.engine)
        except NotFound as exc:
            return PlainTextResponse(str(exc), status_code=404)
        except TrimemError as exc:
            return PlainTextResponse(str(exc), status_code=400)
        except Exception as exc:  # what no check foresaw: the log says what, the page a short line
            logger.error("%s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__, exc,
                         exc_info=logger.isEnabledFor(logging.DEBUG))
            return PlainTextResponse(
                f"the server failed on this request ({type(exc).__name__}); its log says why", status_code=500
            )

    return route


async def body_text(request: Request) -> str:
    try:
        return (await request.body()).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgument("the request is not UTF-8 text; send a JSON object") from None


def listing(request: Request, engine: Engine) -> str:
    offset = number(request, "offset", int, 0)
    memories = engine.list(
        **scope_of(request, engine), filters=json_box(request.query_params.get("filters"), "the filter"),
        limit=PAGE_SIZE + 1, offset=offset,  # one more says whether an older page exists
    )
    return render.memory_list(memories, offset=offset, page_size=PAGE_SIZE, heading="Newest first")


def index(request: Request, engine: Engine) -> Response:
    scope = scope_of(request, engine)
    try:
        body = listing(request, engine)
    except TrimemError as exc:
        body = render.error(str(exc))
    return HTMLResponse(
        render.page(
            database=engine.location, token=request.app.state.token, scopes=engine.users(), scope=scope,
            threshold=engine.config.search.threshold, body=body,
        )
    )


def memories(request: Request, engine: Engine) -> Response:
    return HTMLResponse(listing(request, engine))


def search(request: Request, engine: Engine) -> Response:
    explanation = engine.explain(
        required(request, "q", "type something to search for"), **scope_of(request, engine),
        threshold=number(request, "threshold", float),
        filters=json_box(request.query_params.get("filters"), "the filter"),
        use_bm25=switch(request, "bm25"), use_entities=switch(request, "entities"),
    )
    return HTMLResponse(render.search_results(explanation))


def memory(request: Request, engine: Engine) -> Response:
    scope = scope_of(request, engine)
    found = engine.get(memory_id(request), **scope)
    return HTMLResponse(
        render.detail(found, engine.entities(found.id, **scope), engine.history(found.id, **scope))
    )


def entity(request: Request, engine: Engine) -> Response:
    name = required(request, "name", "which entity? give its name as ?name=…")
    linked = engine.list_by_entity(name, **scope_of(request, engine), limit=PAGE_SIZE)
    return HTMLResponse(render.entity_list(linked, name, page_size=PAGE_SIZE))


def update(request: Request, engine: Engine) -> Response:
    """Save the form: each field sent replaces what is stored (a blank metadata box clears it),
    and a field left out leaves it as it is."""
    fields = form_fields(request.state.body)
    metadata = None if "metadata" not in fields else (json_box(fields["metadata"], "the metadata") or {})
    engine.update(
        memory_id(request), **scope_of(request, engine), text=fields.get("text"), metadata=metadata,
        replace_metadata=True,
    )
    return PlainTextResponse("saved")


def delete(request: Request, engine: Engine) -> Response:
    engine.delete(memory_id(request), **scope_of(request, engine))
    return PlainTextResponse("deleted")


def export(request: Request, engine: Engine) -> Response:
    """The scope on the pickers (and the filter box) as a JSON Lines export from one snapshot:
    the same file ``trimem export`` writes, so ``trimem import`` reads it back. The file is
    written whole before the download starts, so a failure is an error, never a cut file."""
    scope = scope_of(request, engine)
    spool = spooled(engine.export(**scope, filters=json_box(request.query_params.get("filters"), "the filter")))
    name = "-".join(["trimem", *(scope[key] for key in SCOPE_KEYS if scope.get(key))])
    disposition = f"attachment; filename*=UTF-8''{quote(name)}.jsonl"
    return StreamingResponse(
        iter(lambda: spool.read(2**16), b""), media_type="application/x-ndjson",
        headers={"Content-Disposition": disposition}, background=BackgroundTask(spool.close),
    )


def spooled(lines: Iterable[str]) -> IO[bytes]:
    """``lines`` written whole into a temporary file (in memory up to ``SPOOL_BYTES``), rewound."""
    spool = tempfile.SpooledTemporaryFile(SPOOL_BYTES)  # noqa: SIM115 - returned open; the response closes it
    try:
        spool.writelines(line.encode("utf-8") for line in lines)
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    return spool


def static(request: Request, engine: Engine) -> Response:
    """The page's script, style sheet and icon; the icon also where browsers look for one."""
    name = request.path_params.get("name", "icon.svg")
    if name not in ASSETS:
        return PlainTextResponse("not found", status_code=404)
    return Response(render.asset(name), media_type=ASSETS[name])


def build_app(engine: Engine, port: int, token: str) -> ASGIApp:
    """The page's application for ``engine``, answering only at 127.0.0.1:``port``/localhost:``port``."""

    app = Starlette(
        routes=[
            Route("/", answered(index)),
            Route("/memories", answered(memories)),
            Route("/search", answered(search)),
            Route("/entity", answered(entity)),
            Route("/export", answered(export)),
            Route("/memory", answered(memory)),
            Route("/memory", answered(update), methods=["POST"]),
            Route("/memory", answered(delete), methods=["DELETE"]),
            Route("/static/{name}", answered(static)),
            Route("/favicon.ico", answered(static)),
        ],
    )
    app.state.engine = engine
    app.state.token = token
    return Guard(app, port, token)
