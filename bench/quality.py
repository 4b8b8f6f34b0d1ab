"""Retrieval quality on LoCoMo: recall@5/10/20, nDCG@10 and MRR for a signal ablation.

    python -m bench quality [--shape turns|facts|both] [--data FILE] [--samples conv-26,conv-30]
                            [--backend sqlite|postgres] [--embedding-model NAME] [--no-doc]

Both shapes of memory, each in a database of its own (an SQLite file, or with ``--backend
postgres`` a new PostgreSQL database), ingested once through ``Engine.add_many`` (one
scope per conversation; one memory per dialog turn, or one per observation: see
``bench/locomo.py``). Then one ``Engine`` per variant is opened on that same database,
each with its own ``[search]`` configuration and all sharing one embedding model and
one spaCy pipeline, and every question goes through that engine's ``search`` with
``top_k=20``. The variants differ only in engine configuration: no pipeline is forked
here. The reference variant is Mem0's exact behaviour (``ranking = "mem0"``); the
default is trimem's ranking, and the variants around it take one departure out at a time.
Metrics are also split into the conversations ideas were tuned on and the two
``CHECK_SAMPLES`` kept for checking. For the reference variant, questions whose evidence is missing from the top 10
are written to ``bench/results/quality-failures[-facts].jsonl`` with, for each evidence memory,
its rank under every variant and its three signal values computed exhaustively over
the scope (by the engine's own ``retrieval`` functions), so failures can be studied.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

from bench import locomo, metrics, postgres, report
from store import Config, Engine, clock, load_config
from store.analysis.embeddings import Embedder, open_embedder
from store.analysis.nlp import NLP
from store.config import MEM0_RANKING
from store.engine import MemoryInput
from store.ranking import retrieval, scoring
from store.validation import check_scope

TOP_K = 20
"""Results asked of every search: the largest k of any metric."""
FAILURE_K = 10
"""A question is a failure case when some evidence turn is missing from this many results."""
REFERENCE = "Mem0 (reference)"
DEFAULT = "trimem (default)"
HAND_SET_NAME = "trimem hand-set fusion"
MEM0 = {"ranking": "mem0"}
"""Mem0's exact behaviour; variants measured against it build on this."""
HAND_SET = {"ranking": "trimem"}
"""The hand-set fusion alone, whose first candidates the default's learned fusion reorders."""
MEM0_SIGNALS = {**HAND_SET, **{key: value for key, value in MEM0_RANKING.items() if key != "candidate_pool"}}
"""trimem's departures from Mem0 other than the union pool, turned off."""
EARLIER = {**HAND_SET, "entity_match": "best"}
"""The default before longer names: a query entity reaches its closest stored entity only."""
WHOLE_QUESTIONS = {"question_keywords": 1.0, **EARLIER}
"""Questions keep their whole keyword score, as before ``question_keywords``."""
RAW_CONTEXT = {"keyword_context_share": "raw", **WHOLE_QUESTIONS}
"""Keyword context as first adopted: a share of the neighbour's raw BM25."""


@dataclass(frozen=True)
class Variant:
    """One row of the ablation: a name and the ``[search]`` keys it changes."""

    name: str
    search: dict[str, Any]
    note: str = ""


