"""The storage seam: what the engine asks of a database, in trimem's own terms.

A backend gives a read **snapshot** (several reads that see one state of the store) and a
write **transaction** (all of one write or none of it). A transaction can do everything a
snapshot can, plus the writes. Both speak of memories, entities, links, history and the
three retrieval signals, never of tables or SQL: scopes are ``store.scope.Scope`` and
metadata filters the parsed ``store.filters.Filter``, which each backend compiles itself.

A memory's ``rowid`` is its key in the order memories were stored: the memory stored just
before another has the key one lower, unless a key was left free between them
(``NewMemory.gap_before``) or a memory of another scope took it. Keyword context reads
neighbours by it (``adjacent_memories``).

Capabilities that not every backend can offer (``CAPABILITIES``) are declared in
``Backend.capabilities``; the engine refuses a call that needs a missing one before it
starts, with ``Unsupported``, so nothing fails half-way.

SQLite, the default, lives in ``store.sqlite``; the engine opens the one the configuration names.
Nothing here, in retrieval, linking, transfer or scoring imports a database driver.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

from store.errors import TrimemError
from store.records import HistoryEvent, Memory, ReembedReport, RepairReport, Violation
from store.scope import Scope

if TYPE_CHECKING:
    import numpy as np

    from store.analysis.embeddings import Embedder
    from store.analysis.nlp import NLP
    from store.filters import Filter

Capability = Literal["check", "deep_check", "repair", "reembed", "backup", "file_modes"]
CAPABILITIES: tuple[Capability, ...] = ("check", "deep_check", "repair", "reembed", "backup", "file_modes")
"""What a backend may lack: a consistency check, one that also runs the entity analysis again
(``--deep``), repair of derived rows, re-embedding with another model in place, an online copy
to a file, and files on this machine whose permissions ``doctor --check`` reads."""

WAYS_AROUND: dict[Capability, str] = {
    "check": "this database has no consistency check",
    "deep_check": "this database's check cannot run the entity analysis again to find memories missing their "
                  "entity links; `trimem doctor --check` without --deep checks its schema, indexes, keyword postings "
                  "and links",
    "repair": "this database cannot rebuild derived rows; export its memories and import them into a new one",
    "reembed": "this database cannot be re-embedded in place; export its memories and import them into a new "
               "database configured with the new model",
    "backup": "copy it with the database's own tools (for PostgreSQL, pg_dump: docs/postgres.md)",
    "file_modes": "this database is kept by its server, not in files here; the server's roles and settings say "
                  "who may read it",
}
"""What a person can do instead when a backend lacks a capability."""

Progress = Callable[[int, int], None]
"""Called after each committed chunk of long work with (done so far, to do in all)."""


class Unsupported(TrimemError):
    """A call needs a capability this backend does not offer; nothing was done."""


# --- rows -------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryRow:
    """One stored memory (scope ids are '' when unset)."""

    rowid: int
    id: str
    text: str
    hash: str
    user_id: str
    agent_id: str
    run_id: str
    actor_id: str | None
    role: str | None
    metadata: dict[str, Any]
    created_at: str
    updated_at: str
    expiration_date: str | None

    @property
    def scope(self) -> Scope:
        """The scope the memory is filed under, where its derived rows belong too."""
        return Scope(self.user_id, self.agent_id, self.run_id)


@dataclass(frozen=True)
class NewMemory:
    """Everything one insert needs, computed before the transaction starts."""

    id: str
    text: str
    text_lemmatized: str
    hash: str
    scope: Scope
    actor_id: str | None
    role: str | None
    metadata: dict[str, Any]
    created_at: str
    updated_at: str
    expiration_date: str | None
    embedding: np.ndarray
    gap_before: bool = False
    """Leave one key free before it, so it is no neighbour (``adjacent_memories``) of the
    memory stored just before: an import keeps apart memories that were apart."""
    analysis_degraded: bool = False
    """The language model failed on the text (``Analysis.degraded``): store the mark, so the
    memory is counted by the check and analysed again (``Snapshot.degraded_memories``)."""


@dataclass(frozen=True)
class NewEntity:
    """An entity to create, filed under exactly ``scope``."""

    scope: Scope
    text: str
    normalized: str
    entity_type: str
    embedding: np.ndarray


def to_memory(row: MemoryRow) -> Memory:
    """The public view of a stored row ('' scope ids become ``None``)."""
    return Memory(
        id=row.id, text=row.text, user_id=row.user_id or None, agent_id=row.agent_id or None,
        run_id=row.run_id or None, actor_id=row.actor_id, role=row.role, metadata=row.metadata,
        created_at=row.created_at, updated_at=row.updated_at, expiration_date=row.expiration_date,
    )


class IdCandidate(NamedTuple):
    """A memory id that starts with a given prefix, with its text to recognise it by."""

    id: str
    text: str


class Neighbourhood(NamedTuple):
    """What learned fusion reads around its candidates (``Snapshot.neighbourhood``)."""

    adjacent: dict[int, list[int]]
    """Each candidate's neighbours, as ``Snapshot.adjacent_memories`` gives them (one place away)."""
    distances: dict[int, float]
    """The query's cosine distance to each neighbour whose distance the caller did not know."""
    asks: set[int]
    """The candidates that ask a question (``Snapshot.questions_among``)."""
    texts: dict[int, str]
    """The texts of the candidates and their neighbours."""


