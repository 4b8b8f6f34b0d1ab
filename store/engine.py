"""The engine: every memory operation, as a front over a storage backend.

The MCP tools and the CLI each make one call here. Every call validates all of its input
first; a write then runs the models outside any lock and hands the backend one write
transaction (memory, vector, keyword row, entity links, history: all or nothing). Every
read runs in one snapshot of the store, so it sees one state and never waits for a writer.
The backend (``store.backend``) is SQLite by default.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Self, get_args

import numpy as np

from store import admin, cancellation, clock, ids, retries, updates
from store.analysis.embeddings import Embedder, NameVectors, open_embedder
from store.analysis.entities import normalize_entity
from store.analysis.linking import link_entities
from store.analysis.nlp import NLP, Analysis
from store.analysis.reanalysis import Reanalysis
from store.backend import (
    Backend,
    Capability,
    MemoryRow,
    NewMemory,
    Progress,
    Snapshot,
    Transaction,
    require_writable,
    to_memory,
)
from store.config import Config
from store.errors import InvalidArgument, NotFound, TrimemError, shown
from store.exchange import peers, transfer
from store.filters import parse_filters
from store.ranking import retrieval
from store.ranking.standing import mark as standing_mark
from store.records import (
    MESSAGE_ROLES,
    SKIPPED_ROLES,
    AddedMemory,
    Explanation,
    HistoryEvent,
    Memory,
    ReembedReport,
    RepairReport,
    ScopeCount,
    SearchHit,
    SentRole,
    Violation,
)
from store.scope import EVERY_SCOPE, Scope
from store.tokens import Tokens
from store.validation import (
    NO_EXPIRATION,
    CheckedMemory,
    check_expiration,
    check_id,
    check_metadata,
    check_offset,
    check_query,
    check_scope,
    check_text,
    check_threshold,
    check_top_k,
    normalized_hash,
    scope_keys_in,
)
from store.writes import MemoryWrite, write_memories

log = logging.getLogger(__name__)

MODEL_SLICE = 128
"""Texts a write sends through the models between two checks that its caller still waits."""


@dataclass(frozen=True)
class MemoryInput:
    """One memory to add in a batch; scope and expiry come from the call."""

    text: str
    metadata: Mapping[str, Any] | None = None
    role: str | None = None
    actor_id: str | None = None


def _scope_if_named(user_id: Any, agent_id: Any, run_id: Any) -> Scope | None:
    """The checked scope when any id is named, else ``None`` (export: every user; import: the
    records' own scopes only)."""
    if user_id is None and agent_id is None and run_id is None:
        return None
    return check_scope(user_id, agent_id, run_id)


def _unique_keys(memory: CheckedMemory) -> set[tuple[Any, ...]]:
    """What no two stored memories share: the text in its scope, and the id when one is given."""
    return {("text", memory.scope, memory.hash)} | ({("id", memory.id)} if memory.id is not None else set())


def open_backend(
    config: Config, model: str, dimension: int, *, check_model: bool = True, create: bool = True
) -> Backend:
    """The store the configuration names, ready for use, recording (or checking) the embedding
    ``model`` and its ``dimension``; ``check_model`` false only to re-embed it with another
    model, and without ``create`` a store that does not exist yet is refused, not made."""
    if config.store.database_url:
        try:
            from store.postgres import PostgresBackend  # the driver loads only when a store is opened
        except ModuleNotFoundError as exc:
            if exc.name not in ("psycopg", "psycopg_pool", "pgvector"):
                raise
            raise TrimemError(
                f"store.database_url names PostgreSQL, but its driver is not installed ({exc.name}): "
                "pip install 'trimem[postgres]'"
            ) from None
        return PostgresBackend(config.store.database_url, model, dimension, pool_size=config.store.database_pool_size,
                               check_model=check_model, create=create)
    from store.sqlite import SQLiteBackend

    return SQLiteBackend(config.database, model, dimension, check_model=check_model, create=create,
                         held_vector_bytes=config.store.vector_memory_mb << 20)


class Engine:
    """Memories of users, agents and runs, with hybrid search, over one backend.

    Thread-safe: the backend serialises writes and gives each read its own snapshot, and
    the models' work is done before a write transaction begins. Several processes may
    open the same store. A store this process cannot write is opened read-only: reads
    work, writes fail with a message.
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
        """``reembedding`` opens a store that records another embedding model than the
        configured one, for ``reembed`` alone: every other call is refused until it completes.
        Without ``create`` a store that does not exist yet is refused instead of made, so an
        engine opened only to read creates nothing."""
        self.config = config
        store = config.store
        self.embedder = embedder or open_embedder(
            store.embedding_model, store.embedding_backend,
            cache_dir=config.model_cache_dir, threads=store.inference_threads,
        )
        self.nlp = nlp or NLP(config.store.spacy_pipeline or None)
        self.backend = open_backend(
            config, self.embedder.name, self.embedder.dimension, check_model=not reembedding, create=create
        )
        # Texts embed on this thread while the NLP pipeline reads them on the caller's.
        self._side = ThreadPoolExecutor(1, thread_name_prefix="trimem-embed")
        self._names = NameVectors(self.embedder)
        # Opening never analyses stored memories again (a writable server does it in the
        # background: ``reanalysis``); a new store only records the rules its memories follow.
        self._reanalysis = Reanalysis(self.backend, self.nlp, self._names)
        if create and not reembedding and not self.backend.read_only:
            self._record_rules_if_empty()

    def _record_rules_if_empty(self) -> None:
        """``Reanalysis.record_rules_if_empty``, closing the engine if it fails (the caller gets no engine to close)."""
        try:
            self._reanalysis.record_rules_if_empty()
        except BaseException:
            self.close()
            raise

    @property
    def reanalysis(self) -> Reanalysis:
        """The pass that analyses stored memories again by the current rules
        (``store.analysis.reanalysis``): how many wait, the pass in the foreground (``doctor
        --repair``), or in the background of a server (stopped by ``close``)."""
        return self._reanalysis

    @property
    def location(self) -> str:
        """Where the memories are stored (the database file)."""
        return self.backend.location

    @property
    def read_only(self) -> bool:
        """True when the store could only be opened for reading."""
        return self.backend.read_only

    def close(self) -> None:
        """Close every database connection (reads in progress close theirs when they end)."""
        self._reanalysis.stop()  # a background pass ends its batch first
        self._side.shutdown()
        self.backend.close()

    @property
    def tokens(self) -> Tokens:
        """The store's access tokens, for ``trimem serve --auth tokens``."""
        return Tokens(self.backend)

    def _check_writable(self) -> None:
        """Refuse a write to a read-only store (or a full disk's snapshot) before the models run for it."""
        require_writable(self.backend)

    def __enter__(self) -> Self:
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
        standing: bool | None = None,
    ) -> list[AddedMemory]:
        """Remember a text, or each user/assistant message of a conversation (system messages
        are skipped), as Mem0 does with ``infer=False``. A text is marked standing
        (``store.ranking.standing``) as ``standing`` says, or, when it says nothing, when the text
        reads as a standing preference; a conversation's messages only when ``standing`` is true.
        Each memory stored now names the older memories of its scope it may make out of date
        (``AddedMemory.may_supersede``)."""
        if isinstance(content, str):
            items = [MemoryInput(content, standing_mark(content, metadata, standing))]
        else:
            items = self._messages(content, standing_mark("", metadata, standing or False))
        return self.add_many(items, user_id=user_id, agent_id=agent_id, run_id=run_id, expiration_date=expiration_date,
                             name_superseded=True)

    def _messages(self, messages: Any, metadata: Mapping[str, Any] | None) -> list[MemoryInput]:
        if not isinstance(messages, Sequence) or isinstance(messages, (bytes, bytearray)):
            raise InvalidArgument("content must be a string or a list of {role, content, name?} messages")
        if len(messages) > (most := self.config.limits.max_messages):
            raise InvalidArgument(
                f"{len(messages)} messages in one call; add takes at most {most} (limits.max_messages): send the "
                "rest in further calls"
            )
        items = []
        for index, message in enumerate(messages):
            if not isinstance(message, Mapping) or "role" not in message or "content" not in message:
                raise InvalidArgument(f"message {index} must be an object with 'role' and 'content'")
            role = message["role"]
            if role in SKIPPED_ROLES:
                continue
            if role not in MESSAGE_ROLES:
                allowed = ", ".join(repr(sent) for sent in get_args(SentRole))
                raise InvalidArgument(f"message {index} has role {shown(role)}; use one of {allowed}")
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
        name_superseded: bool = False,
    ) -> list[AddedMemory]:
        """Add several memories to one scope with one model batch and one transaction.

        A text whose normalised form is already stored in the scope (or earlier in the
        batch) is not stored twice: its result is the existing memory, event DUPLICATE.
        ``name_superseded`` (what ``add`` asks) fills each new memory's ``may_supersede``
        (``store.updates``); bulk writes leave it off, as it costs one more read per memory.
        """
        scope = check_scope(user_id, agent_id, run_id)
        expiry = check_expiration(expiration_date, clock.today())
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
        outcomes, embeddings = self._store_with_embeddings([checked[i] for i in first.values()])
        older: dict[str, list[Memory]] = {}
        if name_superseded:
            written = [(row, embeddings[j]) for j, (outcome, row) in enumerate(outcomes) if outcome == "ADD"]
            with self.backend.snapshot() as view:
                older = updates.superseded_by(view, written, clock.today())
        stored = dict(zip(first, outcomes))
        results = []
        for i, h in enumerate(hashes):
            outcome, row = stored[h]
            new = outcome == "ADD" and first[h] == i
            results.append(AddedMemory("ADD" if new else "DUPLICATE", to_memory(row), ignored[i],
                                       older.get(row.id, []) if new else []))
        return results

    def _store(
        self, memories: Sequence[CheckedMemory], *, dry_run: bool = False, gap_after_skip: bool = False
    ) -> list[tuple[str, MemoryRow | None]]:
        """Write checked memories with one model batch and one transaction, in the order given
        (keys follow it): the one write path of ``add_many``, ``import_memories`` and ``restore``.

        A memory is skipped when its id is taken (``SAME_ID``, with no row) or its normalised text
        is stored in its scope (``DUPLICATE``, with that row); else ``ADD`` with the new row.
        ``dry_run`` only looks. Each memory gets an ADD event, or the events it brings. With
        ``gap_after_skip`` a memory written after a skipped one is kept apart from the one
        before (``gap_before``), as the skipped one stood between them.
        """
        return self._store_with_embeddings(memories, dry_run=dry_run, gap_after_skip=gap_after_skip)[0]

    def _store_with_embeddings(
        self, memories: Sequence[CheckedMemory], *, dry_run: bool = False, gap_after_skip: bool = False
    ) -> tuple[list[tuple[str, MemoryRow | None]], dict[int, np.ndarray]]:
        """``_store``, and the embedding of each memory it ran the models for, by its place in
        ``memories``: ``add`` finds the older memories nearest to the new ones with them, without
        embedding the texts twice."""

        def stored(view: Snapshot, memory: CheckedMemory) -> tuple[str, MemoryRow | None] | None:
            if memory.id is not None and view.id_taken(memory.id, by_history=not memory.reclaims_id):
                return "SAME_ID", None
            twin = view.find_by_hash(memory.scope, memory.hash)
            return None if twin is None else ("DUPLICATE", twin)

        with self.backend.snapshot() as view:
            outcomes = [stored(view, memory) for memory in memories]
        fresh = [i for i, outcome in enumerate(outcomes) if outcome is None]
        if dry_run:
            return [outcome or ("ADD", None) for outcome in outcomes], {}
        cancellation.checkpoint()
        analyses, embeddings, entity_vectors = self._analyse_and_embed([memories[i].text for i in fresh])
        modelled = dict(zip(fresh, zip(analyses, embeddings)))
        stamp = clock.now()
        cancellation.checkpoint()

        def write(txn: Transaction) -> list[tuple[str, MemoryRow | None]]:
            written = list(outcomes)  # each attempt starts from what the snapshot found
            pending: dict[int, MemoryWrite] = {}
            pending_keys: set[tuple[Any, ...]] = set()  # the ``_unique_keys`` of the pending memories

            def write_pending() -> None:
                write_memories(txn, list(pending.values()), entity_vectors)
                for j in pending:
                    written[j] = ("ADD", txn.find_by_hash(memories[j].scope, memories[j].hash))
                pending.clear()
                pending_keys.clear()

            skipped = False  # the memory before this one was not written, so this one is no neighbour of the last
            for i, item in enumerate(memories):
                if i not in modelled:
                    skipped = True
                    continue
                if _unique_keys(item) & pending_keys:
                    write_pending()  # so that ``stored`` finds the twin written before it
                if outcome := stored(txn, item):
                    written[i], skipped = outcome, True  # another process stored it since we looked
                    continue
                analysis, embedding = modelled[i]
                created_at = item.created_at or stamp
                memory = NewMemory(
                    id=item.id or str(uuid.uuid4()), text=item.text, text_lemmatized=analysis.lemmatized,
                    hash=item.hash, scope=item.scope, actor_id=item.actor_id, role=item.role,
                    metadata=item.metadata, created_at=created_at, updated_at=item.updated_at or created_at,
                    expiration_date=item.expiration_date, embedding=embedding,
                    gap_before=item.gap_before or (gap_after_skip and skipped), analysis_degraded=analysis.degraded,
                )
                skipped = False
                added = HistoryEvent(memory.id, "ADD", None, item.text, None, item.metadata, created_at)
                pending[i] = MemoryWrite(memory, analysis.entities, item.history or [added])
                pending_keys.update(_unique_keys(item))
            write_pending()
            return written

        return retries.transact(self.backend, write), dict(zip(fresh, embeddings))

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
        new_expiration = None if clear_expiration else check_expiration(expiration_date, clock.today())
        if misplaced := scope_keys_in(metadata):
            raise InvalidArgument(
                f"metadata holds the scope key(s) {', '.join(misplaced)}; update never moves a memory to another "
                "scope: drop them (to move a memory, add it in the new scope and delete the old one)"
            )
        self._check_writable()
        new_text = None if text is None else check_text(text, self.config.limits.max_text_chars)
        new_metadata = None if metadata is None else check_metadata(metadata, self.config.limits.max_metadata_bytes)
        with self.backend.snapshot() as view:
            row = ids.get_row(view, memory_id, scope)
        analysis: Analysis | None = None
        if new_text is not None and new_text != row.text:
            (analysis,), (embedding,), entity_vectors = self._analyse_and_embed([new_text])
        stamp = clock.now()

        def write(txn: Transaction) -> Memory:
            row = ids.get_row(txn, memory_id, scope)  # it may have changed while the models ran
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
                twin = txn.find_by_hash(row.scope, final_hash)
                if twin is not None and twin.rowid != row.rowid:
                    raise InvalidArgument(
                        f"that text is already stored as memory {shown(twin.id)}; delete one of them instead"
                    )
                txn.rewrite_text(
                    row.rowid, text=final_text, text_lemmatized=analysis.lemmatized, text_hash=final_hash,
                    embedding=embedding, scope=row.scope, updated_at=stamp,
                )
                txn.set_analysis_degraded(row.rowid, row.scope, analysis.degraded)
                txn.unlink_entities(row.rowid, row.scope)
                link_entities(txn, row.rowid, row.scope, analysis.entities, entity_vectors)
                txn.delete_orphan_entities()
            txn.set_metadata(row.rowid, row.scope, final_metadata, stamp)
            if clear_expiration or new_expiration is not None:
                txn.set_expiration(row.rowid, row.scope, new_expiration, stamp)
            txn.add_history([(row.id, row.scope, HistoryEvent(
                row.id, "UPDATE", row.text, final_text, row.metadata, final_metadata, stamp))])
            return to_memory(ids.get_row(txn, memory_id, scope))

        return retries.transact(self.backend, write)

    def delete(
        self, memory_id: str, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
    ) -> Memory:
        """Forget one memory: its vector, keyword row and entity links go with it."""
        scope = check_scope(user_id, agent_id, run_id)
        self._check_writable()

        def write(txn: Transaction) -> MemoryRow:
            row = ids.get_row(txn, memory_id, scope)
            self._delete_row(txn, row)
            txn.delete_orphan_entities()
            return row

        return to_memory(retries.transact(self.backend, write))

    def delete_all(self, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None) -> int:
        """Forget every memory in a scope; returns how many."""
        scope = check_scope(user_id, agent_id, run_id)
        self._check_writable()

        def write(txn: Transaction) -> int:
            rowids = txn.scope_rowids(scope)
            for row in txn.memories_by_rowid(rowids, scope).values():
                self._delete_row(txn, row)
            txn.delete_orphan_entities()
            return len(rowids)

        return retries.transact(self.backend, write)

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
        with self.backend.snapshot() as view:
            full_id = memory_id if view.history(memory_id, scope) else ids.full_id(view, "history", memory_id, scope)
            deleted = view.last_deletion(full_id, scope)
        if deleted is None:
            raise NotFound(f"no history for memory {shown(memory_id)} in this scope, so nothing to restore")
        if isinstance(deleted, str):
            raise InvalidArgument(f"memory {shown(full_id)} is not deleted (its last change was {deleted}); "
                                  "nothing to restore")
        stamp = clock.now()
        restored = HistoryEvent(full_id, "RESTORE", None, deleted.text, None, deleted.metadata, stamp)
        ((outcome, row),) = self._store([CheckedMemory(
            deleted.text, deleted.scope, deleted.metadata, id=full_id, created_at=deleted.created_at,
            updated_at=stamp, history=(restored,), reclaims_id=True,
        )])
        if outcome == "ADD":
            return to_memory(row)
        if outcome == "DUPLICATE":
            raise InvalidArgument(f"the same text is stored again as memory {shown(row.id)}; that one stands in for it")
        with self.backend.snapshot() as view:
            holder = view.get_memory(full_id, EVERY_SCOPE)  # ids are unique in the file
        if holder is not None and holder.scope == deleted.scope:
            raise InvalidArgument(f"memory {shown(full_id)} was restored already")
        raise InvalidArgument(
            f"memory {shown(full_id)} cannot be restored: its id now belongs to a memory of another scope. "
            "Its text is in its history; add it again to keep it under a new id"
        )

    @staticmethod
    def _delete_row(txn: Transaction, row: MemoryRow) -> None:
        """Delete one row and record it; the caller removes orphaned entities once afterwards."""
        txn.delete_memory(row.rowid, row.scope)
        txn.add_history([(row.id, row.scope, HistoryEvent(
            row.id, "DELETE", row.text, None, row.metadata, None, clock.now()))])

    def _analyse_and_embed(self, texts: list[str]) -> tuple[list[Analysis], np.ndarray, dict[str, np.ndarray]]:
        """Analyse texts with the NLP pipeline while they embed on the side thread (ONNX Runtime
        releases the GIL, so both cores work), then embed their distinct entities in one batch.

        Texts go ``MODEL_SLICE`` at a time, and the caller is checked between slices
        (``cancellation``): a large write whose caller is gone stops within one slice.
        """
        analyses: list[Analysis] = []
        vectors: list[np.ndarray] = []
        for start in range(0, len(texts), MODEL_SLICE):
            if start:
                cancellation.checkpoint()
            part = texts[start : start + MODEL_SLICE]
            part_vectors = self._side.submit(self.embedder.embed_batch, part)
            analyses += self.nlp.analyze_batch(part)
            vectors.append(part_vectors.result())
        names = list(dict.fromkeys(e.normalized for a in analyses for e in a.entities))
        text_vectors = np.concatenate(vectors) if vectors else self.embedder.embed_batch([])
        return analyses, text_vectors, dict(zip(names, self._names.embed(names)))

    # --- reads --------------------------------------------------------------------------

    def get(
        self, memory_id: str, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
    ) -> Memory:
        """One memory by id (or a prefix of it, at least 4 characters, that no other id in the scope
        shares), if it belongs to the caller's scope. A shorter or shared prefix is refused with
        the ids in the scope that start with it, and the start of their texts."""
        scope = check_scope(user_id, agent_id, run_id)
        with self.backend.snapshot() as view:
            return to_memory(ids.get_row(view, memory_id, scope))

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
        parsed = parse_filters(filters)
        today = None if show_expired else clock.today()
        with self.backend.snapshot() as view:
            rows = view.list_memories(scope, parsed, today, limit, offset)
        return [to_memory(row) for row in rows]

    def entities(
        self, memory_id: str, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
    ) -> list[str]:
        """The names of the entities linked to one memory (normalised, as search matches them)."""
        scope = check_scope(user_id, agent_id, run_id)
        with self.backend.snapshot() as view:
            row = ids.get_row(view, memory_id, scope)
            return view.memory_entity_names(row.rowid, row.scope)

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
        with self.backend.snapshot() as view:
            return [to_memory(row) for row in view.memories_with_entity(name, scope, limit)]

    def history(
        self, memory_id: str, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
    ) -> list[HistoryEvent]:
        """A memory's ADD / UPDATE / DELETE / RESTORE events, oldest first (kept after deletion)."""
        scope = check_scope(user_id, agent_id, run_id)
        memory_id = check_id(memory_id, "memory_id")
        with self.backend.snapshot() as view:
            events = view.history(memory_id, scope) or view.history(
                ids.full_id(view, "history", memory_id, scope), scope
            )
        if not events:
            raise NotFound(f"no history for memory {shown(memory_id)} in this scope")
        return events

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
        min_score: float | None = None,
    ) -> list[SearchHit]:
        """Memories ranked by the fusion of meaning, keywords and entities; with ``explain``,
        each hit carries every part of its score. ``min_score`` replaces ``search.min_score``
        for this call (Claude Code's hooks ask more of what they inject unasked)."""
        return self.explain(
            query, user_id=user_id, agent_id=agent_id, run_id=run_id, top_k=top_k, threshold=threshold,
            filters=filters, show_expired=show_expired, details=explain, min_score=min_score,
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
        min_score: float | None = None,
    ) -> Explanation:
        """The search, with the query analysis, every score part and the dropped candidates.

        ``use_bm25`` / ``use_entities`` switch a signal on or off for this call only (``None``:
        as configured), so a ranking can be compared with and without it."""
        switches = {"use_bm25": use_bm25, "use_entities": use_entities}
        options = replace(
            self.config.search, **{name: bool(value) for name, value in switches.items() if value is not None}
        )
        if min_score is not None:
            options = replace(options, min_score=check_threshold(min_score, "min_score", options.min_score))
        scope = check_scope(user_id, agent_id, run_id)
        query = check_query(query, self.config.limits.max_text_chars)
        request = retrieval.SearchRequest(
            scope=scope,
            top_k=check_top_k(options.top_k if top_k is None else top_k, self.config.limits.max_top_k),
            threshold=check_threshold(options.threshold if threshold is None else threshold),
            filters=parse_filters(filters),
            show_expired=bool(show_expired),
            options=options,
            own_threshold=threshold is not None,
        )
        prepared = retrieval.prepare(query, self.nlp, self.embedder, self._names, options, self._side)
        with self.backend.snapshot() as view:
            return retrieval.run(view, prepared, request, explain=details)

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
        """Every memory as JSON Lines after a header line (``store/exchange/transfer.py``), read from one
        snapshot and yielded line by line, never all held at once; the scope ids and ``filters``
        narrow it (naming none exports every user's), ``history`` adds each memory's events.
        Expired memories are included; vectors never are (an import derives its own)."""
        scope = _scope_if_named(user_id, agent_id, run_id) or EVERY_SCOPE
        parsed = parse_filters(filters)  # checked now, not at the first line read

        def lines() -> Iterator[str]:
            with self.backend.snapshot() as view:
                yield from transfer.export_lines(
                    view, scope, filters, parsed, history=history, model=self.embedder.name,
                    dimension=self.embedder.dimension, at=clock.now(),
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
        ``store/exchange/peers.py``): every memory re-embedded and re-linked with this engine's models,
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
        """Every broken invariant of the store (orphans, missing vectors or keyword rows, …);
        ``deep`` also runs the NLP pipeline to find memories missing their entity links."""
        return admin.check(self.backend, self.nlp, deep=deep)

    @property
    def capabilities(self) -> frozenset[Capability]:
        """What this store can do beyond reading and writing (``store.backend.CAPABILITIES``), so
        a front end offers only that (``doctor`` suggests ``--repair`` only where it exists)."""
        return self.backend.capabilities

    def file_warnings(self) -> list[str]:
        """The store's files and folder that group or others may read or write, one line each
        with the ``chmod`` that closes it (``store.files``): ``doctor --check`` warns about them
        without counting them as problems. A store kept by a server (PostgreSQL) has no files
        here and refuses this (``Unsupported``)."""
        return admin.file_warnings(self.backend)

    def repair(self) -> RepairReport:
        """Rebuild derived rows (vectors, keyword rows, entity links) from the memories."""
        return admin.repair(self.backend, self.embedder, self.nlp)

    def reembed(self, *, progress: Progress | None = None) -> ReembedReport:
        """Re-embed every memory and entity with this engine's model and make it the store's
        model; open the engine with ``reembedding=True`` and the new model in its configuration.

        Resumable: an interrupted run keeps its committed chunks, and until the final switch
        every other process keeps using the old index. ``progress(done, total)`` is called
        after each chunk. Refused when the store already uses the model.
        """
        return admin.reembed(self.backend, self.embedder, progress)

    def backup(self, destination: Path) -> None:
        """Copy the store with an online backup: safe while other servers write."""
        admin.backup(self.backend, destination)

    def users(self) -> list[ScopeCount]:
        """Every user, agent and run scope that holds memories, with counts (expired ones too)."""
        return admin.users(self.backend)

    def stats(self) -> dict[str, Any]:
        """Memories and expired ones, in all and per user; the store's size; the models."""
        return admin.stats(self.backend, self.embedder)

    def status(self) -> dict[str, Any]:
        """Versions, models, where the store is and row counts (``trimem doctor``)."""
        return admin.status(self.backend, self.embedder, self.nlp)
