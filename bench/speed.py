"""Speed and memory: search latency by stage at growing sizes, add cost, database size, cold start.

    python -m bench speed [--sizes 1000,10000,100000] [--queries 200] [--no-doc]

Search: one scope grows to each size through ``Engine.add_many`` (real model, real
spaCy, real SQL); at each size the same LoCoMo questions are asked warm with
``Engine.search(top_k=10)``, the time of each stage is taken from the real call (see
``bench/stages.py``), and beside it the physical floors measured in the same run: one
forward pass of the model for the query, and a numpy brute-force top-k over the very
vectors stored in ``memory_vectors``. Add: single ``Engine.add`` latency and one
``Engine.add_many`` of 1,000 memories into an empty scope, split into embed / NLP /
SQL. Cold start: see ``bench/coldstart.py``.

Texts are real LoCoMo turns; beyond the 2,760 distinct turns, each round repeats them with
a stop-word opening ("Caroline: Also, …"). To build 100,000 memories in minutes on two
cores, the scope is built with stand-in models (``Replay``): a repeated turn reuses its
turn's real analysis and its turn's real vector plus small noise. The SQL is real, and
every timed search and add uses the real models.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench import coldstart, corpus, locomo, report, sqlite_file, stdio
from bench.replay import Replay, backend_embedder
from bench.scope_search import (
    BUILD_CHUNK,
    SCOPE,
    SEARCH_ORDER,
    TOP_K,
    SearchRun,
    fill,
    floor_ms,
    grow,
    measure_floors,
    measure_search,
)
from bench.stages import ADD_STAGES, PARALLEL_PARTS, StageClock
from bench.timing import percentiles
from store import Config, Engine, load_config
from store.analysis.embeddings import Embedder
from store.analysis.nlp import NLP
from store.engine import MemoryInput

# --- search --------------------------------------------------------------------------------


def search_runs(
    base: Config, embedder: Embedder, nlp: NLP, sizes: Sequence[int], questions: Sequence[str]
) -> list[SearchRun]:
    """Grow one scope through every size; measure search and floors at each.

    The scope is built with the ``Replay`` models (real models for the distinct turns);
    every search is then made by an engine with the real models.
    """
    base_of = corpus.variants(locomo.load(), max(sizes))
    texts = list(base_of)
    replay = Replay(embedder, nlp, base_of)
    runs = []
    stored = 0
    for size in sorted(sizes):
        run = SearchRun(size)
        with Engine(base, embedder=replay, nlp=replay) as engine:
            grow(engine, texts[stored:size], run)
            stored = size
        run.model_texts = replay.model_texts
        # Closing the last connection checkpoints the WAL into the main file.
        run.file_bytes = sqlite_file.file_bytes(base.database)
        with Engine(base, embedder=embedder, nlp=nlp) as engine:
            measure_search(engine, questions, run)
            measure_floors(engine, questions, run)
        print(
            f"  {size:>7} memories: built {run.built} in {run.build_seconds:.0f} s; "
            f"search p50 {percentiles(run.total)[0]:.1f} ms",
            file=sys.stderr,
            flush=True,
        )
        runs.append(run)
    return runs


# --- add -----------------------------------------------------------------------------------


@dataclass
class AddRun:
    """Single-add latencies (s) by stage, and one 1,000-memory batch."""

    single_total: list[float] = field(default_factory=list)
    single_stages: dict[str, list[float]] = field(default_factory=dict)
    batch_count: int = 0
    batch_seconds: float = 0.0
    batch_stages: dict[str, float] = field(default_factory=dict)


def measure_add(engine: Engine, texts: Sequence[str], singles: int, batch: int, scope: str) -> AddRun:
    """``singles`` one-at-a-time adds, then one ``add_many`` of ``batch`` texts into a fresh scope."""
    clock = StageClock()
    run = AddRun(single_stages={"models": [], "embed": [], "NLP": [], "SQL": []})
    engine.add(texts[0], user_id=f"{scope}-warm")
    with clock.active(engine, ADD_STAGES):
        for text in texts[1 : singles + 1]:
            clock.reset()
            started = time.perf_counter()
            engine.add(text, user_id=f"{scope}-single")
            total = time.perf_counter() - started
            parts = clock.reset()
            run.single_total.append(total)
            for name in ("models", "embed", "NLP"):
                run.single_stages[name].append(parts.get(name, 0.0))
            run.single_stages["SQL"].append(clock.rest(total, parts))
        items = [MemoryInput(text) for text in texts[singles + 1 : singles + 1 + batch]]
        clock.reset()
        started = time.perf_counter()
        engine.add_many(items, user_id=f"{scope}-batch")
        run.batch_seconds = time.perf_counter() - started
        parts = clock.reset()
    run.batch_count = len(items)
    run.batch_stages = {**parts, "SQL": clock.rest(run.batch_seconds, parts)}
    return run


# --- delete_all ------------------------------------------------------------------------------


@dataclass
class DeleteRun:
    """One ``Engine.delete_all`` of a whole scope, with what the scope held."""

    memories: int = 0
    entities: int = 0
    seconds: float = 0.0


def measure_delete_all(base: Config, embedder: Embedder, nlp: NLP, count: int) -> DeleteRun:
    """Build ``count`` memories (``Replay`` models, real SQL) in a fresh file, then time one
    ``delete_all`` of the scope: every row, vector, keyword posting, link, entity and history event."""
    base_of = corpus.variants(locomo.load(), count)
    replay = Replay(embedder, nlp, base_of)
    path = report.RESULTS / "speed-delete.db"
    sqlite_file.remove_db(path)
    run = DeleteRun()
    with Engine(base.replace("store", db_path=str(path)), embedder=replay, nlp=replay) as engine:
        fill(engine, list(base_of))
        run.entities = engine.status()["counts"]["entities"]
        started = time.perf_counter()
        run.memories = engine.delete_all(user_id=SCOPE)
        run.seconds = time.perf_counter() - started
    sqlite_file.remove_db(path)
    return run


def delete_table(run: DeleteRun | None) -> str:
    if run is None:
        return "(not measured)"
    return (
        "| memories | entities | `delete_all` |\n|---:|---:|---:|\n"
        f"| {run.memories:,} | {run.entities:,} | {run.seconds:.2f} s |"
    )


# --- report ----------------------------------------------------------------------------------


def _ms(values: Sequence[float]) -> str:
    p50, p95 = percentiles(values)
    return f"{p50:.1f} ({p95:.1f})"


def search_table(runs: Sequence[SearchRun]) -> str:
    headers = ["stage, ms p50 (p95)", *(f"{run.size:,} memories" for run in runs)]
    rows = [["**search, total**", *(f"**{_ms(run.total)}**" for run in runs)]]
    for name in SEARCH_ORDER:
        label = f"… … {name} (side by side)" if name in PARALLEL_PARTS else f"… {name}"
        rows.append([label, *(_ms(run.stages[name]) for run in runs)])
    rows.append(["floor: one model forward pass (query)", *(_ms(run.forward_pass) for run in runs)])
    rows.append(["floor: numpy exact top-k over the stored vectors", *(_ms(run.numpy_topk) for run in runs)])
    return report.table(headers, rows)


def build_table(runs: Sequence[SearchRun]) -> str:
    rows = []
    previous = 0
    for run in runs:
        models = run.build_stages.get("models", 0.0)
        rows.append(
            [
                f"{previous:,} → {run.size:,}",
                f"{run.model_texts:,}",
                f"{run.build_seconds:.1f}",
                f"{models:.1f}",
                f"{run.build_seconds - models:.1f}",
                f"{(run.size - previous) / max(run.build_seconds - models, 1e-9):.0f}",
                f"{run.file_bytes / 1e6:.1f}",
                f"{run.file_bytes / run.size * 1000 / 1e6:.2f}",
            ]
        )
        previous = run.size
    headers = [
        "scope grows", "texts through the real models (cumulative: turns + entity names)", "seconds", "models s", "SQL s",
        "SQL memories/s", "file MB", "MB per 1,000",
    ]
    return report.table(headers, rows)


def add_table(runs: dict[str, AddRun]) -> str:
    rows = []
    for label, run in runs.items():
        stages = run.single_stages
        rows.append(
            [
                f"single `add`, {label}",
                f"{_ms(run.single_total)} ms",
                f"{percentiles(stages['models'])[0]:.1f} ms",
                f"{percentiles(stages['embed'])[0]:.1f} ms",
                f"{percentiles(stages['NLP'])[0]:.1f} ms",
                f"{percentiles(stages['SQL'])[0]:.1f} ms",
                f"{1 / percentiles(run.single_total)[0] * 1000:.0f}",
            ]
        )
        rows.append(
            [
                f"`add_many` of {run.batch_count:,}, {label}",
                f"{run.batch_seconds:.1f} s",
                f"{run.batch_stages.get('models', 0.0):.1f} s",
                f"{run.batch_stages.get('embed', 0.0):.1f} s",
                f"{run.batch_stages.get('NLP', 0.0):.1f} s",
                f"{run.batch_stages['SQL']:.1f} s",
                f"**{run.batch_count / run.batch_seconds:.0f}**",
            ]
        )
    headers = ["write", "time p50 (p95) / total", "models (embed ∥ NLP)", "… embed", "… NLP", "SQL", "memories/s"]
    return report.table(headers, rows)


# --- targets -----------------------------------------------------------------------------------

ENGINE_SEARCH_FLOOR_RATIO = 1.5
"""In-engine search p50 may be at most this many times the floor (query forward pass + exact top-k)."""
TARGET_ADD_MANY_PER_S = 100.0
TARGET_FIRST_SEARCH_S = 3.0
TARGET_INITIALIZE_RATIO = 1.2
"""spawn → ``initialize`` at most this many times a bare MCPServer's, in the same run."""


