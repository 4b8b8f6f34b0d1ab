"""The engine: every memory operation, over one SQLite file.

The MCP tools and the CLI each make one call here. Every write validates all of its
input first, runs the models outside the database lock, and then touches every table
(memory, vector, FTS row, entity links, history) in one transaction. Every read runs
in one read transaction on a read connection of its own, so it sees one snapshot and
never waits for a writer, in this process or another.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import apsw
import numpy as np

from . import connection, db, maintenance, peers, reembed, retrieval, transfer
from .config import Config
from .embeddings import Embedder, NameVectors, open_embedder
from .entities import normalize_entity
from .errors import InvalidArgument, NotFound, shown
from .filters import filters_sql
from .linking import link_entities
from .maintenance import RepairReport, Violation
from .nlp import NLP, Analysis
from .records import (
    MESSAGE_ROLES, SHORT_ID_CHARS, AddedMemory, Explanation, HistoryEvent, Memory, ScopeCount, SearchHit, scope_of,
    to_memory,
)
from .reembed import Progress, ReembedReport
from .validation import (
    CheckedMemory,
    check_expiration,
    check_id,
    check_metadata,
    check_offset,
    check_query,
    check_scope,
    scope_keys_in,
    check_text,
    check_threshold,
    check_top_k,
    normalized_hash,
)

log = logging.getLogger(__name__)

NO_EXPIRATION = "never"
"""The ``expiration_date`` that ``update`` reads as "clear it": the memory stays until deleted."""


@dataclass(frozen=True)
class MemoryInput:
    """One memory to add in a batch; scope and expiry come from the call."""

    text: str
    metadata: Mapping[str, Any] | None = None
    role: str | None = None
    actor_id: str | None = None


CANDIDATES_SHOWN = 5
"""How many ids the message about an ambiguous id prefix lists (it counts the rest)."""
CANDIDATE_TEXT_CHARS = 60


def candidate_lines(candidates: Sequence[db.IdCandidate], count: int) -> list[str]:
    """One line per candidate (sorted by id): the start of its id, long enough to tell it from
    the others listed, and the start of its text; then how many more there are."""
    ids = [candidate.id for candidate in candidates]
    shared = max((len(os.path.commonprefix(pair)) for pair in zip(ids, ids[1:])), default=0)
    lines = [f"  {candidate.id[:max(SHORT_ID_CHARS, shared + 1)]}  {shown(candidate.text, CANDIDATE_TEXT_CHARS)}"
             for candidate in candidates]
    if count > len(candidates):
        lines.append(f"  … and {count - len(candidates)} more")
    return lines


def now() -> str:
    """UTC timestamp, always with six digits of microseconds, so newest-first ordering is stable
    (``isoformat()`` alone drops them when they happen to be zero, and the text sorts wrong)."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds")


def _scope_if_named(user_id: Any, agent_id: Any, run_id: Any) -> dict[str, str] | None:
    """The checked scope when any id is named, else ``None`` (export: every user; import: the
    records' own scopes only)."""
    if user_id is None and agent_id is None and run_id is None:
        return None
    return check_scope(user_id, agent_id, run_id)


