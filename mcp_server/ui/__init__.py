"""``trimem ui``: a local web page to browse, search and correct memories, with each search
score drawn as the parts it is made of.

Served on 127.0.0.1 by uvicorn (which the MCP SDK already brings), on the configured
database only, beside any MCP servers using the same file. ``app.py`` holds the routes,
``guard.py`` the request checks, ``render.py`` the HTML; the page's script and style
sheet are files in this folder, so the page works offline with no build step.
"""

from __future__ import annotations

import secrets
import socket
import webbrowser
from collections.abc import Callable

from store.engine import Engine
from store.errors import InvalidArgument


def bind(port: int) -> socket.socket:
    """A listening socket on loopback (``port`` 0 picks a free one), bound before the URL is known."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise InvalidArgument(
            f"cannot listen on 127.0.0.1:{port} ({exc.strerror}); choose another --port, or 0 for a free one"
        ) from None
    return sock


def serve(engine: Engine, port: int, *, open_browser: bool, announce: Callable[[str], None]) -> None:
    """Serve the page for ``engine`` until interrupted; ``announce`` receives its address."""
    import anyio
    import uvicorn

    from .app import build_app

    sock = bind(port)
    port = sock.getsockname()[1]
    app = build_app(engine, port, secrets.token_urlsafe(32))
    engine.warm_up()  # the first search answers as fast as the rest
    engine.reanalysis.begin()  # a store of older analysis rules catches up in the background, as under a server
    url = f"http://127.0.0.1:{port}/"
    announce(url)
    if open_browser:
        webbrowser.open(url)
    # Uvicorn logs through our stderr handler (log_config=None), without access lines on stdout.
    level = engine.config.server.log_level.lower()
    settings = uvicorn.Config(
        app, log_config=None, access_log=False, log_level=level if level == "debug" else "warning"
    )
    anyio.run(uvicorn.Server(settings).serve, [sock])