def target_rows(
    runs: Sequence[SearchRun], adds: dict[str, AddRun], cold: coldstart.ColdStart | None
) -> list[list[object]]:
    """``[figure, measured, target, meets target]`` for the in-process and start-up targets."""
    rows: list[list[object]] = []
    for run in runs:
        p50, floor = percentiles(run.total)[0], floor_ms(run)
        rows.append([f"in-engine search p50 at {run.size:,}, ms", f"{p50:.1f} ({p50 / floor:.1f}× floor {floor:.1f})",
                     f"≤ {ENGINE_SEARCH_FLOOR_RATIO}× floor", report.yes(p50 <= ENGINE_SEARCH_FLOOR_RATIO * floor)])
    for label, add in adds.items():
        rate = add.batch_count / add.batch_seconds
        rows.append([f"`add_many` of {add.batch_count:,}, {label}, memories/s", f"{rate:.0f}",
                     f"≥ {TARGET_ADD_MANY_PER_S:.0f}", report.yes(rate >= TARGET_ADD_MANY_PER_S)])
    if cold is not None:
        bare, served = cold.medians(coldstart.FLOOR), cold.medians(coldstart.TRIMEM)
        rows += [
            ["spawn → first search answered, s", f"{served.first_call:.2f}", f"≤ {TARGET_FIRST_SEARCH_S:.0f}",
             report.yes(served.first_call <= TARGET_FIRST_SEARCH_S)],
            ["spawn → `initialize`, s", (f"{served.initialize:.2f} ({served.initialize / bare.initialize:.2f}× "
             f"bare MCPServer {bare.initialize:.2f})"), f"≤ {TARGET_INITIALIZE_RATIO}× bare",
             report.yes(served.initialize <= TARGET_INITIALIZE_RATIO * bare.initialize)],
        ]
    return rows