VARIANTS: tuple[Variant, ...] = (
    Variant("semantic only", {**MEM0, "use_bm25": False, "use_entities": False}),
    Variant("semantic + BM25", {**MEM0, "use_entities": False}, "Mem0's fusion without entities"),
    Variant("semantic + entities", {**MEM0, "use_bm25": False}),
    Variant(REFERENCE, MEM0, "Mem0's behaviour, one setting away from the default"),
    Variant("Mem0 + union pool", MEM0_SIGNALS, "keyword/entity hits outside the over-fetch scored exactly"),
    Variant(
        "+ keyword context (raw share)",
        {**RAW_CONTEXT, "entity_weighting": "mem0", "entity_match": "all"},
        "a memory earns half its neighbours' raw BM25",
    ),
    Variant(
        "+ entity rarity",
        {**RAW_CONTEXT, "entity_match": "all"},
        "an entity's boost also scaled by its rarity in the scope",
    ),
    Variant(
        "+ closest entity match",
        RAW_CONTEXT,
        "each query entity boosts through its most similar stored entity only",
    ),
    Variant(
        "+ context as a share of the score",
        WHOLE_QUESTIONS,
        "a neighbour earns half of what a hit adds to the fused score, not the squashed half of its raw BM25",
    ),
    Variant("+ question share", EARLIER, "a memory ending with '?' keeps half its keyword score"),
    Variant(
        HAND_SET_NAME, HAND_SET, "the rows above + a query entity also reaches the longer names holding it"
    ),
    Variant(DEFAULT, {}, "configs/default.toml: a logistic regression reorders the hand-set fusion's first 100 "
            "(store/ranking/learned.py)"),
    Variant("trimem without union pool", {"candidate_pool": "semantic"}),
    Variant("trimem without keyword context", {"keyword_context": 0.0}),
    Variant("trimem without entity rarity", {"entity_weighting": "mem0"}),
    Variant("trimem without closest entity match", {"entity_match": "all"}),
    Variant(
        "trimem with context two places away", {"keyword_context_reach": 2},
        "memories two places from a hit earn a quarter of its score (over the cost budget)",
    ),
    Variant(
        "trimem with context at any time apart", {"keyword_context_seconds": 0},
        "the same as the default when each scope is stored in one sitting; differs with --dated",
    ),
    Variant("trimem without entities", {"use_entities": False}),
    Variant("trimem without the relevance decision", {"relevance_check": False},
            "every question gets its top_k, as before the decision (store/ranking/relevance.py)"),
    Variant("Mem0, over-fetch whole scope", {**MEM0, "overfetch_factor": 1, "overfetch_minimum": 4096}),
)


@dataclass
class VariantResult:
    """Per-question metrics of one variant, and what its searches cost."""

    variant: Variant
    internal_limit: int
    scores: list[dict[str, float]] = field(default_factory=list)
    categories: list[int] = field(default_factory=list)
    ranked: list[list[str]] = field(default_factory=list)
    seconds: float = 0.0

    def overall(self) -> dict[str, float]:
        return metrics.mean(self.scores)

    def by_category(self, category: int) -> dict[str, float]:
        return metrics.mean(s for s, c in zip(self.scores, self.categories) if c == category)


@dataclass
class QualityRun:
    """Everything one run measured."""

    results: list[VariantResult]
    questions: list[tuple[locomo.Sample, locomo.Question]]
    memories: int
    ingest_seconds: float
    failures: list[dict[str, Any]]

    def category_counts(self) -> Counter:
        return Counter(question.category for _, question in self.questions)


# --- ingest -----------------------------------------------------------------------------


def ingest(engine: Engine, samples: Sequence[locomo.Sample], dated: bool = False) -> dict[str, dict[str, str]]:
    """Add every memory through the batch path; map each sample's memory keys to memory ids.

    A memory whose normalised text is already stored in its conversation comes back as
    DUPLICATE with the existing memory: its key maps to that memory. Re-ingesting an
    existing database is therefore idempotent and cheap.

    ``dated`` stores the memories one call each, as a client writing during each conversation
    would: each at its session's date and time plus ``DATED_PACE`` seconds per memory before
    it in the session (the engine's clock is set for each call), so that sessions lie days
    apart and keyword context stops at their edges.
    """
    mapping: dict[str, dict[str, str]] = {}
    for sample in samples:
        items = [
            MemoryInput(memory.text, metadata={"key": memory.key, "session_date": memory.session_date})
            for memory in sample.memories
        ]
        if dated:
            added = []
            for item, stamp in zip(items, session_clock(sample.memories)):
                with mock.patch.object(clock, "now", lambda stamp=stamp: stamp):
                    added.extend(engine.add_many([item], user_id=sample.sample_id))
        else:
            added = engine.add_many(items, user_id=sample.sample_id)
        mapping[sample.sample_id] = {
            memory.key: result.memory.id for memory, result in zip(sample.memories, added)
        }
    return mapping


