"""``trimem serve --transport http``: the streamable-HTTP app, with or without tokens.

Without tokens it serves loopback only, as before. With ``--auth tokens`` the SDK's bearer
backend and require-auth middleware guard ``/mcp`` (401 with ``WWW-Authenticate`` naming the
protected-resource metadata the SDK serves), and the limits of ``[service]`` apply: the
SDK's body cap, failed token checks per address and in all, a rate and a session cap per
token (``limits.py``). Host and Origin are checked against loopback and
``service.public_hosts`` either way. A store that cannot be reached is 503 with its reason
(``Unavailable``), never a crash.
"""

from __future__ import annotations

import ipaddress
import logging
import urllib.parse
from typing import TYPE_CHECKING

from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_server.service.calls import ServiceRules
from mcp_server.service.limits import FailedAuthLimit, RateBudget, RateLimit, SessionCap, Throttled, refusal
from mcp_server.tools.server import build_server
from store.config import Config, ServiceConfig
from store.errors import DatabaseUnavailable, TrimemError

if TYPE_CHECKING:
    from collections.abc import Callable

    from store.engine import Engine

log = logging.getLogger(__name__)
MCP_PATH = "/mcp"

LOOPBACK_HOSTS = ("127.0.0.1:*", "localhost:*", "[::1]:*")
LOOPBACK_ORIGINS = ("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*")


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the server reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name other than localhost may resolve anywhere
        return False


def transport_security(service: ServiceConfig) -> TransportSecuritySettings:
    """The Host and Origin checks (against DNS rebinding): loopback, and the public host names."""
    hosts = [name for host in service.hosts for name in (host, f"{host}:*")]
    origins = [f"{scheme}://{host}{port}" for host in service.hosts for scheme in ("https", "http") for port in ("", ":*")]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=[*LOOPBACK_HOSTS, *hosts],
                                     allowed_origins=[*LOOPBACK_ORIGINS, *origins])


def auth_settings(service: ServiceConfig, host: str, port: int) -> AuthSettings:
    """What the SDK advertises as protected-resource metadata: this endpoint, and the server
    tokens come from (an OAuth 2.1 server in front, or this endpoint's origin for trimem's own)."""
    shown_host = f"[{host}]" if ":" in host else host
    resource = service.resource_url or f"http://{shown_host}:{port}/mcp"
    parts = urllib.parse.urlsplit(resource)
    issuer = service.issuer_url or f"{parts.scheme}://{parts.netloc}"
    # The verifier checks a token against this store itself, so no audience check is asked of the SDK.
    return AuthSettings(issuer_url=issuer, resource_server_url=resource, validate_token_resource=False)


class Unavailable:
    """Answer 503 with the store's one-line reason (and ``Retry-After`` when it is passing) when a
    request meets a store that cannot be opened or reached.

    The token check reads the store before any tool runs (``auth.StoreTokenVerifier``), in the
    SDK's authentication middleware, so its ``DatabaseUnavailable`` would otherwise reach
    Starlette as a crash: 500, and a traceback per request in the log. Tool calls already turn
    the same errors into tool errors (``server.serving``). The log gets one line a minute.

    A client that leaves before its body has all arrived (the SDK raises ``ClientDisconnect``
    reading it) is not a crash either: there is nobody to answer, and nothing to log.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.warning = Throttled()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def watching(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watching)
        except ClientDisconnect:
            return
        except TrimemError as exc:
            if scope["type"] != "http":
                raise
            self.warning.warn("answering 503: %s", exc)
            if not started:  # else too late to answer: the client sees the response cut short
                retry = exc.retry_after_seconds if isinstance(exc, DatabaseUnavailable) else None
                await refusal(503, str(exc), retry)(scope, receive, send)


def http_app(
    config: Config, host: str, port: int, *, tokens: bool, open_engine: Callable[[Config], Engine] | None = None
) -> Starlette:
    """The ASGI app ``trimem serve --transport http`` runs."""
    service = config.service
    auth = auth_settings(service, host, port) if tokens else None
    budget = RateBudget(service.rate_per_second, service.rate_burst)
    server = build_server(config, open_engine, rules=ServiceRules(config, auth, budget))
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH, host=host, transport_security=transport_security(service),
        max_request_body_size=service.max_body_bytes, session_idle_timeout=service.session_idle_seconds,
    )
    # The SDK's authentication is the first of user_middleware. Before it: the store's outage as
    # 503 (outermost, inside only Starlette's error middleware) and failed checks counted before
    # they cost a lookup; after it, counting by token: the rate, then sessions and calls.
    outer = [Middleware(Unavailable)]
    if tokens:
        outer.append(Middleware(
            FailedAuthLimit, rate=service.failed_auth_per_second, burst=service.failed_auth_burst,
            total_rate=service.failed_auth_total_per_second, total_burst=service.failed_auth_total_burst,
        ))
    app.user_middleware[:0] = outer
    app.user_middleware.extend([
        Middleware(RateLimit, budget=budget),
        Middleware(SessionCap, limit=service.max_sessions_per_token, idle_seconds=service.session_idle_seconds,
                   path=MCP_PATH),
    ])
    return app