def markdown(
    runs: Sequence[SearchRun], adds: dict[str, AddRun], cold: coldstart.ColdStart | None, command: str,
    environment: str, n_queries: int, deleted: DeleteRun | None = None, over_stdio: stdio.OverStdio | None = None,
) -> str:
    rows = target_rows(runs, adds, cold) + (stdio.target_rows(*over_stdio) if over_stdio else [])
    targets = report.table(["figure", "measured", "target", "meets target"], rows)
    stdio_section = ""
    if over_stdio:
        stdio_section = stdio.markdown(*over_stdio, floor_ms(runs[0]) if runs else None, targets=False)
    cold_section = coldstart.markdown(cold) if cold else ""
    overfetch = runs[0].overfetch if runs else "k"
    return f"""## Speed and memory

`{command}`

{environment}

### Targets

Every figure of this run beside its target; the floors and baselines behind each are in the tables below,
measured in the same run.

{targets}

{stdio_section}

### Search latency (warm, one scope, `top_k={TOP_K}`)

{n_queries} LoCoMo questions per size after 10 warm-up searches; each stage is timed inside the real
`Engine.search` call (`bench/stages.py`), "fusion + assembly" is the rest of the call (validation, row
fetch, gate, fusion, result objects). "prepare" holds two things done side by side: the query embeds on
the engine's side thread while spaCy reads it, then the query's entities embed in one batch; their own
times (the rows marked "side by side") overlap inside it.
The floors are measured in the same run on the same queries: one model forward pass for the query alone,
and numpy's exact top-{overfetch} (the KNN's over-fetch) by matrix product + `argpartition`
over the vectors read back from `memory_vectors`.

{search_table(runs)}

### Building the scope, and database size

Each size is reached by `Engine.add_many` in batches of {BUILD_CHUNK:,} from the previous size. Texts: the
2,760 distinct LoCoMo turns, then the same turns with a stop-word opening after the speaker ("Caroline: Also,
…", 40 openings). **Vectors beyond the real turns are not from the model**: to keep the 100,000 build within
minutes on 2 cores, the scope is built through `Engine.add_many` with stand-in models (`Replay` in
`bench/replay.py`): each real turn is analysed and embedded by the real models once; a repeated turn gets its
turn's spaCy analysis (identical BM25 terms, since the opening is a stop word; on a sample of 60 the real
entities matched for 42) and its turn's vector plus Gaussian noise, renormalised (median cosine 0.99 to
its turn, as the model gives for such pairs). All SQL is the engine's own. Searches are then made by an
engine with the real models. Real add throughput is in the next table. File size after the last connection
closed (WAL checkpointed).

{build_table(runs)}

### Add

Into an empty database: single `Engine.add` calls (a text each), then one `Engine.add_many` of 1,000
texts into an empty scope. "SQL" is the rest of the call: hash look-ups, inserts into the memory, vector,
keyword postings, entity and history tables, entity matching, commit.

{add_table(adds)}

### Forget a scope

One `Engine.delete_all` of a scope built as above, in one transaction: each memory's row, vector, keyword
postings, links and history event, then one pass removing the entities left without links (one pass per
transaction, not two per deleted memory).

{delete_table(deleted)}

{cold_section}
"""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="comma-separated scope sizes")
    parser.add_argument("--queries", type=int, default=200, help="questions timed per size")
    parser.add_argument("--singles", type=int, default=100, help="single adds timed")
    parser.add_argument("--batch", type=int, default=1000, help="memories in the add_many batch")
    parser.add_argument("--threads", type=int, default=0, help="inference threads (default: the config's)")
    parser.add_argument("--compare-backend", default="torch",
                        help="also time adds with this embedding backend, as the baseline ('' for none)")
    parser.add_argument("--skip", default="",
                        help="comma-separated parts to skip: search, add, delete, stdio, coldstart")
    parser.add_argument("--adds-over-stdio", type=int, default=10_000, help="single adds in the RSS series")
    parser.add_argument("--delete-all", type=int, default=10_000, help="memories in the timed delete_all")
    parser.add_argument("--db", type=Path, default=report.RESULTS / "speed.db", help="search benchmark database")
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = parser.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))

    report.RESULTS.mkdir(parents=True, exist_ok=True)
    base = load_config(environ={})
    threads = args.threads or base.store.inference_threads
    base = base.replace("store", inference_threads=threads)
    embedder = backend_embedder(base, base.store.embedding_backend)
    nlp = NLP()
    embedder.load()
    nlp.load()
    samples = locomo.load()
    questions = corpus.queries(samples, args.queries)

    runs: list[SearchRun] = []
    if "search" not in skip:
        sqlite_file.remove_db(args.db)
        sizes = [int(size) for size in args.sizes.split(",")]
        runs = search_runs(base.replace("store", db_path=str(args.db)), embedder, nlp, sizes, questions)

    adds: dict[str, AddRun] = {}
    if "add" not in skip:
        add_db = report.RESULTS / "speed-add.db"
        sqlite_file.remove_db(add_db)
        texts = corpus.texts(samples, 2 * (args.singles + args.batch + 1))
        with Engine(base.replace("store", db_path=str(add_db)), embedder=embedder, nlp=nlp) as engine:
            adds[f"{embedder.backend} (default)"] = measure_add(engine, texts, args.singles, args.batch, "a1")
        if args.compare_backend and args.compare_backend != base.store.embedding_backend:
            baseline = backend_embedder(base, args.compare_backend)
            baseline.load()
            rest = texts[args.singles + args.batch + 1 :]
            with Engine(base.replace("store", db_path=str(add_db)), embedder=baseline, nlp=nlp) as engine:
                adds[f"{baseline.backend} (baseline)"] = measure_add(engine, rest, args.singles, args.batch, "a2")
        print("  add measured", file=sys.stderr, flush=True)

    deleted = None
    if "delete" not in skip:
        deleted = measure_delete_all(base, embedder, nlp, args.delete_all)
        print(f"  delete_all of {deleted.memories} memories: {deleted.seconds:.2f} s", file=sys.stderr, flush=True)

    over_stdio = None
    if "stdio" not in skip:
        turns = [turn.text for sample in samples for turn in sample.memories]
        over_stdio = stdio.OverStdio(
            stdio.measure_search(turns, questions, memories=1000, queries=len(questions)),
            stdio.measure_rss(turns, args.adds_over_stdio),
            stdio.measure_cli(),
        )
        print("  stdio measured", file=sys.stderr, flush=True)

    cold = None if "coldstart" in skip else coldstart.measure()

    environment = report.environment(
        {"spaCy pipeline": nlp.tier, "embedding backend": embedder.backend, "inference threads": str(threads)}
    )
    section = markdown(runs, adds, cold, report.command_line(), environment, len(questions), deleted, over_stdio)
    report.publish("speed", section, not args.no_doc)
    return 0
