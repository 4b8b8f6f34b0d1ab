"""Limits on the HTTP service: failed token checks, a rate per token, and sessions and calls per token.

Three ASGI middlewares, in the order a request meets them (``http.py``):

- ``FailedAuthLimit``, before the SDK's bearer backend: unknown tokens per client address and
  for the whole server, so a flood of wrong tokens is refused before it costs database lookups;
- ``RateLimit``, after it: a token bucket per token (``RateBudget``), which the tool calls that
  store many memories charge further (``server.serving``);
- ``SessionCap``: the sessions a token holds open and its calls in flight outside them.

The last two key on the token (its subject, the hash of its secret), and let a request without
one pass: the SDK's require-auth middleware refuses it, or the server runs without tokens on
loopback. Each server process keeps its own counts: behind a balancer over N processes a token
may reach N times the rate (docs/service.md). Every refusal is worded as the SDK words its own
(``refusal``), so the SDK's client raises the message rather than a bare status.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp_types import INTERNAL_ERROR, ErrorData, JSONRPCError
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

SESSION_HEADER = b"mcp-session-id"
ADDRESSES_KEPT = 10_000
"""Client addresses whose failed checks are counted; the least recently seen is forgotten
beyond this (the whole server's bucket still holds a flood from more addresses)."""
VERIFIED_KEPT = 4096
"""Tokens remembered as lately verified, so a flood of wrong ones never holds them back."""
WARN_EVERY_SECONDS = 60.0
"""A refusal that means an attack or an outage is logged at most this often, not per request."""


def token_of(scope: Scope) -> AuthenticatedUser | None:
    """The authenticated token of an HTTP request, if any."""
    user = scope.get("user") if scope["type"] == "http" else None
    return user if isinstance(user, AuthenticatedUser) else None


def token_key(token: AccessToken) -> str:
    """What the limits count a token by: its subject (the hash of its secret), else its client id."""
    return token.subject or token.client_id


def refusal(status: int, message: str, retry_after: float | None = None) -> Response:
    """A refusal as the SDK answers its own (a JSON-RPC error without an id, whose message the
    SDK's client raises as ``MCPError``), with ``Retry-After`` in whole seconds (at least 1) when
    waiting is what helps."""
    body = JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=INTERNAL_ERROR, message=message))
    headers = {} if retry_after is None else {"Retry-After": str(whole_seconds(retry_after))}
    return Response(body.model_dump_json(by_alias=True, exclude_unset=True), status_code=status,
                    media_type="application/json", headers=headers)


def whole_seconds(seconds: float) -> int:
    """A wait as a caller is told it: whole seconds, rounded up, at least 1."""
    return max(1, math.ceil(seconds))


class Throttled:
    """A warning logged at most once every ``WARN_EVERY_SECONDS``: a flood of refusals is one line a minute."""

    def __init__(self) -> None:
        self.at = -math.inf

    def warn(self, message: str, *args: object) -> None:
        now = time.monotonic()
        if now - self.at >= WARN_EVERY_SECONDS:
            self.at = now
            log.warning(message, *args)


@dataclass
class TokenBucket:
    """``rate`` units per second on average, up to ``burst`` at once; a large charge may run it into debt."""

    rate: float
    burst: int
    level: float = field(init=False)
    at: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.level = float(self.burst)

    def _refill(self, now: float) -> None:
        self.level = min(self.burst, self.level + (now - self.at) * self.rate)
        self.at = now

    def wait(self, now: float) -> float:
        """0 when one unit may be spent now, else the seconds until one may."""
        self._refill(now)
        return 0.0 if self.level >= 1 else (1 - self.level) / self.rate

    def take(self, now: float) -> float:
        """Spend one unit: 0 when it may go, else the seconds until one may (and nothing spent)."""
        wait = self.wait(now)
        if not wait:
            self.level -= 1
        return wait

    def charge(self, now: float, units: float) -> float:
        """Spend ``units`` at once, into debt if need be, unless the bucket is in debt already:
        then nothing is spent, and the result is the seconds until it is out of debt. So one
        large call may go, and what follows waits until the bucket has earned it back."""
        self._refill(now)
        if self.level < 0:
            return -self.level / self.rate
        self.level -= units
        return 0.0

    def refund(self, units: float = 1) -> None:
        self.level = min(self.burst, self.level + units)