DATED_PACE = 30
"""Seconds between two memories of one session in a ``--dated`` run."""


def session_clock(memories: Sequence[locomo.Memory]) -> list[str]:
    """When each memory is stored in a ``--dated`` run: its session's date and time ("1:56 pm
    on 8 May, 2023", read as UTC), plus ``DATED_PACE`` seconds per memory before it in the session."""
    stamps, seen = [], {}
    for memory in memories:
        start = dt.datetime.strptime(memory.session_date, "%I:%M %p on %d %B, %Y").replace(tzinfo=dt.UTC)
        index = seen[memory.session_date] = seen.get(memory.session_date, -1) + 1
        stamps.append((start + dt.timedelta(seconds=DATED_PACE * index)).isoformat(timespec="microseconds"))
    return stamps


# --- searching -----------------------------------------------------------------------------


def open_variant(base: Config, variant: Variant, embedder: Embedder, nlp: NLP) -> Engine:
    """An engine on the benchmark database with this variant's search configuration."""
    return Engine(base.replace("search", **variant.search), embedder=embedder, nlp=nlp)


def evaluate(
    base: Config,
    variants: Sequence[Variant],
    questions: Sequence[tuple[locomo.Sample, locomo.Question]],
    mapping: dict[str, dict[str, str]],
    embedder: Embedder,
    nlp: NLP,
    progress: bool = False,
) -> list[VariantResult]:
    """Ask every question of every variant; ids in the ranking are memory ids."""
    results = []
    for variant in variants:
        with open_variant(base, variant, embedder, nlp) as engine:
            options = engine.config.search
            result = VariantResult(variant, scoring.internal_limit(TOP_K, options.overfetch_factor, options.overfetch_minimum))
            started = time.perf_counter()
            for sample, question in questions:
                hits = engine.search(question.text, user_id=sample.sample_id, top_k=TOP_K)
                ranked = [hit.memory.id for hit in hits]
                relevant = {mapping[sample.sample_id][key] for key in question.evidence}
                result.scores.append(metrics.score(ranked, relevant))
                result.categories.append(question.category)
                result.ranked.append(ranked)
            result.seconds = time.perf_counter() - started
        if progress:
            overall = result.overall()
            print(
                f"  {variant.name:<32} recall@10 {overall['recall@10']:.3f}  "
                f"({result.seconds:.0f} s, {1000 * result.seconds / max(len(questions), 1):.0f} ms/search)",
                file=sys.stderr,
                flush=True,
            )
        results.append(result)
    return results


# --- failure cases ---------------------------------------------------------------------------


