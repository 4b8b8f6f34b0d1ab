"""What both backends' filter compilers share: the walk over a parsed filter (``store.filters``),
how its parts combine, and the guard on the table alias, the one identifier spliced into the SQL.

Each backend's subclass writes only its atoms (its JSON access and its operators) and says what
true is in its SQL; the tree's shape, ``AND``/``OR``/``NOT`` and the alias rule are decided here.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from store.filters import (
    All,
    AnyOf,
    Compare,
    Contains,
    Equals,
    Exists,
    Filter,
    IsNull,
    Not,
    OneOf,
    TimeCompare,
)

from .dialect import Sql

ALIAS_RE = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_]*)?")
SYMBOLS = {"eq": "=", "ne": "<>", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
"""The SQL operator of each comparison a filter names."""


class FilterCompiler:
    """Builds SQL fragments over one table alias; each is two-valued (never NULL), so ``NOT`` is a
    true complement and parts combine freely."""

    TRUE: ClassVar[str]
    """The backend's always-true expression: no filter, or an empty ``AND``."""

    def __init__(self, alias: str) -> None:
        self.alias = alias

    @classmethod
    def filter_sql(cls, parsed: Filter | None, alias: str = "m") -> Sql:
        """``(sql_expression, params)`` for a parsed metadata filter over the columns of table
        ``alias`` (``metadata``, ``created_at``, ``updated_at``; ``alias=""`` names them bare),
        ``TRUE`` for ``None``. ``alias`` is a trusted identifier chosen by the engine."""
        if not (isinstance(alias, str) and ALIAS_RE.fullmatch(alias)):
            raise AssertionError(f"alias must be a plain identifier or empty, got {alias!r}")
        if parsed is None:
            return cls.TRUE, []
        sql, params = cls(alias).compile(parsed)
        return sql, list(params)

    def column(self, name: str) -> str:
        """A column of the table, over the alias when there is one."""
        return f"{self.alias}.{name}" if self.alias else name

    def join(self, parts: list[Sql], op: str) -> Sql:
        """``parts`` joined by ``op``, in parentheses; no parts (an empty ``AND``) is true."""
        if not parts:
            return self.TRUE, []
        if len(parts) == 1:
            return parts[0]
        return "(" + f" {op} ".join(sql for sql, _ in parts) + ")", [p for _, params in parts for p in params]

    def compile(self, node: Filter) -> Sql:
        match node:
            case All(parts):
                return self.join([self.compile(part) for part in parts], "AND")
            case AnyOf(parts):
                return self.join([self.compile(part) for part in parts], "OR")
            case Not(part):
                sql, params = self.compile(part)
                return f"(NOT {sql})", params
            case IsNull(key):
                return self.is_null(key)
            case Exists(key):
                return self.exists(key)
            case Equals(key, value):
                return self.compare(key, "eq", value)
            case Compare(key, op, value):
                return self.compare(key, op, value)
            case OneOf(key, values):
                return self.one_of(key, values)
            case Contains(key, value, ignore_case):
                return self.contains(key, value, ignore_case)
            case TimeCompare(field, op, prefix):
                return self.time_compare(field, op, prefix)
        raise AssertionError(f"not a filter node: {node!r}")

    # The atoms, each written by the backend's subclass over its JSON access.

    def is_null(self, key: str) -> Sql:
        raise NotImplementedError

    def exists(self, key: str) -> Sql:
        raise NotImplementedError

    def compare(self, key: str, op: str, value: Any) -> Sql:
        raise NotImplementedError

    def one_of(self, key: str, values: tuple[Any, ...]) -> Sql:
        raise NotImplementedError

    def contains(self, key: str, value: Any, ignore_case: bool) -> Sql:
        raise NotImplementedError

    def time_compare(self, field: str, op: str, prefix: str) -> Sql:
        raise NotImplementedError
