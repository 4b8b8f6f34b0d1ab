"""Database upkeep: consistency check, repair of derived rows, online backup.

Only ``memories`` holds facts; everything else is derived from it: the vector, the
keyword postings and the entity links of each memory, each user's keyword statistics, and
the entities with their vectors.
``check`` names every row that breaks an invariant between them, ``repair`` rebuilds
the derived rows from ``memories`` (it never deletes a memory), and ``backup`` copies
the file with SQLite's online backup while other processes keep writing. The invariants
are queries of ``store.sqlite.probes``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import apsw
import numpy as np

from store import files
from store.analysis.embeddings import Embedder
from store.analysis.linking import link_entities
from store.analysis.nlp import NLP, Analysis
from store.backend import MemoryRow
from store.errors import DiskFull, InvalidArgument, TrimemError, unwritable
from store.records import RepairReport, Violation
from store.scope import EVERY_SCOPE

from . import connection, keywords, probes, schema
from .statements import SQLiteSnapshot, SQLiteTransaction

_CHUNK = 500
"""Rowids per ``IN (…)`` read, well under SQLite's bound-parameter limit."""
KEYWORD_PROBES = ("terms_without_memory", "terms_scope", "keyword_users")
"""The invariants of the keyword index whose breach ``repair`` answers with ``keywords.rebuild``."""


# --- check ----------------------------------------------------------------------------


def check(conn: apsw.Connection, nlp: NLP | None = None) -> list[Violation]:
    """Every broken invariant, one ``Violation`` per offending row; empty when healthy.

    Checks SQLite's page and index structure, then that each memory has exactly one
    vector and the keyword postings of its lemmatized text, that each user's keyword
    statistics count its memories, and that each posting, link, entity and entity vector
    belongs to live rows of the same scope. With ``nlp`` it also reads each memory
    that has no entity links and reports those whose text does name entities (this
    runs the pipeline, so it is slower). Every check is a read; nothing is changed.
    """
    try:
        violations = [Violation("integrity", line) for line in probes.integrity_check(conn) if line != "ok"]
    except apsw.Error as exc:  # too damaged for SQLite to walk: that is the whole report
        return [Violation("integrity", f"SQLite cannot read this database: {exc}")]
    missing = probes.missing_tables(conn)
    if missing:
        violations.append(
            Violation("schema", f"missing tables {', '.join(missing)}: not a trimem database, or a damaged one")
        )
        return violations
    for name, invariant in probes.INVARIANT_PROBES.items():
        try:
            rows = probes.probe(conn, name)
        except apsw.Error as exc:  # a damaged table fails its own probe; the others still run
            violations.append(Violation(name, f"could not be checked: {exc}"))
            continue
        violations += [Violation(name, invariant.message.format(*row)) for row in rows]
    violations += [
        Violation("keyword_content", f"memory '{memory_id}' (rowid {rowid}) has keyword postings that are not "
                  "those of its memories.text_lemmatized")
        for rowid, memory_id in keywords.misposted(conn)
    ]
    if nlp is not None:
        violations += [
            Violation("memory_without_links", f"memory '{row.id}' (rowid {row.rowid}) names entities but has no links")
            for row, analysis in _unlinked_with_entities(conn, nlp)
        ]
    return violations


def _unlinked_with_entities(conn: apsw.Connection, nlp: NLP) -> list[tuple[MemoryRow, Analysis]]:
    """Memories without entity links whose text yields entities, with their analyses."""
    rows = probes.memories_without_links(conn)
    analyses = nlp.analyze_batch([row.text for row in rows])
    return [(row, analysis) for row, analysis in zip(rows, analyses) if analysis.entities]


# --- repair ---------------------------------------------------------------------------


