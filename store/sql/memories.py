"""The memory and history statements both SQL backends run alike, written once against their
``Dialect``; each backend's ``memories`` module adds those its storage makes differ."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from store.backend import MemoryRow
from store.filters import Filter
from store.records import HistoryEvent
from store.scope import Scope

from .statements import Statements
from .text import DEGRADED_MEMORIES_SQL, memory_columns


class MemoryReads(Statements):
    """Memory rows, history and counts as a snapshot reads them."""

    ROW_LOCK = ""
    """What the reads of whole rows by id or key add: nothing in a snapshot; in a PostgreSQL
    write, a lock on the rows read (``PostgresTransaction``), since a write decides from them."""

    def get_memory(self, memory_id: str, scope: Scope) -> MemoryRow | None:
        where, params = self.dialect.scope_sql(scope)
        row = self.row(
            f"SELECT {memory_columns()} FROM memories WHERE id = {self.dialect.placeholder} AND {where}{self.ROW_LOCK}",
            (memory_id, *params),
        )
        return self.dialect.memory_row(row) if row else None

    def find_by_hash(self, scope: Scope, text_hash: str) -> MemoryRow | None:
        row = self.row(
            f"SELECT {memory_columns()} FROM memories WHERE {self.dialect.exact_scope_sql()} "
            f"AND hash = {self.dialect.placeholder}",
            (*scope.values(), text_hash),
        )
        return self.dialect.memory_row(row) if row else None

    def id_taken(self, memory_id: str, *, by_history: bool = True) -> bool:
        mark = self.dialect.placeholder
        sql = f"SELECT EXISTS (SELECT 1 FROM memories WHERE id = {mark})"
        if by_history:
            sql += f" OR EXISTS (SELECT 1 FROM history WHERE memory_id = {mark})"
        return bool(self.row(sql, (memory_id,) * (1 + by_history))[0])

    def list_memories(
        self, scope: Scope, filters: Filter | None, on: str | None, limit: int, offset: int
    ) -> list[MemoryRow]:
        where, params = self.dialect.scope_sql(scope, "m")
        live, live_params = self.dialect.live_sql(filters, on)
        mark = self.dialect.placeholder
        sql = (
            f"SELECT {memory_columns('m')} FROM memories m WHERE {where} AND ({live}) "
            f"ORDER BY m.created_at DESC, m.rowid DESC LIMIT {mark} OFFSET {mark}"
        )
        return [self.dialect.memory_row(row) for row in self.rows(sql, (*params, *live_params, limit, offset))]

    def scope_rowids(self, scope: Scope) -> list[int]:
        where, params = self.dialect.scope_sql(scope)
        return [row[0] for row in self.rows(f"SELECT rowid FROM memories WHERE {where}", params)]

    def history(self, memory_id: str, scope: Scope) -> list[HistoryEvent]:
        where, params = self.dialect.scope_sql(scope)
        rows = self.rows(
            "SELECT memory_id, event, old_text, new_text, old_metadata, new_metadata, created_at "
            f"FROM history WHERE memory_id = {self.dialect.placeholder} AND {where} ORDER BY id",
            (memory_id, *params),
        )
        decode = self.dialect.json_value
        return [HistoryEvent(*row[:4], decode(row[4]), decode(row[5]), row[6]) for row in rows]

    def scope_counts(self, on: str) -> list[tuple[Scope, int, int]]:
        rows = self.rows(
            f"SELECT user_id, agent_id, run_id, count(*), count(CASE WHEN {self.dialect.expired_sql('')} THEN 1 END) "
            "FROM memories GROUP BY user_id, agent_id, run_id ORDER BY user_id, agent_id, run_id",
            (on,),
        )
        return [(Scope(user, agent, run), count, expired) for user, agent, run, count, expired in rows]

    def _export_where(self, scope: Scope, filters: Filter | None) -> tuple[str, list[Any]]:
        """Which memories an export takes (over alias ``m``): the scope's that pass the filters,
        expired ones too."""
        where, params = self.dialect.scope_sql(scope, "m")
        fsql, fparams = self.dialect.live_sql(filters, None)
        return f"{where} AND ({fsql})", [*params, *fparams]

    def analysis_version(self) -> int:
        row = self.row("SELECT value FROM meta WHERE key = 'analysis_version'")
        return int(row[0]) if row else 1

    def reanalysis_cursor(self) -> tuple[int, int] | None:
        """Locked in a PostgreSQL write (``ROW_LOCK``), so two servers' batches from one cursor
        follow each other and the second finds the cursor moved."""
        row = self.row(f"SELECT value FROM meta WHERE key = 'reanalysis_cursor'{self.ROW_LOCK}")
        if row is None:
            return None
        version, rowid = row[0].split(":")
        return int(version), int(rowid)

    def memories_after(self, rowid: int, limit: int) -> list[MemoryRow]:
        mark = self.dialect.placeholder
        rows = self.rows(
            f"SELECT {memory_columns()} FROM memories WHERE rowid > {mark} ORDER BY rowid LIMIT {mark}", (rowid, limit)
        )
        return [self.dialect.memory_row(row) for row in rows]

    def count_memories_after(self, rowid: int) -> int:
        row = self.row(f"SELECT count(*) FROM memories WHERE rowid > {self.dialect.placeholder}", (rowid,))
        return int(row[0]) if row else 0

    def degraded_memories(self) -> list[MemoryRow]:
        return [self.dialect.memory_row(row) for row in self.rows(DEGRADED_MEMORIES_SQL)]


class MemoryWrites(Statements):
    """The analysis version, the re-analysis cursor and history as a transaction writes them."""

    def set_analysis_version(self, version: int) -> None:
        self.conn.execute(
            f"INSERT INTO meta (key, value) VALUES ('analysis_version', {self.dialect.placeholder}) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(version),),
        )

    def set_reanalysis_cursor(self, cursor: tuple[int, int] | None) -> None:
        if cursor is None:
            self.conn.execute("DELETE FROM meta WHERE key = 'reanalysis_cursor'")
            return
        version, rowid = cursor
        self.conn.execute(
            f"INSERT INTO meta (key, value) VALUES ('reanalysis_cursor', {self.dialect.placeholder}) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (f"{version}:{rowid}",),
        )

    HISTORY_COLUMNS = (
        "memory_id", "event", "old_text", "new_text", "old_metadata", "new_metadata", "user_id", "agent_id",
        "run_id", "created_at",
    )

    def add_history(self, events: Sequence[tuple[str, Scope, HistoryEvent]]) -> None:
        """Each event filed with its memory's scope, so history stays scoped after a delete."""
        encode = self.dialect.json_param
        self.write_rows("history", self.HISTORY_COLUMNS, [
            (memory_id, event.event, event.old_text, event.new_text, encode(event.old_metadata),
             encode(event.new_metadata), *scope.values(), event.created_at)
            for memory_id, scope, event in events
        ])
