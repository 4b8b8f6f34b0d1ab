"""Who is calling over authenticated HTTP, and the scope each tool call may act on.

The MCP SDK does the HTTP side: its bearer backend hands every request's token to
``StoreTokenVerifier`` and its require-auth middleware answers 401 with
``WWW-Authenticate`` when the verifier knows no such token. This module decides what a
known token may do: ``token_scope`` is applied to every tool call (``calls.py``), so each
call acts within the token's scope, whatever tool it is.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken

from mcp_server.call_scope import require_named
from store.errors import InvalidArgument, shown
from store.scope import SCOPE_KEYS
from store.tokens import TokenInfo, token_hash

if TYPE_CHECKING:
    from store.engine import Engine


class StoreTokenVerifier:
    """The SDK's ``TokenVerifier`` over the store's tokens (``trimem token create``).

    Each request reads the store (in a worker thread), so a revoked token is refused by every
    server process from its next request. The token's name is the client id, and the hash of
    its secret the subject: the SDK binds a session to both, so no other token can use it.
    """

    def __init__(self, engine: Callable[[], Engine]) -> None:
        self._engine = engine

    async def verify_token(self, token: str) -> AccessToken | None:
        info = await anyio.to_thread.run_sync(lambda: self._engine().tokens.verify(token))
        if info is None:
            return None
        return AccessToken(
            token=token, client_id=info.name, scopes=[], subject=token_hash(token), expires_at=_end_of(info.expires_on),
            claims={"trimem_token": _claims(info)},
        )


def _end_of(day: str | None) -> int | None:
    """The first second after the UTC day ``day`` (the SDK refuses a token from then on)."""
    if day is None:
        return None
    start = dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC)
    return int((start + dt.timedelta(days=1)).timestamp())


def _claims(info: TokenInfo) -> dict[str, Any]:
    """What the rest of the request needs of the token: its name and scope for the tool calls, and
    the mark ``trimem token clear-sessions`` leaves for the session cap (``limits.SessionCap``)."""
    return {"name": info.name, "admin": info.admin, "sessions_cleared_at": info.sessions_cleared_at,
            **{key: getattr(info, key) for key in SCOPE_KEYS}}


def caller() -> dict[str, Any] | None:
    """The calling token's name, admin flag and scope ids; ``None`` without authentication
    (stdio, or HTTP on loopback without ``--auth tokens``)."""
    token = get_access_token()
    return None if token is None or token.claims is None else token.claims.get("trimem_token")


def token_scope(arguments: dict[str, Any], *, must_name: bool = False) -> dict[str, Any]:
    """``arguments`` with the scope ids the calling token allows: an id the call omits is the
    token's, an id the token leaves open (an agent or run of a user token) may be narrowed to,
    and an id that differs from the token's is refused, never rewritten. Without a token, or
    with an admin one, the arguments are the call's own. ``must_name``: the call forgets a
    whole scope, so it must name one itself (an omitted id never means "everything")."""
    if must_name:
        require_named(*(arguments.get(key) for key in SCOPE_KEYS))
    token = caller()
    if token is None or token["admin"]:
        return arguments
    scoped = dict(arguments)
    for key in SCOPE_KEYS:
        sent, allowed = arguments.get(key), token[key]
        if allowed is not None and sent is not None and sent != allowed:
            raise InvalidArgument(
                f"this token acts for {key}={allowed!r} only, not {shown(sent)}: omit {key}, or use a token for that "
                f"{key.removesuffix('_id')}"
            )
        scoped[key] = sent if sent is not None else allowed
    return scoped