def diagnose(
    base: Config,
    results: Sequence[VariantResult],
    questions: Sequence[tuple[locomo.Sample, locomo.Question]],
    mapping: dict[str, dict[str, str]],
    embedder: Embedder,
    nlp: NLP,
) -> list[dict[str, Any]]:
    """Every question whose evidence the reference misses in its top 10, worst first.

    For each evidence turn: its rank under every variant, and its semantic similarity,
    raw and squashed BM25 and entity boost computed over the whole scope (the reference
    pool cut removed), with the reason the reference missed it.
    """
    by_name = {result.variant.name: result for result in results}
    reference = by_name[REFERENCE]
    limit = reference.internal_limit
    cases = []
    base = base.replace("search", **reference.variant.search)
    with Engine(base, embedder=embedder, nlp=nlp) as engine:
        options = engine.config.search
        exhaustive = base.replace("search", overfetch_factor=1, overfetch_minimum=4096).search
        for index, (sample, question) in enumerate(questions):
            if reference.scores[index][f"recall@{FAILURE_K}"] >= 1.0:
                continue
            ids = mapping[sample.sample_id]
            text_of = {memory.key: memory.text for memory in sample.memories}
            key_of = {memory_id: key for key, memory_id in reversed(list(ids.items()))}
            explanation = engine.explain(question.text, user_id=sample.sample_id, top_k=TOP_K)
            scope = check_scope(sample.sample_id, None, None)
            request = retrieval.SearchRequest(
                scope=scope, top_k=TOP_K, threshold=options.threshold, filters=None, show_expired=False,
                options=exhaustive,
            )
            prepared = retrieval.prepare(question.text, nlp, embedder, engine._names, options, engine._side)
            with engine.backend.snapshot() as view:  # the engine's own signal reads, on one snapshot
                signals = retrieval.gather_signals(view, prepared, request)
                rowid_of = {
                    memory_id: row.rowid
                    for memory_id in set(ids.values())
                    if (row := view.get_memory(memory_id, scope)) is not None
                }
            semantic_order = sorted(signals.distances, key=signals.distances.get)
            bm25_order = sorted(signals.bm25_raw, key=signals.bm25_raw.get, reverse=True)
            params = scoring.bm25_params(len(prepared.terms))
            turns = []
            for key in question.evidence:
                memory_id = ids[key]
                rowid = rowid_of[memory_id]
                similarity = scoring.similarity_from_distance(signals.distances.get(rowid, 2.0))
                raw = signals.bm25_raw.get(rowid, 0.0)
                bm25 = scoring.normalize_bm25(raw, params) if raw > 0 else 0.0
                boost = signals.boosts.get(rowid, 0.0)
                semantic_rank = semantic_order.index(rowid) + 1 if rowid in signals.distances else None
                rank = _rank(reference.ranked[index], memory_id)
                if rank is not None and rank <= FAILURE_K:
                    reason = "found"
                elif similarity < options.threshold:
                    reason = "below semantic gate"
                elif semantic_rank is None or semantic_rank > limit:
                    reason = "outside semantic over-fetch"
                else:
                    reason = "outranked after fusion"
                match = signals.entity_matches.get(rowid)
                turns.append(
                    {
                        "key": key,
                        "text": text_of[key],
                        "reason": reason,
                        "rank": {result.variant.name: _rank(result.ranked[index], memory_id) for result in results},
                        "semantic": round(similarity, 4),
                        "semantic_rank": semantic_rank,
                        "bm25_raw": float(f"{raw:.4g}"),
                        "bm25": round(bm25, 4),
                        "bm25_rank": bm25_order.index(rowid) + 1 if rowid in signals.bm25_raw else None,
                        "entity_boost": round(boost, 4),
                        "entity_match": None if match is None else f"{match.query_entity} ~ {match.entity}",
                        "fused_if_candidate": round(
                            (similarity + bm25 + boost) / explanation.analysis.max_possible_score, 4
                        ),
                    }
                )
            top = [
                {
                    "rank": rank,
                    "key": key_of.get(hit.memory.id),
                    "text": hit.memory.text,
                    "semantic": round(hit.details.semantic_score, 4),
                    "bm25": round(hit.details.bm25_score, 4),
                    "entity_boost": round(hit.details.entity_boost, 4),
                    "final": round(hit.details.final_score, 4),
                }
                for rank, hit in enumerate(explanation.hits[:3], start=1)
            ]
            analysis = explanation.analysis
            cases.append(
                {
                    "sample": sample.sample_id,
                    "question": question.text,
                    "category": locomo.CATEGORIES[question.category],
                    "recall@10": reference.scores[index]["recall@10"],
                    "query_terms": analysis.lemmatized_terms,
                    "query_entities": analysis.entities,
                    "max_possible_score": analysis.max_possible_score,
                    "evidence": turns,
                    "top_hits": top,
                }
            )
    cases.sort(key=lambda case: (case["recall@10"], -_worst_rank(case)))
    return cases


def _rank(ranked: Sequence[str], memory_id: str) -> int | None:
    return ranked.index(memory_id) + 1 if memory_id in ranked else None


def _worst_rank(case: dict[str, Any]) -> int:
    ranks = [turn["semantic_rank"] or 10_000 for turn in case["evidence"] if turn["reason"] != "found"]
    return max(ranks, default=0)


# --- the run ---------------------------------------------------------------------------------


