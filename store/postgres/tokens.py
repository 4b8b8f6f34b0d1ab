"""Access tokens (``tokens``): looked up by hash on every authenticated request."""

from __future__ import annotations

from store.backend import TokenRow
from store.sql.text import TOKEN_COLUMNS

from .sql import Statements

_SELECT = f"SELECT {', '.join(TOKEN_COLUMNS)} FROM tokens"


class TokenReads(Statements):
    """Tokens as a snapshot reads them."""

    def token_by_hash(self, token_hash: str) -> TokenRow | None:
        row = self.row(f"{_SELECT} WHERE hash = %s", (token_hash,))
        return None if row is None else TokenRow(*row)

    def list_tokens(self) -> list[TokenRow]:
        return [TokenRow(*row) for row in self.rows(f"{_SELECT} ORDER BY created_at, name")]


class TokenWrites(Statements):
    """Tokens as a transaction writes them."""

    def insert_token(self, token: TokenRow) -> None:
        values = [getattr(token, column) for column in TOKEN_COLUMNS]
        self.conn.execute(f"INSERT INTO tokens ({', '.join(TOKEN_COLUMNS)}) VALUES ({', '.join(['%s'] * len(values))})",
                          values)

    def delete_token(self, name: str) -> None:
        self.conn.execute("DELETE FROM tokens WHERE name = %s", (name,))

    def touch_token(self, name: str, used_at: str) -> None:
        self.conn.execute("UPDATE tokens SET last_used_at = %s WHERE name = %s", (used_at, name))

    def clear_token_sessions(self, name: str, cleared_at: str) -> None:
        self.conn.execute("UPDATE tokens SET sessions_cleared_at = %s WHERE name = %s", (cleared_at, name))