class _ModelCache:
    """Embeddings and analyses by text, computed in batches and kept for reuse.

    Repair computes what it expects to need before taking the write lock (models
    are slow, other servers wait on the lock), then looks again under the lock and
    computes only what changed in between.
    """

    def __init__(self, embedder: Embedder, nlp: NLP) -> None:
        self._embedder, self._nlp = embedder, nlp
        self._vectors: dict[str, np.ndarray] = {}
        self._analyses: dict[str, Analysis] = {}

    def embed(self, texts: Iterable[str]) -> dict[str, np.ndarray]:
        wanted = list(dict.fromkeys(texts))
        todo = [text for text in wanted if text not in self._vectors]
        if todo:
            self._vectors.update(zip(todo, self._embedder.embed_batch(todo)))
        return {text: self._vectors[text] for text in wanted}

    def analyze(self, texts: Iterable[str]) -> dict[str, Analysis]:
        wanted = list(dict.fromkeys(texts))
        todo = [text for text in wanted if text not in self._analyses]
        if todo:
            self._analyses.update(zip(todo, self._nlp.analyze_batch(todo)))
        return {text: self._analyses[text] for text in wanted}


@dataclass(frozen=True)
class _Plan:
    """The derived rows that need rebuilding, read in one pass."""

    memories_to_embed: list[MemoryRow]
    entities_to_embed: dict[int, str]
    unlinked: list[MemoryRow]


def _plan(conn: apsw.Connection) -> _Plan:
    rowids = [row[0] for name in ("memory_without_vector", "vector_scope") for row in probes.probe(conn, name)]
    snapshot = SQLiteSnapshot(conn)
    rows = [row for lo in range(0, len(rowids), _CHUNK)
            for _, row in sorted(snapshot.memories_by_rowid(rowids[lo : lo + _CHUNK], EVERY_SCOPE).items())]
    return _Plan(rows, _entities_to_embed(conn), probes.memories_without_links(conn))


def _entities_to_embed(conn: apsw.Connection) -> dict[int, str]:
    """Linked entities whose vector is missing or misfiled (orphans are deleted instead)."""
    orphans = {row[0] for row in probes.probe(conn, "entity_without_links")}
    ids = [
        row[0]
        for name in ("entity_without_vector", "entity_vector_scope")
        for row in probes.probe(conn, name)
        if row[0] not in orphans
    ]
    return {k: v for lo in range(0, len(ids), _CHUNK) for k, v in probes.entity_names(conn, ids[lo : lo + _CHUNK]).items()}


def _prepare(plan: _Plan, models: _ModelCache) -> None:
    """Run the models on everything the plan needs, entity names included."""
    models.embed(row.text for row in plan.memories_to_embed)
    models.embed(plan.entities_to_embed.values())
    analyses = models.analyze(row.text for row in plan.unlinked)
    models.embed(entity.normalized for analysis in analyses.values() for entity in analysis.entities)


def repair(conn: apsw.Connection, embedder: Embedder, nlp: NLP) -> RepairReport:
    """Rebuild derived rows from ``memories`` in one write transaction; never touches a memory.

    Removes links, vectors and entities that belong to nothing (or to another scope),
    re-embeds memories and entities whose vector is missing or misfiled, rebuilds the
    keyword postings and statistics when they disagree with ``memories``, relinks memories
    that have no links but whose text names entities (with the same ``link_entities`` as ``add``), and then
    drops entities left without links. Safe to run while other servers write.
    """
    models = _ModelCache(embedder, nlp)
    # Before the write transaction: the models are the slow part, and other processes wait on
    # SQLite's write lock. (The engine's own lock is held throughout: this process's writes
    # wait, its reads, on their own connections, do not.)
    _prepare(_plan(conn), models)
    with connection.write_transaction(conn):
        schema.require_model(conn, embedder.name, embedder.dimension)  # not re-embedded meanwhile
        txn = SQLiteTransaction(conn)
        removed = 0
        for name in ("link_without_memory", "link_without_entity", "link_scope"):
            for memory_rowid, entity_id in probes.probe(conn, name):
                txn.delete_link(memory_rowid, entity_id)
                removed += 1
        for (rowid,) in probes.probe(conn, "vector_without_memory"):
            txn.note_vector_changed(rowid)
            txn.delete_memory_vector(rowid)
            removed += 1
        for (entity_id,) in probes.probe(conn, "entity_vector_without_entity"):
            txn.delete_entity_vector(entity_id)
            removed += 1

        plan = _plan(conn)  # again, under the lock: another process may have written meanwhile
        _prepare(plan, models)
        vectors = models.embed(row.text for row in plan.memories_to_embed)
        for row in plan.memories_to_embed:
            txn.put_memory_vector(row.rowid, vectors[row.text], row.scope)
            txn.note_vector_changed(row.rowid)

        # (the report's name for it is older than the postings: FTS5 was the keyword index)
        fts_rebuilt = any(probes.probe(conn, name) for name in KEYWORD_PROBES)
        fts_rebuilt = fts_rebuilt or bool(keywords.misposted(conn))
        if fts_rebuilt:
            keywords.rebuild(conn)

        links_before = txn.counts()["memory_entities"]
        analyses = models.analyze(row.text for row in plan.unlinked)
        for row in plan.unlinked:
            entities = analyses[row.text].entities
            if entities:
                link_entities(txn, row.rowid, row.scope, entities, models.embed(e.normalized for e in entities))
        links = txn.counts()["memory_entities"] - links_before

        orphans = len(probes.probe(conn, "entity_without_links"))
        txn.delete_orphan_entities()

        entities = _entities_to_embed(conn)  # after relinking, which may have created or reused some
        names = models.embed(entities.values())
        for entity_id, name in entities.items():
            txn.put_entity_vector(entity_id, names[name])
    return RepairReport(
        vectors_rebuilt=len(plan.memories_to_embed) + len(entities),
        fts_rebuilt=fts_rebuilt,
        entity_links_rebuilt=links,
        orphans_removed=removed + orphans,
        remaining=check(conn),
    )