class RateBudget:
    """Each token's bucket of ``service.rate_per_second`` and ``rate_burst``: one unit per request
    (``RateLimit``), and one more per further memory a tool call stores (``server.serving``), so
    one ``add_memory`` of 15,000 messages costs what 15,000 adds of one do."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst = rate, burst
        self.buckets: dict[str, TokenBucket] = {}

    def _bucket(self, key: str) -> TokenBucket:
        return self.buckets.setdefault(key, TokenBucket(self.rate, self.burst))

    def take(self, key: str) -> float:
        """Spend one request of the token ``key``: 0 when it may go, else the seconds to wait."""
        return self._bucket(key).take(time.monotonic())

    def charge(self, key: str, units: int) -> float:
        """Spend ``units`` more of the token ``key`` for one call (``TokenBucket.charge``)."""
        return self._bucket(key).charge(time.monotonic(), units)

    def refused(self, wait: float) -> str:
        """Why a request or call waits: the limit, its settings, and when to retry."""
        return (f"rate limit: {self.rate:g} requests per second per token, each memory stored counting as one "
                f"(service.rate_per_second, rate_burst {self.burst}); retry in {whole_seconds(wait)} s")


class RateLimit:
    """Refuse a token's requests beyond its budget with 429 and ``Retry-After``.

    A DELETE is let through: it only ends a session, and refusing it would leave the session
    holding a place of the token's ``SessionCap``.
    """

    def __init__(self, app: ASGIApp, budget: RateBudget) -> None:
        self.app, self.budget = app, budget

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        user = token_of(scope)
        if user is not None and scope["method"] != "DELETE":
            wait = self.budget.take(token_key(user.access_token))
            if wait:
                await refusal(429, self.budget.refused(wait), wait)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class FailedAuthLimit:
    """Refuse token checks with 429 and ``Retry-After``, before any lookup, while too many have
    failed from the request's address (``service.failed_auth_per_second``, ``failed_auth_burst``)
    or on the whole server (``failed_auth_total_*``).

    Runs before the SDK's bearer backend, which looks every bearer token up in the store (a
    worker thread and a query): a flood of wrong tokens would otherwise slow every user down.
    Each unknown token takes a unit of both buckets before its check, given back when the check
    passes, so concurrent guesses cannot slip past an empty bucket. A token that passed lately
    (``VERIFIED_KEPT`` kept, by the SHA-256 of the secret) skips the buckets: an attacker on the
    same address, or a flood from many, never locks its holder out. It is checked as before, and
    a failed check (revoked meanwhile) forgets it and counts. Requests without a bearer token are
    refused by the SDK without a lookup, so they are not counted.

    The address is the peer uvicorn reports: behind a reverse proxy, the proxy's own unless
    uvicorn trusts its ``X-Forwarded-For`` (``FORWARDED_ALLOW_IPS``: loopback by default; docs/service.md).
    """

    def __init__(self, app: ASGIApp, *, rate: float, burst: int, total_rate: float, total_burst: int) -> None:
        self.app, self.rate, self.burst = app, rate, burst
        self.addresses: OrderedDict[str, TokenBucket] = OrderedDict()
        self.total = TokenBucket(total_rate, total_burst)
        self.verified: OrderedDict[bytes, None] = OrderedDict()
        self.warning = Throttled()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        secret = bearer_of(scope)
        if secret is None:
            await self.app(scope, receive, send)
            return
        key = hashlib.sha256(secret).digest()
        address = scope["client"][0] if scope.get("client") else "unknown"
        known = key in self.verified
        if known:
            self.verified.move_to_end(key)
        elif refused := self._admit(address):
            why, wait = refused
            self.warning.warn("refusing token checks: %s", why)
            await refusal(429, why, wait)(scope, receive, send)
            return
        settled = False

        def settle() -> None:
            """Once the SDK has checked the token: remember it if it passed, count it if not."""
            nonlocal settled
            settled = True
            if token_of(scope) is not None:
                self.verified[key] = None
                if len(self.verified) > VERIFIED_KEPT:
                    self.verified.popitem(last=False)
                if not known:
                    self._bucket(address).refund()
                    self.total.refund()
            elif known:  # it passed before and fails now: it counts as any failure
                del self.verified[key]
                self._bucket(address).charge(time.monotonic(), 1)
                self.total.charge(time.monotonic(), 1)

        async def settling(message: Message) -> None:
            if not settled and message["type"] == "http.response.start":
                settle()
            await send(message)

        try:
            await self.app(scope, receive, settling)
        except Exception:  # no check was made (the store is down, http.Unavailable answers): nothing to count
            if not settled and not known:
                self._bucket(address).refund()
                self.total.refund()
            settled = True
            raise
        if not settled:
            settle()

    def _bucket(self, address: str) -> TokenBucket:
        bucket = self.addresses.get(address)
        if bucket is None:
            bucket = self.addresses[address] = TokenBucket(self.rate, self.burst)
            if len(self.addresses) > ADDRESSES_KEPT:
                self.addresses.popitem(last=False)
        else:
            self.addresses.move_to_end(address)
        return bucket

    def _admit(self, address: str) -> tuple[str, float] | None:
        """Take one check from ``address``'s bucket and the server's; ``None`` when both had one,
        else (why, seconds to wait) with nothing taken."""
        now, bucket = time.monotonic(), self._bucket(address)
        for limit, where, settings in ((bucket, f"from {address}", "failed_auth_per_second, failed_auth_burst"),
                                       (self.total, "on this server", "failed_auth_total_*")):
            if wait := limit.wait(now):
                why = (f"too many failed token checks {where}: {limit.rate:g} a second are allowed, in bursts of "
                       f"{limit.burst} (service.{settings}); retry in {whole_seconds(wait)} s")
                return why, wait
        bucket.take(now)
        self.total.take(now)
        return None


def bearer_of(scope: Scope) -> bytes | None:
    """The bearer token of an HTTP request, as the SDK's bearer backend reads it."""
    if scope["type"] != "http":
        return None
    value = next((value for name, value in scope["headers"] if name == b"authorization"), b"")
    return value[7:] if value[:7].lower() == b"bearer " else None


