"""Access tokens: made, listed, revoked and checked here; stored by the backend, as hashes.

A token is ``tm_`` and 43 URL-safe characters (``secrets.token_urlsafe(32)``: 256 random
bits). It is shown once, when made; the store keeps its SHA-256 (a fast hash is enough for
256 random bits: nothing to guess) and its first 11 characters, the **prefix**, so a person
can tell tokens apart and revoke one by it. Each request is checked against the store
(``verify``), so a revoked token is refused by every server on the store from its next request.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import re
import secrets
from dataclasses import dataclass

from store import retries
from store.backend import Backend, TokenRow, Transaction
from store.clock import now, today
from store.errors import InvalidArgument, NotFound, shown
from store.scope import Scope
from store.validation import DATE_PATTERN, check_id

TOKEN_MARK = "tm_"
PREFIX_CHARS = len(TOKEN_MARK) + 8
"""How much of a token is kept and shown: enough to tell thousands of tokens apart."""
TOUCH_SECONDS = 60
"""``last_used_at`` is written at most this often per token, not once per request."""
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9 ._@:/-]{0,63}"


@dataclass(frozen=True)
class TokenInfo:
    """A token as ``trimem token list`` shows it: never the secret or its hash."""

    name: str
    prefix: str
    user_id: str | None
    agent_id: str | None
    run_id: str | None
    admin: bool
    created_at: str
    expires_on: str | None
    last_used_at: str | None
    sessions_cleared_at: str | None
    """When ``clear_sessions`` last ended its sessions: servers end those opened before it."""

    @property
    def scope(self) -> Scope:
        """What the token may act on (nothing named for an admin: any scope)."""
        return Scope.of({"user_id": self.user_id, "agent_id": self.agent_id, "run_id": self.run_id})


@dataclass(frozen=True)
class IssuedToken:
    """A new token: its secret, to be handed over once, and how it is listed."""

    secret: str
    token: TokenInfo


def token_hash(secret: str) -> str:
    """The SHA-256 (hex) a token is stored and looked up by."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def _info(row: TokenRow) -> TokenInfo:
    return TokenInfo(
        name=row.name, prefix=row.prefix, user_id=row.user_id or None, agent_id=row.agent_id or None,
        run_id=row.run_id or None, admin=row.admin, created_at=row.created_at, expires_on=row.expires_on,
        last_used_at=row.last_used_at, sessions_cleared_at=row.sessions_cleared_at,
    )


def _check_expiry(value: str | None) -> str | None:
    """``YYYY-MM-DD``, today (UTC) or later: the last day the token is accepted."""
    if value is None:
        return None
    if not re.fullmatch(DATE_PATTERN, value.strip()):
        raise InvalidArgument(f"expires must look like 2027-06-30, got {shown(value)}")
    try:
        day = dt.date.fromisoformat(value.strip()).isoformat()
    except ValueError:
        raise InvalidArgument(f"expires {shown(value)} is not a real calendar date") from None
    if day < today():
        raise InvalidArgument(f"expires {day} is in the past (today is {today()}, UTC); send today or a later date")
    return day


