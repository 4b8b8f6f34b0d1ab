"""The entity statements both SQL backends run alike, written once against their ``Dialect``."""

from __future__ import annotations

from collections.abc import Sequence

from store.scope import Scope

from .statements import Statements


class EntityReads(Statements):
    """Entities as linking reads them."""

    def entities_holding(self, names: Sequence[str], scope: Scope) -> list[bool]:
        """One statement, a column a name."""
        if not names:
            return []
        where, params = self.dialect.scope_sql(scope)
        columns, column_params = [], []
        for name in names:
            holds, words = self.dialect.holds_words_sql("normalized", name.split())
            columns.append(f"EXISTS (SELECT 1 FROM entities WHERE {where} AND {holds})")
            column_params += [*params, *words]
        return [bool(held) for held in self.row(f"SELECT {', '.join(columns)}", column_params) or ()]

    def find_entities(self, names: Sequence[tuple[Scope, str]]) -> dict[tuple[Scope, str], int]:
        """One primary-key lookup per name (PostgreSQL asks for them all in one statement)."""
        sql = (f"SELECT id FROM entities WHERE {self.dialect.exact_scope_sql()} "
               f"AND normalized = {self.dialect.placeholder}")
        found = {(scope, name): self.row(sql, (*scope.values(), name)) for scope, name in names}
        return {key: row[0] for key, row in found.items() if row}