class DeletedMemory(NamedTuple):
    """What history keeps of a deleted memory: enough to bring it back."""

    id: str
    text: str
    metadata: dict[str, Any]
    scope: Scope
    created_at: str


@dataclass(frozen=True)
class TokenRow:
    """One access token as stored: never its secret, only the secret's SHA-256 (hex)."""

    name: str
    prefix: str
    """The token's first characters (``tm_`` and 8 more), shown so a person can tell tokens apart."""
    hash: str
    user_id: str
    agent_id: str
    run_id: str
    """The scope the token acts within ('' for an id it leaves open)."""
    admin: bool
    """True: acts on any scope (operators)."""
    created_at: str
    expires_on: str | None
    """The last UTC day the token is accepted; ``None``: until revoked."""
    last_used_at: str | None
    sessions_cleared_at: str | None
    """When ``trimem token clear-sessions`` last ended the token's sessions; each server ends those
    opened before it on the token's next request (``None``: never)."""


IdSource = Literal["memories", "history"]
"""Where an id prefix is looked up: stored memories, or every id history keeps (deleted ones too)."""


def keys_around(rowids: Sequence[int], reach: int = 1) -> list[int]:
    """The keys of these memories and of the neighbours they would have within ``reach``
    places (``adjacent_memories``)."""
    return sorted({rowid + step for rowid in rowids for step in range(-reach, reach + 1)})


def neighbours(
    rowids: Sequence[int], stored: Mapping[int, str], within_seconds: float, reach: int = 1
) -> dict[int, list[int]]:
    """Each memory's neighbours among the keys ``stored`` (those of ``keys_around`` that are
    stored, within the scope and passing the filters, with their ``created_at``): the memories
    stored up to ``reach`` places before and after it, nearest first, and, with
    ``within_seconds`` > 0, no more than that many seconds apart from it."""

    moments = {key: dt.datetime.fromisoformat(stamp) for key, stamp in stored.items()} if within_seconds > 0 else {}

    def close(rowid: int, other: int) -> bool:
        return within_seconds <= 0 or abs((moments[other] - moments[rowid]).total_seconds()) <= within_seconds

    around = [step for distance in range(1, reach + 1) for step in (-distance, distance)]
    return {
        rowid: [
            rowid + step for step in around if rowid in stored and rowid + step in stored and close(rowid, rowid + step)
        ]
        for rowid in rowids
    }


# --- the interface --------------------------------------------------------------------------