@dataclass
class Session:
    """One open session of a token, as the cap sees it."""

    mark: str | None
    """The token's ``sessions_cleared_at`` when the session opened: a newer mark ends it."""
    seen: float = field(default_factory=time.monotonic)
    """When a request of it last began or ended (monotonic seconds)."""
    running: int = 0
    """Its requests in flight; an open GET stream (the SDK's client keeps one) is one."""


@dataclass
class Held:
    """What one token holds: its open sessions (by id), and its calls in flight outside them."""

    sessions: dict[str, Session] = field(default_factory=dict)
    calls: int = 0


class SessionCap:
    """Hold a token to ``limit`` open sessions and calls in flight outside them, together (429 beyond).

    A session of the 2025 protocol counts from the response that gives its id until the client
    ends it (DELETE), the server no longer knows it (404), or it has had no request in flight
    for ``idle_seconds`` (when the SDK closes it). A request outside a session (the 2026
    protocol has none), or naming a session id this cap does not hold, counts as one call while
    it runs, so ``limit`` also bounds a token's calls in flight.

    Fair to a client that restarted: at the limit, a request that may open a session (it names
    none) ends the token's least recently used session with no request in flight (as a DELETE
    from its client would, so the SDK frees it and its id answers 404), and is refused only when
    every place is busy. A request naming a session the cap does not hold opens none, so it
    needs only a place for a call: idle sessions leave theirs to it without being ended (a
    client still using an id that ended gets the SDK's 404, its cue to open a new one). An
    operator ends all of a token's sessions with ``trimem token clear-sessions``: the mark it
    leaves reaches each server with the token's next request (``auth._claims``), and the
    sessions opened before it are ended then.
    """

    def __init__(self, app: ASGIApp, limit: int, idle_seconds: float, path: str) -> None:
        self.app, self.limit, self.idle_seconds, self.path = app, limit, idle_seconds, path
        self.held: dict[str, Held] = {}
        """Per token (``token_key``), what it holds."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        user = token_of(scope)
        if user is None or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        claims = (user.access_token.claims or {}).get("trimem_token") or {}
        mark = claims.get("sessions_cleared_at")
        held = self.held.setdefault(token_key(user.access_token), Held())
        await self._forget(scope, held, mark, claims.get("name"))
        session_id = next((value.decode("latin-1") for name, value in scope["headers"] if name == SESSION_HEADER), "")
        session = held.sessions.get(session_id) if session_id else None
        if session is None:
            await self._call(scope, receive, send, held, mark, opens=not session_id)
        elif scope["method"] == "DELETE":  # the client ends it
            del held.sessions[session_id]
            await self.app(scope, receive, send)
        else:
            session.running += 1
            session.seen = time.monotonic()
            try:
                await self.app(scope, receive, self._watching(send, held, session_id))
            finally:
                session.running -= 1
                session.seen = time.monotonic()

    @staticmethod
    def _watching(send: Send, held: Held, session_id: str) -> Send:
        """``send``, forgetting the session when the SDK answers that it no longer knows it (404)."""

        async def watching(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 404:
                held.sessions.pop(session_id, None)
            await send(message)

        return watching

    async def _call(self, scope: Scope, receive: Receive, send: Send, held: Held, mark: str | None,
                    opens: bool) -> None:
        """A request outside any session this cap holds: admitted while the token has a place,
        counted as a call until it ends. One that may open a session (``opens``: it named none)
        needs a place a session can keep, which an idle session yields if need be, and the
        session its answer opens is held from then on; one naming an unknown session needs only
        a call's place, which idle sessions leave to it."""
        busy = sum(1 for session in held.sessions.values() if session.running)
        taken = (len(held.sessions) if opens else busy) + held.calls
        if taken >= self.limit and not (opens and await self._yield_idle(scope, held)):
            await refusal(429, self._crowded(busy, held.calls), 1)(scope, receive, send)
            return
        held.calls += 1
        counted = True

        async def opening(message: Message) -> None:
            nonlocal counted
            if message["type"] == "http.response.start" and opens and message["status"] < 300:
                opened = next((value for name, value in message.get("headers", []) if name.lower() == SESSION_HEADER),
                              None)
                if opened is not None:  # from a call to a session: one place, not two
                    held.sessions[opened.decode("latin-1")] = Session(mark)
                    held.calls -= 1
                    counted = False
            await send(message)

        try:
            await self.app(scope, receive, opening)
        finally:
            if counted:
                held.calls -= 1

    def _crowded(self, busy: int, calls: int) -> str:
        """Why a token gets no place: what it holds busy, truly (sessions, calls, or both), and what to do."""
        holding = [f"{count} {what}{'s' if count != 1 else ''} {where}" for count, what, where in (
            (busy, "session", "open with a request in flight"), (calls, "call", "in flight outside a session"))
            if count]
        return (f"this token has {' and '.join(holding)}: {self.limit} at once is the most allowed "
                "(service.max_sessions_per_token); retry when one has finished, or end a session you no longer use")

    async def _forget(self, scope: Scope, held: Held, mark: str | None, name: str | None) -> None:
        """Drop the token's sessions the SDK has closed as idle, and end those opened before the
        token's latest ``trimem token clear-sessions`` (``mark``)."""
        now = time.monotonic()
        for session_id, session in list(held.sessions.items()):
            if session.running == 0 and now - session.seen > self.idle_seconds:
                del held.sessions[session_id]
        cleared = [session_id for session_id, session in held.sessions.items() if session.mark != mark]
        if cleared:
            log.info("ending %d session(s) of token %r, as `trimem token clear-sessions` asked", len(cleared), name)
        for session_id in cleared:
            del held.sessions[session_id]
            await self._end(scope, session_id)

    async def _yield_idle(self, scope: Scope, held: Held) -> bool:
        """End the token's least recently used session with no request in flight, if it has one."""
        idle = [(session.seen, session_id) for session_id, session in held.sessions.items() if not session.running]
        if not idle:
            return False
        _, session_id = min(idle)
        del held.sessions[session_id]
        await self._end(scope, session_id)
        return True

    async def _end(self, scope: Scope, session_id: str) -> None:
        """End a session in the SDK as its client would: a DELETE with its id, sent through the app
        on behalf of the token of ``scope`` (the session's own: the SDK ends it for no other)."""
        headers = [(name, value) for name, value in scope["headers"] if name in (b"host", b"origin")]
        ending = {**scope, "method": "DELETE", "query_string": b"",
                  "headers": [*headers, (SESSION_HEADER, session_id.encode("latin-1"))]}
        asked = False

        async def receive() -> Message:
            nonlocal asked
            if asked:
                return {"type": "http.disconnect"}
            asked = True
            return {"type": "http.request", "body": b"", "more_body": False}

        async def discard(_message: Message) -> None:
            pass

        await self.app(ending, receive, discard)