def run(
    samples: Sequence[locomo.Sample],
    base: Config,
    embedder: Embedder,
    nlp: NLP,
    variants: Sequence[Variant] = VARIANTS,
    progress: bool = False,
    failures: bool = True,
    dated: bool = False,
) -> QualityRun:
    """Ingest the samples into ``base``'s database, evaluate every variant, diagnose failures."""
    with Engine(base, embedder=embedder, nlp=nlp) as engine:
        started = time.perf_counter()
        mapping = ingest(engine, samples, dated)
        ingest_seconds = time.perf_counter() - started
        memories = engine.status()["counts"]["memories"]
    if progress:
        print(f"ingested {memories} memories in {ingest_seconds:.0f} s", file=sys.stderr, flush=True)
    questions = [(sample, question) for sample in samples for question in sample.questions]
    results = evaluate(base, variants, questions, mapping, embedder, nlp, progress)
    cases = []
    if failures and any(result.variant.name == REFERENCE for result in results):
        cases = diagnose(base, results, questions, mapping, embedder, nlp)
    return QualityRun(results, questions, memories, ingest_seconds, cases)


CHECK_SAMPLES = ("conv-42", "conv-43")
"""Conversations of the dev file no ranking choice was made on: each idea was kept or
dropped on the other three ("tune"), and these ("check") show whether it generalises."""


def split_table(run: QualityRun, check: Sequence[str] = CHECK_SAMPLES) -> str:
    """Overall metrics of every variant on the tuning conversations and on the check ones."""
    in_check = [sample.sample_id in check for sample, _ in run.questions]
    if all(in_check) or not any(in_check):
        return ""
    rows = []
    for result in run.results:
        tune = metrics.mean(s for s, c in zip(result.scores, in_check) if not c)
        held = metrics.mean(s for s, c in zip(result.scores, in_check) if c)
        rows.append(
            [result.variant.name, *(tune[name] for name in metrics.METRICS), *(held[name] for name in metrics.METRICS)]
        )
    headers = ["variant", *(f"tune {name}" for name in metrics.METRICS), *(f"check {name}" for name in metrics.METRICS)]
    counts = Counter(c for c in in_check)
    return (
        f"Tune ({counts[False]} questions, the conversations ideas were chosen on) vs check "
        f"({counts[True]} questions: {', '.join(check)}, never used to choose):\n\n" + report.table(headers, rows)
    )


def overall_table(run: QualityRun) -> str:
    """One row per variant: the five metrics over every question, and its search pool size."""
    rows = []
    for result in run.results:
        overall = result.overall()
        nothing = sum(not ranked for ranked in result.ranked) / max(len(result.ranked), 1)
        rows.append([result.variant.name, *(overall[name] for name in metrics.METRICS), nothing,
                     result.internal_limit])
    return report.table(["variant", *metrics.METRICS, "nothing", "pool"], rows)


def category_tables(run: QualityRun) -> str:
    """For each category, the five metrics of every variant."""
    counts = run.category_counts()
    parts = []
    for category, label in locomo.CATEGORIES.items():
        if not counts[category]:
            continue
        rows = []
        for result in run.results:
            scores = result.by_category(category)
            rows.append([result.variant.name, *(scores[name] for name in metrics.METRICS)])
        parts.append(f"**{category} {label}** ({counts[category]} questions)\n\n" + report.table(["variant", *metrics.METRICS], rows))
    return "\n\n".join(parts)


def failure_summary(run: QualityRun) -> str:
    """Why the reference misses evidence turns in its top 10, counted by reason."""
    reasons = Counter(turn["reason"] for case in run.failures for turn in case["evidence"] if turn["reason"] != "found")
    total = sum(reasons.values())
    rows = [[reason, count, count / total if total else 0.0] for reason, count in reasons.most_common()]
    return report.table(["reason an evidence turn is not in the reference top 10", "turns", "share"], rows)