class Snapshot(Protocol):
    """Reads that all see one state of the store. ``filters`` is a parsed metadata filter
    (``None``: none); ``on`` a UTC day before which expired memories are left out (``None``:
    keep them). A call that names rows by key also takes the ``scope`` they lie within (a
    write, the row's own scope), so a backend that keeps users apart touches only that user's
    rows (``docs/postgres.md``)."""

    # memories
    def get_memory(self, memory_id: str, scope: Scope) -> MemoryRow | None:
        """A memory by id, only if it is within ``scope``."""
    def find_by_hash(self, scope: Scope, text_hash: str) -> MemoryRow | None:
        """The memory with this normalised-text hash filed under exactly ``scope``."""
    def id_taken(self, memory_id: str, *, by_history: bool = True) -> bool:
        """Whether a memory of any scope has this id, or (``by_history``) had it before a delete."""
    def ids_with_prefix(
        self, source: IdSource, prefix: str, scope: Scope, limit: int
    ) -> tuple[list[IdCandidate], int]:
        """The first ``limit`` ids within ``scope`` that start with ``prefix`` (literally), with
        their latest text, and how many there are in all."""
    def memories_by_rowid(self, rowids: Sequence[int], scope: Scope) -> dict[int, MemoryRow]:
        """Rows by key (missing ones skipped)."""
    def texts_by_rowid(self, rowids: Sequence[int], scope: Scope) -> dict[int, str]:
        """Texts by key (missing ones skipped), without the rest of each row: what the shared
        ``neighbourhood`` reads of ranked candidates and their neighbours."""
    def list_memories(
        self, scope: Scope, filters: Filter | None, on: str | None, limit: int, offset: int
    ) -> list[MemoryRow]:
        """A page of the scope's memories, newest first."""
    def memories_with_entity(self, normalized: str, scope: Scope, limit: int) -> list[MemoryRow]:
        """The scope's memories linked to an entity of this normalised name, newest first."""
    def memory_entity_names(self, rowid: int, scope: Scope) -> list[str]:
        """The normalised names of the entities linked to one memory, alphabetically."""
    def scope_rowids(self, scope: Scope) -> list[int]:
        """Every memory key within ``scope``."""
    def history(self, memory_id: str, scope: Scope) -> list[HistoryEvent]:
        """A memory's events within ``scope``, oldest first (kept after a delete)."""
    def last_deletion(self, memory_id: str, scope: Scope) -> DeletedMemory | str | None:
        """The memory as its latest event, a DELETE, left it; that event's kind when it is not
        a DELETE; ``None`` without history."""
    def scope_counts(self, on: str) -> list[tuple[Scope, int, int]]:
        """Every scope holding memories, with its memories and those expired before ``on``."""
    def counts(self) -> dict[str, int]:
        """How many memories, vectors, entities, links and history events are stored."""
    def export_counts(self, scope: Scope, filters: Filter | None) -> tuple[int, int]:
        """How many memories ``export_memories`` yields, and how many history events they have."""
    def export_memories(self, scope: Scope, filters: Filter | None) -> Iterator[MemoryRow]:
        """The scope's memories that pass ``filters`` (expired ones too), in key order, one by one."""
    def analysis_version(self) -> int:
        """The version of the text analysis (``store.analysis.reanalysis.ANALYSIS_VERSION``) the stored terms
        and entity links were made with; 1 for stores made before it was recorded."""
    def reanalysis_cursor(self) -> tuple[int, int] | None:
        """Where a pass analysing the stored memories again stopped (``store.analysis.reanalysis``):
        the analysis version it brings them to and the key of the last memory it rewrote; ``None``
        when no pass is under way."""
    def memories_after(self, rowid: int, limit: int) -> list[MemoryRow]:
        """The next ``limit`` memories (of every scope) after key ``rowid``, in key order."""
    def count_memories_after(self, rowid: int) -> int:
        """How many memories (of every scope) have a key after ``rowid``."""
    def degraded_memories(self) -> list[MemoryRow]:
        """Every memory marked ``analysis_degraded`` (of every scope), in key order: the language
        model failed on its text, so it holds the plain rule's terms and no entity links."""

    # retrieval signals
    def knn_memories(
        self, embedding: np.ndarray, scope: Scope, limit: int, filters: Filter | None, on: str | None
    ) -> list[tuple[int, float]]:
        """The ``limit`` nearest memories within the scope that pass the filters and have not
        expired, as (key, cosine distance), nearest first: exactly those, never fewer because
        others were filtered out."""
    def distances_for(self, embedding: np.ndarray, rowids: Sequence[int], scope: Scope) -> list[tuple[int, float]]:
        """Exact cosine distances for chosen memories."""
    def first_signals(
        self, embedding: Callable[[], np.ndarray], terms: Sequence[str], scope: Scope, limit: int,
        filters: Filter | None, on: str | None,
    ) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
        """``knn_memories`` and ``bm25_memories`` (none for no ``terms``), which a backend may read
        side by side. ``embedding()`` gives the query's embedding, which may still be computing:
        the keyword read needs none, so it is under way before the KNN waits for it."""
    def bm25_memories(
        self, terms: Sequence[str], scope: Scope, limit: int, filters: Filter | None, on: str | None
    ) -> list[tuple[int, float]]:
        """Keyword hits as (key, raw BM25 ≥ 0), best first: FTS5's formula over the memories of the
        scope's user (of every user when it names none; ``store.sql.keywords``), so no other user's
        memories move a score."""
    def knn_entities(
        self, embeddings: np.ndarray, scope: Scope, limit: int, within: float
    ) -> list[list[tuple[int, str, float]]]:
        """For each of ``embeddings`` (one a row), of the ``limit`` entities within the scope nearest
        to it, the nearest and every other at most ``within`` away, as (entity id, text, cosine
        distance), nearest first: entity matching reads no further."""
    def entities_holding(self, names: Sequence[str], scope: Scope) -> list[bool]:
        """For each of ``names`` (normalised), whether an entity of the scope holds all its words
        ("atlas" in "project atlas": ``store.sql.dialect.Dialect.holds_words_sql``)."""
    def words_written(self, words: Sequence[str], scope: Scope) -> list[bool]:
        """For each of ``words`` (folded terms), whether a memory of the scope holds it, or a
        longer word starting with it ("postgres" in "postgresql"), by the keyword index."""
    def entity_links(
        self, entity_ids: Sequence[int], scope: Scope, filters: Filter | None, on: str | None,
        memory_rowids: Sequence[int] | None = None,
    ) -> tuple[dict[int, int], list[tuple[int, int]], bool]:
        """For matched entities: how many memories each links to (all of them), the (entity,
        memory) links to live memories passing the filters (among ``memory_rowids`` when
        given), and whether any such link exists at all."""
    def scope_count(self, scope: Scope) -> int:
        """How many memories are within the scope."""
    def adjacent_memories(
        self, rowids: Sequence[int], scope: Scope, filters: Filter | None, on: str | None,
        within_seconds: float = 0, reach: int = 1,
    ) -> dict[int, list[int]]:
        """For each memory, its neighbours (key ± 1 … ± ``reach``, nearest first) within the
        scope that pass the filters and, with ``within_seconds`` > 0, were stored no more than
        that many seconds apart from it."""
    def questions_among(self, rowids: Sequence[int], scope: Scope) -> set[int]:
        """The memories among ``rowids`` whose text ends with a question mark."""
    def neighbourhood(
        self, rowids: Sequence[int], embedding: np.ndarray, known: Container[int], scope: Scope,
        filters: Filter | None, on: str | None,
    ) -> Neighbourhood:
        """For ranked candidates: their neighbours one place away (``adjacent_memories``), the
        query's distance to those not ``known``, which candidates ask, and every text of them,
        which a backend may read at once."""

    # entities, as linking reads them
    def find_entities(self, names: Sequence[tuple[Scope, str]]) -> dict[tuple[Scope, str], int]:
        """The id of each entity filed under exactly the scope with the normalised text, as
        (scope, normalised text) pairs; those not stored are left out."""
    def nearest_entities(self, queries: Sequence[tuple[Scope, np.ndarray]]) -> list[tuple[int, float] | None]:
        """For each (scope, embedding), the closest entity filed under exactly that scope and its
        cosine distance (the lower id of two as close), or ``None`` when the scope has none."""

    # access tokens (not per-user data: one table for the whole store)
    def token_by_hash(self, token_hash: str) -> TokenRow | None:
        """The token whose secret hashes to ``token_hash``."""
    def list_tokens(self) -> list[TokenRow]:
        """Every token, oldest first."""


