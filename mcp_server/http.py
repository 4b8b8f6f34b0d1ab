"""``trimem serve --transport http``: the streamable-HTTP app, with or without tokens.

Without tokens it serves loopback only, as before. With ``--auth tokens`` the SDK's bearer
backend and require-auth middleware guard ``/mcp`` (401 with ``WWW-Authenticate`` naming the
protected-resource metadata the SDK serves), and the limits of ``[service]`` apply: the
SDK's body cap, a rate and a session cap per token (``limits.py``). Host and Origin are
checked against loopback and ``service.public_hosts`` either way.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from typing import TYPE_CHECKING

from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.middleware import Middleware

from store.config import Config, ServiceConfig

from .limits import RateLimit, SessionCap
from .server import build_server

if TYPE_CHECKING:
    from collections.abc import Callable

    from store.engine import Engine

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


def http_app(
    config: Config, host: str, port: int, *, tokens: bool, open_engine: Callable[[Config], Engine] | None = None
) -> Starlette:
    """The ASGI app ``trimem serve --transport http`` runs."""
    service = config.service
    auth = auth_settings(service, host, port) if tokens else None
    server = build_server(config, open_engine, auth=auth, access_log=True)
    app = server.streamable_http_app(
        host=host, transport_security=transport_security(service), max_request_body_size=service.max_body_bytes,
        session_idle_timeout=service.session_idle_seconds,
    )
    # Innermost, so after the SDK's authentication: they count by token.
    app.user_middleware.extend([
        Middleware(RateLimit, rate=service.rate_per_second, burst=service.rate_burst),
        Middleware(SessionCap, limit=service.max_sessions_per_token, idle_seconds=service.session_idle_seconds),
    ])
    return app