def variant_notes(run: QualityRun) -> str:
    lines = []
    for result in run.results:
        changes = ", ".join(f"{key}={value!r}" for key, value in result.variant.search.items()) or "defaults"
        note = f" — {result.variant.note}" if result.variant.note else ""
        lines.append(f"- **{result.variant.name}**: `{changes}`{note}")
    return "\n".join(lines)


SHAPE_TITLES = {"turns": "one memory per dialog turn", "facts": "one memory per observation (facts)"}


def markdown(run: QualityRun, shape: str, command: str, environment: str, data: Path, dated: bool = False) -> str:
    """The docs section: how it was run, the overall table, per-category tables, failure reasons."""
    seconds = sum(result.seconds for result in run.results)
    searches = len(run.questions) * len(run.results)
    failures = f"quality-failures{run_tag(shape, dated)}.jsonl"
    stored = (
        f"Each memory stored by a call of its own at its session's date, {DATED_PACE} s after the one before it "
        "(sessions lie days apart)." if dated else "Ingest through `Engine.add_many`: each scope in one sitting."
    )
    return f"""## Retrieval quality (LoCoMo, {SHAPE_TITLES[shape]}{", dated" if dated else ""})

`{command}`

{environment}

Data: `{data.name}`, {len(run.questions)} questions of categories 1–4 over {run.memories} memories
in {len({sample.sample_id for sample, _ in run.questions})} scopes (one per conversation). {stored}
Ingest: {run.ingest_seconds:.0f} s. Every variant is an `Engine` with a different `[search]`
configuration on the same database, sharing one model and one spaCy pipeline; each question is one
`Engine.search(top_k={TOP_K})` ({searches} searches, {seconds:.0f} s, {1000 * seconds / max(searches, 1):.0f} ms each).
"pool" is the over-fetch per signal at top_k={TOP_K} (`max(top_k × overfetch_factor, overfetch_minimum)`);
"nothing" the share of questions answered with no memory at all (the relevance decision).
With the dev file these are the development conversations, the ones the settings were chosen on
(the "tune" ones; the "check" ones only confirmed): the default's figures here flatter it.

{overall_table(run)}

{split_table(run)}

Variants:

{variant_notes(run)}

### Per category

{category_tables(run)}

### Where the reference misses

Questions whose evidence is not all in the reference top {FAILURE_K}: {len(run.failures)} of {len(run.questions)}.
Each is in `bench/results/{failures}` (worst first), with every evidence memory's rank under each
variant and its semantic similarity, BM25 and entity boost computed over the whole scope.

{failure_summary(run)}
"""


def run_tag(shape: str, dated: bool = False) -> str:
    """What tells a run's database, failure file and docs section apart: nothing for turns
    stored in one sitting, else ``-<shape>`` and/or ``-dated``."""
    return ("" if shape == "turns" else f"-{shape}") + ("-dated" if dated else "")


def database_path(path: Path, shape: str, dated: bool = False) -> Path:
    """The SQLite file of one run: ``path`` itself for turns stored in one sitting, else
    ``<stem><run_tag><suffix>`` beside it."""
    return path.with_name(f"{path.stem}{run_tag(shape, dated)}{path.suffix}")


STORAGE = ("sqlite", "postgres")
"""Where ``--backend`` stores the memories: the same questions, the same engine on either."""


@contextlib.contextmanager
def storage(backend: str, path: Path, reuse: bool, server_url: str) -> Iterator[str]:
    """Where this run stores its memories: the SQLite file at ``path`` (emptied unless ``reuse``),
    or the URL of a new database on the PostgreSQL server at ``server_url`` (default: one started
    for the run), dropped at the end."""
    if backend == "sqlite":
        if not reuse:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        yield str(path)
        return
    with postgres.server(server_url) as server, postgres.fresh_database(server, "trimem_bench_quality") as url:
        yield url


