"""The entity statements both SQL backends run alike, written once against their ``Dialect``."""

from __future__ import annotations

from collections.abc import Sequence

from store.scope import Scope

from .statements import Statements


class EntityReads(Statements):
    """Entities as linking reads them."""

    def find_entities(self, names: Sequence[tuple[Scope, str]]) -> dict[tuple[Scope, str], int]:
        """One primary-key lookup per name (PostgreSQL asks for them all in one statement)."""
        sql = (f"SELECT id FROM entities WHERE {self.dialect.exact_scope_sql()} "
               f"AND normalized = {self.dialect.placeholder}")
        found = {(scope, name): self.row(sql, (*scope.values(), name)) for scope, name in names}
        return {key: row[0] for key, row in found.items() if row}
