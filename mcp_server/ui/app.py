"""``trimem ui``'s routes: the page, the fragments it swaps in, the export download, and the two writes.

Each route parses the query string or JSON body, makes one ``Engine`` call and renders
its result (``render.py``). Handlers are plain functions run in worker threads, and the
engine serves concurrent reads from its pool of read connections.
Nothing in a request names a database file: the app holds the one engine it was built
with. An engine error is answered with its message (400, or 404 for ``NotFound``); any
other failure is logged to stderr and answered with a short line, never a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from store.engine import Engine
from store.errors import InvalidArgument, NotFound, TrimemError, shown
from store.records import SCOPE_KEYS
from store.validation import json_object

from .. import default_scope
from . import render
from .guard import SAFE_METHODS, Guard

logger = logging.getLogger(__name__)

PAGE_SIZE = 50
ASSETS = {"ui.js": "text/javascript", "ui.css": "text/css"}


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


def number(request: Request, name: str, kind: type[int] | type[float], default: float | None = None) -> Any:
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
                raw = (await request.body()).decode("utf-8", "replace")
                request.state.body = json_box(raw, "the request") or {}
            return await run_in_threadpool(handler, request, request.app.state.engine)
        except NotFound as exc:
            return PlainTextResponse(str(exc), status_code=404)
        except TrimemError as exc:
            return PlainTextResponse(str(exc), status_code=400)
        except Exception:
            logger.exception("%s %s failed", request.method, request.url.path)
            return PlainTextResponse("the server failed on this request; its log says why", status_code=500)

    return route


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
            database=str(engine.path), token=request.app.state.token, scopes=engine.users(), scope=scope,
            threshold=engine.config.search.threshold, body=body,
        )
    )


def memories(request: Request, engine: Engine) -> Response:
    return HTMLResponse(listing(request, engine))


def search(request: Request, engine: Engine) -> Response:
    params = request.query_params
    explanation = engine.explain(
        params.get("q", ""), **scope_of(request, engine), threshold=number(request, "threshold", float),
        filters=json_box(params.get("filters"), "the filter"),
        use_bm25=params.get("bm25", "1") == "1", use_entities=params.get("entities", "1") == "1",
    )
    return HTMLResponse(render.search_results(explanation))


def memory(request: Request, engine: Engine) -> Response:
    memory_id, scope = request.path_params["memory_id"], scope_of(request, engine)
    found = engine.get(memory_id, **scope)
    return HTMLResponse(
        render.detail(found, engine.entities(found.id, **scope), engine.history(found.id, **scope))
    )


def entity(request: Request, engine: Engine) -> Response:
    name = request.query_params.get("name", "")
    linked = engine.list_by_entity(name, **scope_of(request, engine), limit=PAGE_SIZE)
    return HTMLResponse(render.memory_list(linked, offset=0, page_size=PAGE_SIZE, heading=f"Linked to “{name}”"))


def update(request: Request, engine: Engine) -> Response:
    body = request.state.body
    metadata = json_box(body.get("metadata"), "the metadata")
    engine.update(
        request.path_params["memory_id"], **scope_of(request, engine), text=body.get("text"),
        metadata={} if metadata is None else metadata, replace_metadata=True,
    )
    return PlainTextResponse("saved")


def delete(request: Request, engine: Engine) -> Response:
    engine.delete(request.path_params["memory_id"], **scope_of(request, engine))
    return PlainTextResponse("deleted")


def export(request: Request, engine: Engine) -> Response:
    """The scope on the pickers (and the filter box) as a JSON Lines export, streamed from one
    snapshot: the same file ``trimem export`` writes, so ``trimem import`` reads it back."""
    scope = scope_of(request, engine)
    lines = engine.export(**scope, filters=json_box(request.query_params.get("filters"), "the filter"))
    name = "-".join(["trimem", *(scope[key] for key in SCOPE_KEYS if scope.get(key))])
    disposition = f"attachment; filename*=UTF-8''{quote(name)}.jsonl"
    return StreamingResponse(lines, media_type="application/x-ndjson", headers={"Content-Disposition": disposition})


def static(request: Request) -> Response:
    name = request.path_params["name"]
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
            Route("/memory/{memory_id}", answered(memory)),
            Route("/memory/{memory_id}", answered(update), methods=["POST"]),
            Route("/memory/{memory_id}", answered(delete), methods=["DELETE"]),
            Route("/static/{name}", static),
        ],
    )
    app.state.engine = engine
    app.state.token = token
    return Guard(app, port, token)
