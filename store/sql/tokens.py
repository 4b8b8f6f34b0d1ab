"""Access tokens (``tokens``): looked up by hash on every authenticated request, the same
statements on both backends."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from store.backend import TokenRow

from .statements import Statements
from .text import TOKEN_COLUMNS

_SELECT = f"SELECT {', '.join(TOKEN_COLUMNS)} FROM tokens"


def token_row(values: Sequence[Any]) -> TokenRow:
    """A ``TokenRow`` from the values of ``TOKEN_COLUMNS`` (SQLite keeps the flag as 0 or 1)."""
    row = dict(zip(TOKEN_COLUMNS, values))
    return TokenRow(**{**row, "admin": bool(row["admin"])})


class TokenReads(Statements):
    """Tokens as a snapshot reads them."""

    def token_by_hash(self, token_hash: str) -> TokenRow | None:
        row = self.row(f"{_SELECT} WHERE hash = {self.dialect.placeholder}", (token_hash,))
        return None if row is None else token_row(row)

    def list_tokens(self) -> list[TokenRow]:
        return [token_row(row) for row in self.rows(f"{_SELECT} ORDER BY created_at, name")]


class TokenWrites(Statements):
    """Tokens as a transaction writes them."""

    def insert_token(self, token: TokenRow) -> None:
        values = [getattr(token, column) for column in TOKEN_COLUMNS]
        self.conn.execute(
            f"INSERT INTO tokens ({', '.join(TOKEN_COLUMNS)}) VALUES ({self.dialect.marks(len(values))})", values
        )

    def delete_token(self, name: str) -> None:
        self.conn.execute(f"DELETE FROM tokens WHERE name = {self.dialect.placeholder}", (name,))

    def touch_token(self, name: str, used_at: str) -> None:
        self._set_token("last_used_at", name, used_at)

    def clear_token_sessions(self, name: str, cleared_at: str) -> None:
        self._set_token("sessions_cleared_at", name, cleared_at)

    def _set_token(self, column: str, name: str, value: str) -> None:
        mark = self.dialect.placeholder
        self.conn.execute(f"UPDATE tokens SET {column} = {mark} WHERE name = {mark}", (value, name))