def storage_versions(backend: str, database: str) -> str:
    """The storage, as the report's environment names it (SQLite's version is there already)."""
    if backend == "sqlite":
        return "SQLite file"
    return postgres.versions(database)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=locomo.DEFAULT_PATH, help="a LoCoMo-format JSON file")
    parser.add_argument("--shape", choices=(*locomo.SHAPES, "both"), default="both",
                        help="memories as dialog turns, as the observations (facts), or both in turn")
    parser.add_argument("--samples", default="", help="comma-separated sample ids (default: all)")
    parser.add_argument("--max-turns", type=int, default=0, help="first N memories per sample (0 = all)")
    parser.add_argument("--max-questions", type=int, default=0, help="first N questions per sample (0 = all)")
    parser.add_argument("--variants", default="", help="comma-separated variant names (default: all)")
    parser.add_argument("--dated", action="store_true",
                        help="store each memory by a call of its own at its session's date (sessions days apart)")
    parser.add_argument("--backend", choices=STORAGE, default="sqlite", help="where the memories are stored")
    parser.add_argument("--db", type=Path, default=report.RESULTS / "locomo.db",
                        help="benchmark database file (SQLite; facts go to <name>-facts<suffix>)")
    parser.add_argument("--reuse-db", action="store_true",
                        help="keep an existing database (stored memories are not embedded again; SQLite only)")
    parser.add_argument("--database-url", default="",
                        help="PostgreSQL: a server to create the benchmark's database on (default: start one)")
    parser.add_argument("--threads", type=int, default=1, help="inference threads")
    parser.add_argument("--embedding-backend", default="", help="embedding backend (default: the configuration's)")
    parser.add_argument("--embedding-model", default="",
                        help="embedding model: a packaged model's name or a sentence-transformers folder "
                             "(default: the configuration's)")
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = parser.parse_args(argv)
    if args.reuse_db and args.backend != "sqlite":
        parser.error("--reuse-db keeps an SQLite file; a PostgreSQL benchmark database is new on every run")
    variants = VARIANTS
    if args.variants:
        wanted = [name.strip() for name in args.variants.split(",")]
        variants = tuple(variant for variant in VARIANTS if variant.name in wanted)

    started = time.perf_counter()
    config = load_config(environ={})
    if args.embedding_model:
        config = config.replace("store", embedding_model=args.embedding_model)
    embedder = open_embedder(
        config.store.embedding_model, args.embedding_backend or config.store.embedding_backend,  # type: ignore[arg-type]
        cache_dir=config.model_cache_dir, threads=args.threads,
    )
    nlp = NLP()
    embedder.load()
    nlp.load()
    for shape in locomo.SHAPES if args.shape == "both" else (args.shape,):
        samples = locomo.load(args.data, shape=shape)
        if args.samples:
            wanted = args.samples.split(",")
            samples = [sample for sample in samples if sample.sample_id in wanted]
        samples = [locomo.head(sample, args.max_turns or None, args.max_questions or None) for sample in samples]
        path = database_path(args.db, shape, args.dated)
        with storage(args.backend, path, args.reuse_db, args.database_url) as database:
            print(f"{shape}:", file=sys.stderr, flush=True)
            result = run(samples, config.using(database), embedder, nlp, variants, progress=True, dated=args.dated)
            stored_in = storage_versions(args.backend, database)
        suffix = run_tag(shape, args.dated)
        report.RESULTS.mkdir(parents=True, exist_ok=True)
        failures_path = report.RESULTS / f"quality-failures{suffix}.jsonl"
        with failures_path.open("w", encoding="utf-8") as handle:
            for case in result.failures:
                handle.write(json.dumps(case, ensure_ascii=False) + "\n")
        environment = report.environment({
            "storage": stored_in, "spaCy pipeline": nlp.tier, "embedding model": Path(embedder.name).name,
            "embedding backend": embedder.backend,
            "inference threads": str(args.threads),
        })
        section = markdown(result, shape, report.command_line(), environment, args.data, args.dated)
        print(section)
        print(f"failure cases: {failures_path} ({len(result.failures)})", file=sys.stderr)
        if not args.no_doc:
            backend = "" if args.backend == "sqlite" else f"-{args.backend}"
            report.write_section(f"quality{backend}{suffix}", section)
    print(f"total {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return 0