class Engine:
    """Memories of users, agents and runs in one SQLite file, with hybrid search.

    Thread-safe: one write connection guarded by a lock (model work is done outside it)
    and a pool of read connections, so a search never waits behind a write that is
    itself waiting for another process's lock. Several processes may open the same
    file (WAL, busy timeout, immediate transactions). A file this process cannot write
    is opened read-only: reads work, writes fail with a message.
    """

    def __init__(
        self,
        config: Config,
        *,
        embedder: Embedder | None = None,
        nlp: NLP | None = None,
        reembedding: bool = False,
        create: bool = True,
    ) -> None:
        """``reembedding`` opens a database that records another embedding model than the
        configured one, for ``reembed`` alone: every other call is refused until it completes.
        Without ``create`` a path that holds no database yet is refused instead of made one,
        so an engine opened only to read creates nothing."""
        self.config = config
        store = config.store
        self.embedder = embedder or open_embedder(
            store.embedding_model, store.embedding_backend,
            cache_dir=config.model_cache_dir, threads=store.inference_threads,
        )
        self.nlp = nlp or NLP(config.store.spacy_pipeline or None)
        self.path = config.database
        self._lock = threading.RLock()
        self._conn = connection.open_database(
            self.path, self.embedder.name, self.embedder.dimension, check_model=not reembedding, create=create
        )
        # Read once, now: the write connection may only be touched under ``_lock``, and whether
        # the file opened read-only (and why) never changes while it is open.
        self._refuse_write = connection.write_refusal(self._conn) if self._conn.readonly("main") else None
        self._readers: list[apsw.Connection] = []
        self._readers_lock = threading.Lock()
        self._closed = False
        # Texts embed on this thread while the NLP pipeline reads them on the caller's.
        self._side = ThreadPoolExecutor(1, thread_name_prefix="trimem-embed")
        self._names = NameVectors(self.embedder)

    @property
    def read_only(self) -> bool:
        """True when the file could only be opened for reading."""
        return self._refuse_write is not None

    def close(self) -> None:
        """Close every database connection (readers in use close when their read ends)."""
        self._side.shutdown()
        with self._readers_lock:
            self._closed = True
            idle, self._readers = self._readers, []
        for conn in idle:
            conn.close()
        with self._lock:
            self._conn.close()

    def _check_writable(self) -> None:
        """Refuse a write to a read-only file (or a full disk's snapshot) before the models run for it."""
        if self._refuse_write is not None:
            raise self._refuse_write()

    @contextlib.contextmanager
    def _reading(self) -> Iterator[apsw.Connection]:
        """A read connection of this engine's pool, inside one read transaction (one snapshot)."""
        with self._readers_lock:
            conn = self._readers.pop() if self._readers else None
        if conn is None:
            conn = connection.connect(self.path)
        try:
            with connection.read_transaction(conn):
                self._require_model(conn)
                yield conn
        finally:
            with self._readers_lock:
                keep = not self._closed
                if keep:
                    self._readers.append(conn)
            if not keep:
                conn.close()

    @contextlib.contextmanager
    def _writing(self) -> Iterator[apsw.Connection]:
        """The write connection, inside one write transaction."""
        with self._lock, connection.write_transaction(self._conn):
            self._require_model(self._conn)
            yield self._conn

    def _require_model(self, conn: apsw.Connection) -> None:
        """Refuse to read or write vectors of another model: another process may have re-embedded
        the database since this engine opened it (one primary-key read of ``meta``)."""
        connection.require_model(conn, self.embedder.name, self.embedder.dimension)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def warm_up(self) -> None:
        """Load the embedding model and the NLP pipeline now rather than on first use, side by
        side: much of each load is file reading and native code that lets the other run."""
        with ThreadPoolExecutor(1, thread_name_prefix="trimem-nlp-load") as pool:
            nlp_loaded = pool.submit(self.nlp.load)
            self.embedder.load()
            nlp_loaded.result()

    # --- writes ------------------------------------------------------------------------

    def add(
        self,
        content: str | Sequence[Mapping[str, Any]],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        expiration_date: str | None = None,
    ) -> list[AddedMemory]:
        """Remember a text, or each user/assistant message of a conversation (system messages
        are skipped), as Mem0 does with ``infer=False``."""
        if isinstance(content, str):
            items = [MemoryInput(content, metadata)]
        else:
            items = self._messages(content, metadata)
        return self.add_many(items, user_id=user_id, agent_id=agent_id, run_id=run_id, expiration_date=expiration_date)

    def _messages(self, messages: Any, metadata: Mapping[str, Any] | None) -> list[MemoryInput]:
        if not isinstance(messages, Sequence) or isinstance(messages, (bytes, bytearray)):
            raise InvalidArgument("content must be a string or a list of {role, content, name?} messages")
        items = []
        for index, message in enumerate(messages):
            if not isinstance(message, Mapping) or "role" not in message or "content" not in message:
                raise InvalidArgument(f"message {index} must be an object with 'role' and 'content'")
            role = message["role"]
            if role == "system":
                continue
            if role not in MESSAGE_ROLES:
                raise InvalidArgument(f"message {index} has role {shown(role)}; use 'user', 'assistant' or 'system'")
            name = message.get("name")
            items.append(
                MemoryInput(
                    message["content"], metadata, role=role, actor_id=None if name is None else check_id(name, "name")
                )
            )
        if not items:
            raise InvalidArgument("no user or assistant message to remember; send at least one")
        return items

    def add_many(
        self,
        items: Sequence[MemoryInput],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        expiration_date: str | None = None,
    ) -> list[AddedMemory]:
        """Add several memories to one scope with one model batch and one transaction.

        A text whose normalised form is already stored in the scope (or earlier in the
        batch) is not stored twice: its result is the existing memory, event DUPLICATE.
        """
        scope = check_scope(user_id, agent_id, run_id)
        expiry = check_expiration(expiration_date, retrieval.today())
        self._check_writable()
        limits = self.config.limits
        checked = [
            CheckedMemory(
                check_text(item.text, limits.max_text_chars), scope,
                check_metadata(item.metadata, limits.max_metadata_bytes), expiry, item.actor_id, item.role,
            )
            for item in items
        ]
        ignored = [scope_keys_in(item.metadata) for item in items]
        hashes = [memory.hash for memory in checked]
        first = {h: i for i, h in reversed(list(enumerate(hashes)))}  # a twin inside the batch is a duplicate
        stored = dict(zip(first, self._store([checked[i] for i in first.values()])))
        return [
            AddedMemory("ADD" if stored[h][0] == "ADD" and first[h] == i else "DUPLICATE", to_memory(stored[h][1]),
                        ignored[i])
            for i, h in enumerate(hashes)
        ]

    def _store(
        self, memories: Sequence[CheckedMemory], *, dry_run: bool = False, gap_after_skip: bool = False
    ) -> list[tuple[str, db.MemoryRow | None]]:
        """Write checked memories with one model batch and one transaction, in the order given
        (rowids follow it); the one write path of ``add_many`` and ``import_memories``.

        A memory is skipped when its id is taken (``SAME_ID``, with no row) or its normalised text
        is stored in its scope (``DUPLICATE``, with that row); else ``ADD`` with the new row.
        ``dry_run`` only looks. Each memory gets an ADD event, or the events it brings. With
        ``gap_after_skip`` a memory written after a skipped one is kept apart from the one
        before (``gap_before``), as the skipped one stood between them.
        """

        def stored(conn: apsw.Connection, memory: CheckedMemory) -> tuple[str, db.MemoryRow | None] | None:
            if memory.id is not None and db.id_taken(conn, memory.id):
                return "SAME_ID", None
            twin = db.find_by_hash(conn, memory.scope, memory.hash)
            return None if twin is None else ("DUPLICATE", twin)

        with self._reading() as conn:
            outcomes = [stored(conn, memory) for memory in memories]
        fresh = [i for i, outcome in enumerate(outcomes) if outcome is None]
        if dry_run:
            return [outcome or ("ADD", None) for outcome in outcomes]
        analyses, embeddings, entity_vectors = self._analyse_and_embed([memories[i].text for i in fresh])
        modelled = dict(zip(fresh, zip(analyses, embeddings)))
        stamp = now()
        with self._writing():
            skipped = False  # the memory before this one was not written, so this one is no neighbour of the last
            for i, item in enumerate(memories):
                if i not in modelled:
                    skipped = True
                    continue
                if outcome := stored(self._conn, item):
                    outcomes[i], skipped = outcome, True  # another process stored it since we looked
                    continue
                analysis, embedding = modelled[i]
                memory = db.NewMemory(
                    id=item.id or str(uuid.uuid4()), text=item.text, text_lemmatized=analysis.lemmatized,
                    hash=item.hash, scope=item.scope, actor_id=item.actor_id, role=item.role,
                    metadata=item.metadata, created_at=item.created_at or stamp, expiration_date=item.expiration_date,
                    embedding=embedding, updated_at=item.updated_at,
                    gap_before=item.gap_before or (gap_after_skip and skipped),
                )
                skipped = False
                rowid = db.insert_memory(self._conn, memory)
                link_entities(self._conn, rowid, item.scope, analysis.entities, entity_vectors)
                added = HistoryEvent(memory.id, "ADD", None, item.text, None, item.metadata, memory.created_at)
                for event in item.history or [added]:
                    db.add_history(
                        self._conn, memory, event.event, old_text=event.old_text, new_text=event.new_text,
                        old_metadata=event.old_metadata, new_metadata=event.new_metadata, at=event.created_at,
                    )
                outcomes[i] = ("ADD", db.find_by_hash(self._conn, item.scope, item.hash))
        return outcomes

    def update(
        self,
        memory_id: str,
        *,
        text: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        replace_metadata: bool = False,
        expiration_date: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> Memory:
        """Change a memory's text (re-embedded, re-lemmatized, entities relinked), metadata and/or
        expiration date.

        ``metadata`` is merged into the stored object: its keys are set, and a key sent as
        ``None`` is removed; with ``replace_metadata`` it replaces the whole object.
        ``expiration_date`` is ``YYYY-MM-DD`` (today or later), or ``"never"`` to clear it.
        """
        scope = check_scope(user_id, agent_id, run_id)
        if text is None and metadata is None and expiration_date is None:
            raise InvalidArgument("nothing to update: send text, metadata, expiration_date or several")
        clear_expiration = isinstance(expiration_date, str) and expiration_date.strip() == NO_EXPIRATION
        new_expiration = None if clear_expiration else check_expiration(expiration_date, retrieval.today())
        if misplaced := scope_keys_in(metadata):
            raise InvalidArgument(
                f"metadata holds the scope key(s) {', '.join(misplaced)}; update never moves a memory to another "
                "scope: drop them (to move a memory, add it in the new scope and delete the old one)"
            )
        self._check_writable()
        new_text = None if text is None else check_text(text, self.config.limits.max_text_chars)
        new_metadata = None if metadata is None else check_metadata(metadata, self.config.limits.max_metadata_bytes)
        with self._reading() as conn:
            row = self._get_row(conn, memory_id, scope)
        analysis: Analysis | None = None
        if new_text is not None and new_text != row.text:
            (analysis,), (embedding,), entity_vectors = self._analyse_and_embed([new_text])
        stamp = now()
        with self._writing():
            row = self._get_row(self._conn, memory_id, scope)  # it may have changed while the models ran
            own_scope = scope_of(row)
            final_text = row.text if analysis is None else new_text
            if new_metadata is None:
                final_metadata = row.metadata
            elif replace_metadata:
                final_metadata = new_metadata
            else:
                merged = {**row.metadata, **new_metadata}
                final_metadata = {key: value for key, value in merged.items() if value is not None}
            if analysis is not None:
                final_hash = normalized_hash(final_text)
                twin = db.find_by_hash(self._conn, own_scope, final_hash)
                if twin is not None and twin.rowid != row.rowid:
                    raise InvalidArgument(
                        f"that text is already stored as memory {shown(twin.id)}; delete one of them instead"
                    )
                db.update_memory_text(
                    self._conn, row.rowid, text=final_text, text_lemmatized=analysis.lemmatized,
                    text_hash=final_hash, updated_at=stamp,
                )
                db.put_memory_vector(self._conn, row.rowid, embedding, own_scope)
                db.unlink_entities(self._conn, row.rowid)
                link_entities(self._conn, row.rowid, own_scope, analysis.entities, entity_vectors)
                db.delete_orphan_entities(self._conn)
            db.update_memory_metadata(self._conn, row.rowid, final_metadata, stamp)
            if clear_expiration or new_expiration is not None:
                db.update_memory_expiration(self._conn, row.rowid, new_expiration, stamp)
            db.add_history(
                self._conn, row, "UPDATE", old_text=row.text, new_text=final_text,
                old_metadata=row.metadata, new_metadata=final_metadata,
                at=stamp,
            )
            return to_memory(self._get_row(self._conn, memory_id, scope))

    def delete(
        self, memory_id: str, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
    ) -> Memory:
        """Forget one memory: its vector, keyword row and entity links go with it."""
        scope = check_scope(user_id, agent_id, run_id)
        self._check_writable()
        with self._writing():
            row = self._get_row(self._conn, memory_id, scope)
            self._delete_row(row)
            db.delete_orphan_entities(self._conn)
        return to_memory(row)

    def delete_all(self, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None) -> int:
        """Forget every memory in a scope; returns how many."""
        scope = check_scope(user_id, agent_id, run_id)
        self._check_writable()
        with self._writing():
            rowids = db.scope_rowids(self._conn, scope)
            for row in db.memories_by_rowid(self._conn, rowids).values():
                self._delete_row(row)
            db.delete_orphan_entities(self._conn)
        return len(rowids)

    def restore(
        self, memory_id: str, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
    ) -> Memory:
        """Bring back a deleted memory from its history: the text and metadata it had when it
        was deleted, under its old id, scope and creation time, re-embedded and re-linked.

        History keeps no expiration date, speaker or role, so the restored memory has none.
        A RESTORE event records the restore. Refused when the id is now another memory's (in
        another scope): ids are unique in the file.
        """
        scope = check_scope(user_id, agent_id, run_id)
        memory_id = check_id(memory_id, "memory_id")
        self._check_writable()
        with self._reading() as conn:
            full_id = memory_id if db.history(conn, memory_id, scope) else self._full_id(
                conn, "history", memory_id, scope
            )
            deleted = db.last_deletion(conn, full_id, scope)
        if deleted is None:
            raise NotFound(f"no history for memory {shown(memory_id)} in this scope, so nothing to restore")
        if isinstance(deleted, str):
            raise InvalidArgument(f"memory {shown(full_id)} is not deleted (its last change was {deleted}); "
                                  "nothing to restore")
        (analysis,), (embedding,), entity_vectors = self._analyse_and_embed([deleted.text])
        text_hash = normalized_hash(deleted.text)
        stamp = now()
        with self._writing():
            holder = db.get_memory(self._conn, full_id, {})  # in any scope: ids are unique in the file
            if holder is not None and scope_of(holder) == deleted.scope:
                raise InvalidArgument(f"memory {shown(full_id)} was restored already")
            if holder is not None:
                raise InvalidArgument(
                    f"memory {shown(full_id)} cannot be restored: its id now belongs to a memory of another scope. "
                    "Its text is in its history; add it again to keep it under a new id"
                )
            twin = db.find_by_hash(self._conn, deleted.scope, text_hash)
            if twin is not None:
                raise InvalidArgument(
                    f"the same text is stored again as memory {shown(twin.id)}; that one stands in for it"
                )
            memory = db.NewMemory(
                id=full_id, text=deleted.text, text_lemmatized=analysis.lemmatized, hash=text_hash,
                scope=deleted.scope, actor_id=None, role=None, metadata=deleted.metadata,
                created_at=deleted.created_at, expiration_date=None, embedding=embedding,
            )
            rowid = db.insert_memory(self._conn, memory)
            db.update_memory_metadata(self._conn, rowid, deleted.metadata, stamp)  # updated now
            link_entities(self._conn, rowid, deleted.scope, analysis.entities, entity_vectors)
            db.add_history(
                self._conn, memory, "RESTORE", old_text=None, new_text=deleted.text,
                old_metadata=None, new_metadata=deleted.metadata, at=stamp,
            )
            return to_memory(db.get_memory(self._conn, full_id, deleted.scope))

    def _delete_row(self, row: db.MemoryRow) -> None:
        """Delete one row and record it; the caller removes orphaned entities once afterwards."""
        db.delete_memory_row(self._conn, row.rowid)
        db.add_history(
            self._conn, row, "DELETE", old_text=row.text, new_text=None,
            old_metadata=row.metadata, new_metadata=None, at=now(),
        )

    def _analyse_and_embed(self, texts: list[str]) -> tuple[list[Analysis], np.ndarray, dict[str, np.ndarray]]:
        """Analyse texts with the NLP pipeline while they embed on the side thread (ONNX Runtime
        releases the GIL, so both cores work), then embed their distinct entities in one batch."""
        text_vectors = self._side.submit(self.embedder.embed_batch, texts)
        analyses = self.nlp.analyze_batch(texts)
        names = list(dict.fromkeys(e.normalized for a in analyses for e in a.entities))
        return analyses, text_vectors.result(), dict(zip(names, self._names.embed(names)))

    # --- reads --------------------------------------------------------------------------

    def _get_row(self, conn: apsw.Connection, memory_id: Any, scope: dict[str, str]) -> db.MemoryRow:
        memory_id = check_id(memory_id, "memory_id")
        row = db.get_memory(conn, memory_id, scope)
        if row is None:
            row = db.get_memory(conn, self._full_id(conn, "memories", memory_id, scope), scope)
        if row is None:
            where = ", ".join(f"{key}={shown(value)}" for key, value in scope.items())
            raise NotFound(
                f"memory {shown(memory_id)} not found for {where}; listing the memories shows the ids in this scope"
            )
        return row

    @staticmethod
    def _full_id(conn: apsw.Connection, table: str, memory_id: str, scope: dict[str, str]) -> str:
        """The one id in the scope that ``memory_id`` begins (tables and lists show 8 characters),
        or ``memory_id`` itself when none does. A start shared by several ids is an error listing
        them; so is one shorter than ``ID_PREFIX_MIN_CHARS``, even of a single id, which it names."""
        candidates, count = db.ids_with_prefix(conn, table, memory_id, scope, CANDIDATES_SHOWN)
        if not candidates:
            return memory_id
        if count == 1 and len(memory_id) >= db.ID_PREFIX_MIN_CHARS:
            return candidates[0].id
        if count == 1:
            problem = (f"is too short to stand for an id; give at least {db.ID_PREFIX_MIN_CHARS} characters, such "
                       "as those of the one id in this scope that starts with it:")
        else:
            problem = f"is the start of {count} ids in this scope; give more of it to say which:"
        raise InvalidArgument("\n".join([f"memory id {shown(memory_id)} {problem}",
                                          *candidate_lines(candidates, count)]))

    def get(
        self, memory_id: str, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
    ) -> Memory:
        """One memory by id (or a prefix of it, at least 4 characters, that no other id in the scope
        shares), if it belongs to the caller's scope. A shorter or shared prefix is refused with
        the ids in the scope that start with it, and the start of their texts."""
        scope = check_scope(user_id, agent_id, run_id)
        with self._reading() as conn:
            return to_memory(self._get_row(conn, memory_id, scope))

    def list(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        filters: Mapping[str, Any] | None = None,
        show_expired: bool = False,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Memory]:
        """A page of the scope's memories, newest first."""
        scope = check_scope(user_id, agent_id, run_id)
        limit = check_top_k(limit, self.config.limits.max_top_k, "limit")
        offset = check_offset(offset)
        fsql, fparams = filters_sql(filters)
        today = None if show_expired else retrieval.today()
        with self._reading() as conn:
            rows = db.list_memories(conn, scope, fsql, fparams, today, limit, offset)
        return [to_memory(row) for row in rows]

    def entities(
        self, memory_id: str, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
    ) -> list[str]:
        """The names of the entities linked to one memory (normalised, as search matches them)."""
        scope = check_scope(user_id, agent_id, run_id)
        with self._reading() as conn:
            return db.memory_entity_names(conn, self._get_row(conn, memory_id, scope).rowid)

    def list_by_entity(
        self,
        entity: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        limit: int = 100,
    ) -> list[Memory]:
        """The scope's memories linked to an entity of this name (any casing or spacing), newest first."""
        scope = check_scope(user_id, agent_id, run_id)
        limit = check_top_k(limit, self.config.limits.max_top_k, "limit")
        name = normalize_entity(check_text(entity, self.config.limits.max_text_chars, "entity"))
        with self._reading() as conn:
            return [to_memory(row) for row in db.memories_with_entity(conn, name, scope, limit)]

    def history(
        self, memory_id: str, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
    ) -> list[HistoryEvent]:
        """A memory's ADD / UPDATE / DELETE / RESTORE events, oldest first (kept after deletion)."""
        scope = check_scope(user_id, agent_id, run_id)
        memory_id = check_id(memory_id, "memory_id")
        with self._reading() as conn:
            rows = db.history(conn, memory_id, scope) or db.history(
                conn, self._full_id(conn, "history", memory_id, scope), scope
            )
        if not rows:
            raise NotFound(f"no history for memory {shown(memory_id)} in this scope")
        return [HistoryEvent(*row) for row in rows]

    def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        top_k: int | None = None,
        threshold: float | None = None,
        filters: Mapping[str, Any] | None = None,
        show_expired: bool = False,
        explain: bool = False,
    ) -> list[SearchHit]:
        """Memories ranked by the fusion of meaning, keywords and entities; with ``explain``,
        each hit carries every part of its score."""
        return self.explain(
            query, user_id=user_id, agent_id=agent_id, run_id=run_id, top_k=top_k, threshold=threshold,
            filters=filters, show_expired=show_expired, details=explain,
        ).hits

    def explain(
        self,
        query: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        top_k: int | None = None,
        threshold: float | None = None,
        filters: Mapping[str, Any] | None = None,
        show_expired: bool = False,
        details: bool = True,
        use_bm25: bool | None = None,
        use_entities: bool | None = None,
    ) -> Explanation:
        """The search, with the query analysis, every score part and the dropped candidates.

        ``use_bm25`` / ``use_entities`` switch a signal on or off for this call only (``None``:
        as configured), so a ranking can be compared with and without it."""
        switches = {"use_bm25": use_bm25, "use_entities": use_entities}
        options = replace(
            self.config.search, **{name: bool(value) for name, value in switches.items() if value is not None}
        )
        scope = check_scope(user_id, agent_id, run_id)
        query = check_query(query, self.config.limits.max_text_chars)
        fsql, fparams = filters_sql(filters)
        request = retrieval.SearchRequest(
            scope=scope,
            top_k=check_top_k(options.top_k if top_k is None else top_k, self.config.limits.max_top_k),
            threshold=check_threshold(options.threshold if threshold is None else threshold),
            filter_sql=fsql,
            filter_params=fparams,
            show_expired=bool(show_expired),
            options=options,
        )
        prepared = retrieval.prepare(query, self.nlp, self.embedder, self._names, options, self._side)
        with self._reading() as conn:
            return retrieval.run(conn, prepared, request, explain=details)

    # --- moving memories in and out ----------------------------------------------------------

    def export(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        filters: Mapping[str, Any] | None = None,
        history: bool = False,
    ) -> Iterator[str]:
        """Every memory as JSON Lines after a header line (``store/transfer.py``), read from one
        snapshot and yielded line by line, never all held at once; the scope ids and ``filters``
        narrow it (naming none exports every user's), ``history`` adds each memory's events.
        Expired memories are included; vectors never are (an import derives its own)."""
        scope = _scope_if_named(user_id, agent_id, run_id) or {}
        filter_sql = filters_sql(filters)  # checked now, not at the first line read

        def lines() -> Iterator[str]:
            with self._reading() as conn:
                yield from transfer.export_lines(
                    conn, scope, filters, filter_sql, history=history, model=self.embedder.name,
                    dimension=self.embedder.dimension, at=now(),
                )

        return lines()

    def import_memories(
        self,
        path: str | Path,
        *,
        source: peers.SourceFormat = "trimem",
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        dry_run: bool = False,
        progress: Callable[[int, int | None], None] | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> transfer.ImportReport:
        """Import a trimem export, or another memory server's file (``source``, see
        ``store/peers.py``): every memory re-embedded and re-linked with this engine's models,
        with its id, dates, metadata and (if exported) history kept.

        A memory whose id is taken (stored already, or kept by a deleted memory's history, which
        ``restore`` may bring back), or whose normalised text is stored in its scope, is skipped
        and counted, so importing a file twice changes nothing and no id ever holds two memories'
        histories. A record that names its own user, agent or run keeps it; the scope ids go to
        records that name none (the peers' records, Mem0's aside); the report counts both.
        Records are checked (histories too: each must be one trimem could have recorded) and
        written in chunks of 256, each one transaction: a bad record raises ``BadLine`` naming
        the file and its line, with the chunks before it written and nothing of its own.
        ``dry_run`` checks every record and counts what would be skipped, writing nothing.
        ``progress(done, total)`` is called after each chunk (``total`` ``None`` when unknown),
        then ``stop()``: when it returns true the import ends there with ``ImportInterrupted``,
        whose report counts exactly what is stored (a second run adds the rest).
        """
        default = _scope_if_named(user_id, agent_id, run_id)
        if not dry_run:
            self._check_writable()
        try:
            reader = peers.open_source(source, Path(path))
            if reader.embedding_model not in (None, self.embedder.name):
                log.warning("%s was exported with the embedding model %r; its memories are embedded again with %r",
                            path, reader.embedding_model, self.embedder.name)
            return transfer.run_import(reader, default, self.config.limits, self._store, dry_run=dry_run,
                                       progress=progress, stop=stop)
        except transfer.BadLine as exc:
            raise transfer.BadLine(f"{path}, {exc}") from None

    def check(self, *, deep: bool = False) -> list[Violation]:
        """Every broken invariant of the database (orphans, missing vectors or FTS rows, …);
        ``deep`` also runs the NLP pipeline to find memories missing their entity links."""
        with self._lock:
            return maintenance.check(self._conn, self.nlp if deep else None)

    def repair(self) -> RepairReport:
        """Rebuild derived rows (vectors, FTS rows, entity links) from ``memories``."""
        self._check_writable()
        with self._lock:
            return maintenance.repair(self._conn, self.embedder, self.nlp)

    def reembed(self, *, progress: Progress | None = None) -> ReembedReport:
        """Re-embed every memory and entity with this engine's model and make it the database's
        model; open the engine with ``reembedding=True`` and the new model in its configuration.

        Resumable: an interrupted run keeps its committed chunks, and until the final switch
        every other process keeps using the old index. ``progress(done, total)`` is called
        after each chunk. Refused when the database already uses the model.
        """
        self._check_writable()
        with self._lock:
            return reembed.reembed(self._conn, self.embedder, progress)

    def backup(self, destination: Path) -> None:
        """Copy the database with SQLite's online backup: safe while other servers write."""
        with self._reading() as conn:
            maintenance.backup(conn, Path(destination))

    def users(self) -> list[ScopeCount]:
        """Every user, agent and run scope that holds memories, with counts (expired ones too)."""
        with self._reading() as conn:
            rows = db.scope_counts(conn, retrieval.today())
        return [ScopeCount(user or None, agent or None, run or None, n, expired)
                for user, agent, run, n, expired in rows]

    def stats(self) -> dict[str, Any]:
        """Memories and expired ones, in all and per user; the file's size; the models."""
        per_user: dict[str, dict[str, int]] = {}
        scopes = self.users()
        for scope in scopes:
            counts = per_user.setdefault(scope.user_id or "", {"memories": 0, "expired": 0})
            counts["memories"] += scope.memories
            counts["expired"] += scope.expired
        files = [self.path, Path(f"{self.path}-wal")]
        return {
            "database": str(self.path),
            "file_bytes": sum(f.stat().st_size for f in files if f.exists()),
            "memories": sum(scope.memories for scope in scopes),
            "expired": sum(scope.expired for scope in scopes),
            "users": per_user,
            "embedding_model": self.embedder.name,
            "embedding_backend": self.embedder.backend,
        }

    def status(self) -> dict[str, Any]:
        """Versions, models, the database path and row counts (``trimem doctor``)."""
        with self._reading() as conn:
            info: dict[str, Any] = {"database": str(self.path), **connection.versions(conn), **connection.meta(conn)}
            info["counts"] = db.counts(conn)
        info["read_only"] = self.read_only
        info["embedding_backend"] = self.embedder.backend
        info["spacy_tier"] = self.nlp.expected_tier  # without loading it: doctor answers in a moment
        info["spacy_loaded"] = self.nlp.loaded
        return info