class Transaction(Snapshot, Protocol):
    """A snapshot that can also write; everything it writes is committed together or not at all.

    The memories it reads by id or key (``get_memory``, ``memories_by_rowid``) are what it
    decides its writes from (an update merges into the stored metadata), so no other write
    changes them until it commits: SQLite admits one writer at a time, PostgreSQL locks the
    rows read. Two concurrent updates of one memory therefore both count."""

    def insert_memories(self, memories: Sequence[NewMemory]) -> list[int]:
        """Store memories, each with its vector and keyword postings, keyed in the order given (a
        memory ``gap_before`` is kept apart from the one before); return their keys. PostgreSQL
        sends them with COPY."""
    def rewrite_text(
        self, rowid: int, *, text: str, text_lemmatized: str, text_hash: str, embedding: np.ndarray,
        scope: Scope, updated_at: str,
    ) -> None:
        """Replace a memory's text, its keyword row and its vector."""
    def set_terms(self, rowid: int, scope: Scope, text_lemmatized: str) -> None:
        """Replace a memory's keyword terms (its text unchanged), and its keyword row with them."""
    def set_analysis_version(self, version: int) -> None:
        """Record the text analysis version the stored terms and links now follow."""
    def set_reanalysis_cursor(self, cursor: tuple[int, int] | None) -> None:
        """Record how far a pass analysing the stored memories again got (``reanalysis_cursor``),
        or clear it (``None``) once it has ended."""
    def set_analysis_degraded(self, rowid: int, scope: Scope, degraded: bool) -> None:
        """Mark a memory's analysis as degraded (``NewMemory.analysis_degraded``), or clear the mark."""
    def set_metadata(self, rowid: int, scope: Scope, metadata: dict[str, Any], updated_at: str) -> None:
        """Replace a memory's metadata."""
    def set_expiration(self, rowid: int, scope: Scope, expiration_date: str | None, updated_at: str) -> None:
        """Set or clear (``None``) a memory's expiration date."""
    def delete_memory(self, rowid: int, scope: Scope) -> None:
        """Delete a memory with its vector, keyword row and links (its entities may be left orphaned)."""
    def add_history(self, events: Sequence[tuple[str, Scope, HistoryEvent]]) -> None:
        """Record events as (memory id, the memory's scope, event), in the order given, each filed
        under the memory's scope."""
    def insert_entities(self, entities: Sequence[NewEntity]) -> list[int]:
        """Create entities with their vectors, ids in the order given; an entity another writer
        has just created under the same scope and name is that one."""
    def insert_links(self, links: Sequence[tuple[int, int, Scope]]) -> None:
        """Link memories to entities, as (memory key, entity id, the memory's scope); a link that
        exists already is left as it is."""
    def unlink_entities(self, rowid: int, scope: Scope) -> None:
        """Drop a memory's entity links."""
    def delete_orphan_entities(self) -> None:
        """Remove the entities no memory links to any more, once per write."""
    def insert_token(self, token: TokenRow) -> None:
        """Store a new token (its name and hash are unique)."""
    def delete_token(self, name: str) -> None:
        """Remove a token: from the next request on, it is refused."""
    def touch_token(self, name: str, used_at: str) -> None:
        """Record when a token was last used."""
    def clear_token_sessions(self, name: str, cleared_at: str) -> None:
        """Record that the token's sessions opened before ``cleared_at`` are to end."""