class Tokens:
    """The store's access tokens (``Engine.tokens``)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def create(
        self, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None,
        admin: bool = False, expires: str | None = None, name: str | None = None,
    ) -> IssuedToken:
        """A new token for one user (narrowed to an agent or run when named), or an ``admin``
        token for any scope. Unnamed, it is named by its prefix."""
        ids = {key: check_id(value, key) for key, value in
               (("user_id", user_id), ("agent_id", agent_id), ("run_id", run_id)) if value is not None}
        if admin and ids:
            raise InvalidArgument("an admin token acts on every scope; name no user_id, agent_id or run_id with it")
        if not admin and "user_id" not in ids:
            raise InvalidArgument("a token needs the user_id it acts for, unless it is an admin token (for operators)")
        if name is not None and not re.fullmatch(NAME_PATTERN, name):
            raise InvalidArgument(f"token name {shown(name)} must be 1 to 64 letters, digits, spaces or ._@:/- "
                                  "and start with a letter or digit")
        expires_on = _check_expiry(expires)
        secret = TOKEN_MARK + secrets.token_urlsafe(32)
        scope = Scope.of(ids)
        row = TokenRow(
            name=name or secret[:PREFIX_CHARS], prefix=secret[:PREFIX_CHARS], hash=token_hash(secret),
            user_id=scope.user_id, agent_id=scope.agent_id, run_id=scope.run_id, admin=admin, created_at=now(),
            expires_on=expires_on, last_used_at=None, sessions_cleared_at=None,
        )
        self._check_writable()

        def write(txn: Transaction) -> None:
            if any(existing.name == row.name for existing in txn.list_tokens()):
                raise InvalidArgument(f"a token named {shown(row.name)} exists already; choose another --name, or "
                                      "revoke that one first")
            txn.insert_token(row)

        retries.transact(self.backend, write)
        return IssuedToken(secret=secret, token=_info(row))

    def list(self) -> list[TokenInfo]:
        """Every token, oldest first."""
        with self.backend.snapshot() as view:
            return [_info(row) for row in view.list_tokens()]

    def revoke(self, name_or_prefix: str) -> TokenInfo:
        """Remove the token with this name, or the one whose prefix starts with this (``tm_…``)."""
        self._check_writable()

        def write(txn: Transaction) -> TokenRow:
            row = _named(txn.list_tokens(), name_or_prefix)
            txn.delete_token(row.name)
            return row

        return _info(retries.transact(self.backend, write))

    def clear_sessions(self, name_or_prefix: str) -> TokenInfo:
        """End every session the token (named as for ``revoke``) holds open, on every server of the
        store: for a client that restarted and lost its session ids. The token stays valid.

        Sessions live in each server's memory, so this records a mark with the token; each server
        reads it with the token on its next request and ends the sessions it holds for the token
        that were opened before the mark (``mcp_server.service.limits.SessionCap``).
        """
        self._check_writable()
        moment = now()

        def write(txn: Transaction) -> TokenRow:
            row = _named(txn.list_tokens(), name_or_prefix)
            txn.clear_token_sessions(row.name, moment)
            return row

        return _info(dataclasses.replace(retries.transact(self.backend, write), sessions_cleared_at=moment))

    def verify(self, secret: str) -> TokenInfo | None:
        """The token ``secret`` is, when it is stored and has not expired; ``None`` otherwise.

        Reads the store each time (a revocation counts at once, in every process). Marks it
        used at most once a minute, and never on a read-only store.
        """
        with self.backend.snapshot() as view:
            row = view.token_by_hash(token_hash(secret))
        if row is None or row.expires_on is not None and row.expires_on < today():
            return None
        moment = now()
        if not self.backend.read_only and (row.last_used_at is None or _seconds_between(row.last_used_at, moment)
                                           >= TOUCH_SECONDS):
            retries.transact(self.backend, lambda txn: txn.touch_token(row.name, moment))
        return _info(row)

    def _check_writable(self) -> None:
        if self.backend.read_only:
            raise self.backend.refuse_write()


def _named(rows: list[TokenRow], name_or_prefix: str) -> TokenRow:
    """The one token of ``rows`` with this name, or whose prefix starts with this, or whose secret this is."""
    matches = [row for row in rows if row.name == name_or_prefix]
    if not matches and name_or_prefix.startswith(TOKEN_MARK):  # a prefix, or the whole secret
        matches = [row for row in rows if row.hash == token_hash(name_or_prefix)] or [
            row for row in rows if len(name_or_prefix) <= PREFIX_CHARS and row.prefix.startswith(name_or_prefix)
        ]
    if not matches:
        raise NotFound(f"no token is named or starts with {shown(name_or_prefix)}; `trimem token list` shows them")
    if len(matches) > 1:
        names = ", ".join(repr(row.name) for row in matches)
        raise InvalidArgument(f"{shown(name_or_prefix)} starts {len(matches)} tokens ({names}); give the name of "
                              "the one you mean")
    return matches[0]


def _seconds_between(earlier: str, later: str) -> float:
    return (dt.datetime.fromisoformat(later) - dt.datetime.fromisoformat(earlier)).total_seconds()
