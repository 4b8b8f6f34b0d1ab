"""The page's request checks: loopback Host, same-origin writes, and a per-process token.

The rule mirrors the MCP SDK's DNS-rebinding protection for the HTTP transport (the
Host header must name this server on loopback, so a hostile name resolving to 127.0.0.1
cannot reach it) and goes further for writes, since a browser tab on another site can
send a POST: a write must come from the page's own origin (``Origin``, or ``Referer``
when a browser leaves ``Origin`` out) and carry the token the page was served with.
"""

from __future__ import annotations

import hmac
import logging
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger(__name__)

TOKEN_HEADER = "x-trimem-token"
SAFE_METHODS = frozenset({"GET", "HEAD"})
LOOPBACK_NAMES = ("127.0.0.1", "localhost")
SECURITY_HEADERS = {
    # Only this server's own files run or style the page; nothing may frame it.
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}
ENCODED_HEADERS = [(name.encode(), value.encode()) for name, value in SECURITY_HEADERS.items()]


class Guard:
    """ASGI middleware: refuse what did not come from the page served on ``port``."""

    def __init__(self, app: ASGIApp, port: int, token: str) -> None:
        self.app = app
        self.hosts = {f"{name}:{port}" for name in LOOPBACK_NAMES}
        self.origins = {f"http://{host}" for host in self.hosts}
        self.token = token

    def refusal(self, method: str, headers: Headers) -> tuple[int, str] | None:
        """Why the request is refused (status, message), or None to let it through."""
        if headers.get("host") not in self.hosts:
            return 421, "this page answers only at its own loopback address"
        if method in SAFE_METHODS:
            return None
        origin = headers.get("origin")
        if origin is None and (referer := headers.get("referer")):
            parts = urlsplit(referer)
            origin = f"{parts.scheme}://{parts.netloc}"
        if origin not in self.origins:
            return 403, "changes are accepted only from the trimem page itself"
        if not hmac.compare_digest(headers.get(TOKEN_HEADER, ""), self.token):
            return 403, "the page's token is missing or stale: reload the page"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = self.refusal(scope["method"], Headers(scope=scope))
        if refused is not None:
            status, message = refused
            logger.warning("refused %s %s: %s", scope["method"], scope["path"], message)
            await PlainTextResponse(message, status_code=status, headers=SECURITY_HEADERS)(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *ENCODED_HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)
