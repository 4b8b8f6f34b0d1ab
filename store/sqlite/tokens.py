"""Access tokens (``tokens``): looked up by hash on every authenticated request."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from store.backend import TokenRow
from store.sql.text import TOKEN_COLUMNS

from .sql import Statements, marks

_SELECT = f"SELECT {', '.join(TOKEN_COLUMNS)} FROM tokens"


def token_row(values: Sequence[Any]) -> TokenRow:
    """A ``TokenRow`` from the values of ``TOKEN_COLUMNS`` (SQLite keeps the flag as 0 or 1)."""
    row = dict(zip(TOKEN_COLUMNS, values))
    return TokenRow(**{**row, "admin": bool(row["admin"])})


class TokenReads(Statements):
    """Tokens as a snapshot reads them."""

    def token_by_hash(self, token_hash: str) -> TokenRow | None:
        row = self.conn.execute(f"{_SELECT} WHERE hash = ?", (token_hash,)).fetchone()
        return None if row is None else token_row(row)

    def list_tokens(self) -> list[TokenRow]:
        return [token_row(row) for row in self.conn.execute(f"{_SELECT} ORDER BY created_at, name")]


class TokenWrites(Statements):
    """Tokens as a transaction writes them."""

    def insert_token(self, token: TokenRow) -> None:
        values = [getattr(token, column) for column in TOKEN_COLUMNS]
        self.conn.execute(f"INSERT INTO tokens ({', '.join(TOKEN_COLUMNS)}) VALUES ({marks(values)})", values)

    def delete_token(self, name: str) -> None:
        self.conn.execute("DELETE FROM tokens WHERE name = ?", (name,))

    def touch_token(self, name: str, used_at: str) -> None:
        self.conn.execute("UPDATE tokens SET last_used_at = ? WHERE name = ?", (used_at, name))

    def clear_token_sessions(self, name: str, cleared_at: str) -> None:
        self.conn.execute("UPDATE tokens SET sessions_cleared_at = ? WHERE name = ?", (cleared_at, name))