# --- backup ---------------------------------------------------------------------------


def backup(conn: apsw.Connection, destination: Path) -> None:
    """Copy the open database to a new file with SQLite's online backup API.

    The copy is one consistent snapshot: it is taken in a single backup step, i.e.
    one read transaction, which WAL lets run while other processes keep writing (a
    stepwise copy would restart each time another process commits). The result is a
    self-contained file in rollback-journal mode, passes ``PRAGMA quick_check``, and
    appears at ``destination`` only when complete (it is written beside it under a
    temporary name, then renamed; a failure, a full disk included, leaves nothing). An
    existing file is never overwritten, and the live database or its ``-wal``/``-shm``
    files are refused as destinations. The copy, like the database, is its owner's alone
    (0600: ``store.files``).
    """
    destination = Path(destination).expanduser().absolute()
    source = Path(conn.db_filename("main")).absolute()
    live = connection.database_files(source)
    if destination.resolve() in {path.resolve() for path in live}:
        raise InvalidArgument(f"{destination} is the live database; back up to another file")
    if destination.exists():
        raise InvalidArgument(f"{destination} already exists; choose a new file name or delete the old backup first")
    if (blocker := connection.file_in_the_way(destination)) is not None:
        raise InvalidArgument(
            f"cannot write the backup {destination}: {blocker} is a file, not a folder; choose a path in a folder "
            "you can write"
        )
    partial = destination.with_name(f".{destination.name}.{uuid.uuid4().hex[:8]}.partial")
    try:
        files.make_folder(destination.parent)
        os.close(files.create_private(partial))  # SQLite would make it 0644, and its journal the same
        _copy(conn, partial, destination)
    except OSError as exc:
        raise unwritable(destination, exc, "the backup ") from None
    except apsw.CantOpenError:
        raise InvalidArgument(
            f"cannot create the backup {destination}; choose a path in a folder you can write"
        ) from None
    finally:
        connection.remove_database_files(partial)  # and the journal SQLite wrote beside it


def _copy(conn: apsw.Connection, partial: Path, destination: Path) -> None:
    """The backup proper: one step into ``partial``, checked, then renamed to ``destination``."""
    target = apsw.Connection(str(partial))
    try:
        connection.connection_sqlite_vec(target)  # quick_check visits the vec0 tables
        with target.backup("main", conn, "main") as job:
            job.step(-1)
        target.execute("PRAGMA journal_mode=DELETE")  # one file, no -wal beside it
        problems = [line for line in target.execute("PRAGMA quick_check").fetchall() if line[0] != "ok"]
        if problems:
            raise TrimemError(f"the backup copy failed its check ({problems[0][0]}); the source may be damaged")
    except apsw.Error as exc:
        if connection.disk_full(target, exc):
            raise DiskFull(destination) from None
        raise
    finally:
        target.close()
    os.replace(partial, destination)
