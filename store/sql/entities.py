"""The entity statements both SQL backends run alike, written once against their ``Dialect``."""

from __future__ import annotations

from store.scope import Scope

from .statements import Statements


class EntityReads(Statements):
    """Entities as linking reads them."""

    def find_entity_exact(self, scope: Scope, normalized: str) -> int | None:
        row = self.row(
            f"SELECT id FROM entities WHERE {self.dialect.exact_scope_sql()} AND normalized = {self.dialect.placeholder}",
            (*scope.values(), normalized),
        )
        return row[0] if row else None