class Backend(Protocol):
    """One store: its sessions, what it can do, and the optional capabilities' work. A
    capability's method (``check``, ``repair``, ``reembed``, ``backup``, ``file_warnings``) is
    there only when ``capabilities`` names it (``check`` is given an ``NLP`` only with
    ``deep_check``); ``require`` refuses the others before anything starts."""

    location: str
    """Where the data lives, as a person would name it (a file path, a server and database)."""
    capabilities: frozenset[Capability]
    read_only: bool
    """True when writes are refused (``refuse_write`` says why)."""

    def snapshot(self) -> AbstractContextManager[Snapshot]: ...
    def transaction(self) -> AbstractContextManager[Transaction]: ...
    def refuse_write(self) -> TrimemError:
        """The error a write meets on a read-only store."""
    def close(self) -> None: ...
    def status(self) -> dict[str, Any]:
        """Versions of the database and its extensions, the model recorded, and row counts."""
    def size_bytes(self) -> int:
        """The space the store takes."""
    def check(self, nlp: NLP | None) -> list[Violation]: ...
    def repair(self, embedder: Embedder, nlp: NLP) -> RepairReport: ...
    def reembed(self, embedder: Embedder, progress: Progress | None) -> ReembedReport: ...
    def backup(self, destination: Path) -> None: ...
    def file_warnings(self) -> list[str]:
        """The store's files and folder that group or others may read or write, each as one
        line naming it and the ``chmod`` that closes it."""


def require(backend: Backend, capability: Capability, doing: str) -> None:
    """Refuse ``doing`` up front when the backend lacks ``capability``."""
    if capability not in backend.capabilities:
        raise Unsupported(f"{doing} is not available on {backend.location}: {WAYS_AROUND[capability]}")



def require_writable(backend: Backend) -> None:
    """Refuse a write to a read-only store (or a full disk's snapshot) before any model runs for it."""
    if backend.read_only:
        raise backend.refuse_write()
