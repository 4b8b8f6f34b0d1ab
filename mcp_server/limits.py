"""Limits per token on the HTTP service: a rate (a token bucket) and a number of open sessions.

Both are ASGI middlewares that run after the SDK's bearer backend has authenticated the
request, and key on the token (its subject, the hash of its secret). A request without a
token passes through: the SDK's require-auth middleware refuses it, or the server runs
without tokens on loopback. Each server process keeps its own counts: behind a balancer
over N processes a token may reach N times the rate (docs/service.md).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SESSION_HEADER = b"mcp-session-id"


def token_of(scope: Scope) -> AuthenticatedUser | None:
    """The authenticated token of an HTTP request, if any."""
    user = scope.get("user") if scope["type"] == "http" else None
    return user if isinstance(user, AuthenticatedUser) else None


def too_many(message: str, retry_after: float) -> PlainTextResponse:
    """429 with ``Retry-After`` in whole seconds (at least 1)."""
    return PlainTextResponse(message, status_code=429, headers={"Retry-After": str(max(1, math.ceil(retry_after)))})


@dataclass
class TokenBucket:
    """``rate`` requests per second on average, up to ``burst`` at once."""

    rate: float
    burst: int
    level: float = field(init=False)
    at: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.level = float(self.burst)

    def take(self, now: float) -> float:
        """Spend one request: 0 when it may go, else the seconds until one may."""
        self.level = min(self.burst, self.level + (now - self.at) * self.rate)
        self.at = now
        if self.level >= 1:
            self.level -= 1
            return 0.0
        return (1 - self.level) / self.rate


class RateLimit:
    """Refuse a token's requests beyond its bucket with 429 and ``Retry-After``."""

    def __init__(self, app: ASGIApp, rate: float, burst: int) -> None:
        self.app, self.rate, self.burst = app, rate, burst
        self.buckets: dict[str, TokenBucket] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        user = token_of(scope)
        if user is not None:
            bucket = self.buckets.setdefault(user.access_token.subject or user.username, TokenBucket(self.rate,
                                                                                                    self.burst))
            wait = bucket.take(time.monotonic())
            if wait:
                response = too_many(f"rate limit: {self.rate:g} calls per second per token (service.rate_per_second, "
                                    f"rate_burst {self.burst}); retry after the Retry-After seconds", wait)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class SessionCap:
    """Refuse a token a new session while it holds ``limit`` (429).

    A session of the 2025 protocol counts from the response that gives its id until the
    client ends it (DELETE), the server no longer knows it (404), or it has been idle for
    ``idle_seconds`` (when the SDK closes it). The 2026 protocol has no sessions: each of its
    requests counts as one while it runs, so ``limit`` also bounds a token's calls in flight.
    """

    def __init__(self, app: ASGIApp, limit: int, idle_seconds: float) -> None:
        self.app, self.limit, self.idle_seconds = app, limit, idle_seconds
        self.sessions: dict[str, dict[str, float]] = {}
        """Per token, each open session's id and when it was last used (monotonic seconds)."""
        self.running: dict[str, int] = {}
        """Per token, its requests in flight outside a session."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        user = token_of(scope)
        if user is None:
            await self.app(scope, receive, send)
            return
        now = time.monotonic()
        key = user.access_token.subject or user.username
        held = self.sessions.setdefault(key, {})
        for stale in [sid for sid, seen in held.items() if now - seen > self.idle_seconds]:
            del held[stale]
        session = next((value.decode("latin-1") for name, value in scope["headers"] if name == SESSION_HEADER), "")
        if session:
            if scope["method"] == "DELETE":
                held.pop(session, None)
            elif session in held:
                held[session] = now
            await self.app(scope, receive, self._noting(send, held, session))
            return
        if len(held) + self.running.get(key, 0) >= self.limit:
            response = too_many(f"this token has {self.limit} sessions open, the most allowed "
                                "(service.max_sessions_per_token); close one", 1)
            await response(scope, receive, send)
            return
        self.running[key] = self.running.get(key, 0) + 1
        try:
            await self.app(scope, receive, self._noting(send, held, session))
        finally:
            self.running[key] -= 1

    @staticmethod
    def _noting(send: Send, held: dict[str, float], session: str) -> Send:
        """``send``, recording a session the response opens or the server no longer knows."""

        async def noting(message: Message) -> None:
            if message["type"] == "http.response.start":
                opened = next((value for name, value in message.get("headers", []) if name.lower() == SESSION_HEADER),
                              None)
                if message["status"] < 300 and opened and not session:
                    held[opened.decode("latin-1")] = time.monotonic()
                elif message["status"] == 404 and session:
                    held.pop(session, None)
            await send(message)

        return noting
