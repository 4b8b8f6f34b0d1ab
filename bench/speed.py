"""Speed and memory: search latency by stage at growing sizes, add cost, database size, cold start.

    python bench/speed.py [--sizes 1000,10000,100000] [--queries 200] [--no-doc]

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
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import coldstart, locomo, report, sqlite_file, stdio
from bench.stages import ADD_STAGES, PARALLEL_PARTS, SEARCH_STAGES, StageClock
from store import Config, Engine, load_config
from store.analysis.embeddings import Embedder, open_embedder
from store.analysis.nlp import NLP
from store.engine import MemoryInput
from store.ranking import scoring
from store.validation import normalized_hash

SCOPE = "speed"
TOP_K = 10
OPENINGS = tuple(
    word.capitalize()
    for word in ["also", "well", "so", "and", "but", "then", "yet", "still", "anyway", "besides", "indeed", "meanwhile", "moreover", "nevertheless", "otherwise", "therefore", "hence", "however", "perhaps", "sometimes", "often", "again", "really", "even", "just", "only", "quite", "rather", "together", "though", "thus", "somehow", "afterwards", "always", "already", "anyhow", "once", "here", "there", "now", "too"]
)
"""Stop words (spaCy's English list) that open a repeated turn: BM25 terms stay the turn's own."""
BUILD_CHUNK = 2000
SEARCH_ORDER = (
    "prepare (NLP ∥ query embedding)",
    "query embedding",
    "lemmatize + entities",
    "vector KNN",
    "keywords (BM25)",
    "entity lookup",
    "fusion + assembly",
)


# --- data ---------------------------------------------------------------------------------


def corpus(samples: Sequence[locomo.Sample], count: int) -> list[str]:
    """``count`` distinct memory texts: the real turns, then rounds of the same turns with a
    stop-word opening after the speaker ("Caroline: Also, …")."""
    return list(variants(samples, count))


def variants(samples: Sequence[locomo.Sample], count: int) -> dict[str, str]:
    """``count`` distinct texts, each mapped to the real turn it repeats (itself for a real turn).

    The openings are spaCy stop words, so a variant's BM25 terms are exactly its turn's.
    """
    turns = [turn.text for sample in samples for turn in sample.memories]
    texts: dict[str, str] = {}
    seen: set[str] = set()
    for opening in ("", *OPENINGS):
        for text in turns:
            speaker, body = text.split(":", 1)
            candidate = f"{speaker}: {opening}, {body.strip()}" if opening else text
            digest = normalized_hash(candidate)
            if digest not in seen:
                seen.add(digest)
                texts[candidate] = text
                if len(texts) == count:
                    return texts
    raise ValueError(f"cannot make {count} distinct texts from this data (made {len(texts)})")


class Replay:
    """Build-time stand-in for the embedder and the NLP pipeline, for scopes beyond the real turns.

    A real turn is analysed and embedded by the real models (once, cached). A variant
    ("Caroline: Also, …") gets its turn's analysis (same BM25 terms: the opening is a
    stop word) and its turn's vector plus Gaussian noise, renormalised (median cosine 0.99 to
    its turn, as the model gives for such pairs). Entity names are embedded for
    real. Everything after the models — the SQL of ``Engine.add_many`` — is real.
    """

    def __init__(
        self, embedder: Embedder, nlp: NLP, base_of: dict[str, str], sigma: float = 0.0073
    ) -> None:
        self.name, self.dimension, self.tier = embedder.name, embedder.dimension, nlp.tier
        self.backend = f"replay of {embedder.backend}"
        self.expected_tier, self.loaded = self.tier, True  # what Engine.status reads of an NLP
        self._embedder, self._nlp, self._base_of, self._sigma = embedder, nlp, base_of, sigma
        self._vectors: dict[str, np.ndarray] = {}
        self._analyses: dict[str, object] = {}
        self._random = np.random.default_rng(0)
        self.model_texts = 0

    def analyze_batch(self, texts: Sequence[str]) -> list:
        bases = [self._base_of.get(text, text) for text in texts]
        missing = list(dict.fromkeys(base for base in bases if base not in self._analyses))
        self._analyses.update(zip(missing, self._nlp.analyze_batch(missing)))
        return [self._analyses[base] for base in bases]

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        bases = [self._base_of.get(text, text) for text in texts]
        missing = list(dict.fromkeys(base for base in bases if base not in self._vectors))
        if missing:
            self._vectors.update(zip(missing, self._embedder.embed_batch(missing)))
            self.model_texts += len(missing)
        rows = np.stack([self._vectors[base] for base in bases]) if bases else np.zeros((0, self.dimension))
        varied = np.array([text != base for text, base in zip(texts, bases)])
        if varied.any():
            noisy = rows[varied] + self._random.normal(0.0, self._sigma, (int(varied.sum()), self.dimension))
            rows[varied] = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)
        return rows.astype(np.float32)


def queries(samples: Sequence[locomo.Sample], count: int) -> list[str]:
    """A fixed, shuffled sample of the data's questions."""
    texts = [question.text for sample in samples for question in sample.questions]
    random.Random(0).shuffle(texts)
    return texts[:count]


def percentiles(values: Sequence[float]) -> tuple[float, float]:
    """p50 and p95 in milliseconds of durations in seconds."""
    p50, p95 = np.percentile(np.asarray(values) * 1000.0, [50, 95])
    return float(p50), float(p95)


# --- search --------------------------------------------------------------------------------


@dataclass
class SearchRun:
    """Latencies at one size, in seconds per query, by stage."""

    size: int
    total: list[float] = field(default_factory=list)
    stages: dict[str, list[float]] = field(default_factory=dict)
    forward_pass: list[float] = field(default_factory=list)
    numpy_topk: list[float] = field(default_factory=list)
    file_bytes: int = 0
    build_seconds: float = 0.0
    build_stages: dict[str, float] = field(default_factory=dict)
    built: int = 0
    model_texts: int = 0
    overfetch: int = 0
    """The KNN's over-fetch at ``TOP_K`` under the searching engine's configuration: the floor's k."""


def measure_search(engine: Engine, questions: Sequence[str], run: SearchRun, warmup: int = 10) -> None:
    """Warm searches, each timed whole and by stage (the rest is fusion + assembly)."""
    clock = StageClock()
    for question in questions[:warmup]:
        engine.search(question, user_id=SCOPE, top_k=TOP_K)
    stages: dict[str, list[float]] = {name: [] for name in SEARCH_ORDER}
    with clock.active(engine, SEARCH_STAGES):
        for question in questions:
            clock.reset()
            started = time.perf_counter()
            engine.search(question, user_id=SCOPE, top_k=TOP_K)
            total = time.perf_counter() - started
            parts = clock.reset()
            run.total.append(total)
            for name in SEARCH_ORDER[:-1]:
                stages[name].append(parts.get(name, 0.0))
            stages["fusion + assembly"].append(clock.rest(total, parts))
    run.stages = stages


def stored_vectors(engine: Engine) -> np.ndarray:
    """Every vector of the benchmark scope, read back from ``memory_vectors``."""
    with sqlite_file.reading(engine.backend.path) as view:
        rows = view.conn.execute("SELECT embedding FROM memory_vectors WHERE user_id = ?", (SCOPE,)).fetchall()
    return np.frombuffer(b"".join(row[0] for row in rows), dtype=np.float32).reshape(len(rows), -1)


def measure_floors(engine: Engine, questions: Sequence[str], run: SearchRun) -> None:
    """One model forward pass per query; numpy exact top-k (the KNN's over-fetch) over the stored vectors."""
    vectors = stored_vectors(engine)
    options = engine.config.search
    run.overfetch = scoring.internal_limit(TOP_K, options.overfetch_factor, options.overfetch_minimum)
    k = min(run.overfetch, len(vectors))
    for question in questions:
        started = time.perf_counter()
        (query,) = engine.embedder.embed_batch([question])
        run.forward_pass.append(time.perf_counter() - started)
        started = time.perf_counter()
        similarities = vectors @ query
        top = np.argpartition(-similarities, k - 1)[:k]
        top[np.argsort(-similarities[top])]
        run.numpy_topk.append(time.perf_counter() - started)


def grow(engine: Engine, texts: Sequence[str], run: SearchRun) -> None:
    """Add texts to the benchmark scope in batches, timing embed / NLP / the rest (SQL)."""
    clock = StageClock()
    started = time.perf_counter()
    with clock.active(engine, ADD_STAGES):
        for lo in range(0, len(texts), BUILD_CHUNK):
            engine.add_many([MemoryInput(text) for text in texts[lo : lo + BUILD_CHUNK]], user_id=SCOPE)
    run.build_seconds = time.perf_counter() - started
    run.build_stages = clock.reset()
    run.built = len(texts)


def file_bytes(path: Path) -> int:
    """The database file and its WAL, if any."""
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def search_runs(
    base: Config, embedder: Embedder, nlp: NLP, sizes: Sequence[int], questions: Sequence[str]
) -> list[SearchRun]:
    """Grow one scope through every size; measure search and floors at each.

    The scope is built with the ``Replay`` models (real models for the distinct turns);
    every search is then made by an engine with the real models.
    """
    base_of = variants(locomo.load(), max(sizes))
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
        run.file_bytes = file_bytes(base.database)
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
    base_of = variants(locomo.load(), count)
    replay = Replay(embedder, nlp, base_of)
    path = report.RESULTS / "speed-delete.db"
    remove_db(path)
    run = DeleteRun()
    with Engine(base.replace("store", db_path=str(path)), embedder=replay, nlp=replay) as engine:
        texts = list(base_of)
        for lo in range(0, len(texts), BUILD_CHUNK):
            engine.add_many([MemoryInput(text) for text in texts[lo : lo + BUILD_CHUNK]], user_id=SCOPE)
        run.entities = engine.status()["counts"]["entities"]
        started = time.perf_counter()
        run.memories = engine.delete_all(user_id=SCOPE)
        run.seconds = time.perf_counter() - started
    remove_db(path)
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


def floor_ms(run: SearchRun) -> float:
    """The unavoidable work of one search, ms p50: one forward pass for the query plus an exact top-k."""
    return percentiles(run.forward_pass)[0] + percentiles(run.numpy_topk)[0]


def target_rows(
    runs: Sequence[SearchRun], adds: dict[str, AddRun], cold: coldstart.ColdStart | None
) -> list[list[object]]:
    """``[figure, measured, target, meets target]`` for the in-process and start-up targets."""
    rows: list[list[object]] = []
    for run in runs:
        p50, floor = percentiles(run.total)[0], floor_ms(run)
        rows.append([f"in-engine search p50 at {run.size:,}, ms", f"{p50:.1f} ({p50 / floor:.1f}× floor {floor:.1f})",
                     f"≤ {ENGINE_SEARCH_FLOOR_RATIO}× floor", stdio.yes(p50 <= ENGINE_SEARCH_FLOOR_RATIO * floor)])
    for label, add in adds.items():
        rate = add.batch_count / add.batch_seconds
        rows.append([f"`add_many` of {add.batch_count:,}, {label}, memories/s", f"{rate:.0f}",
                     f"≥ {TARGET_ADD_MANY_PER_S:.0f}", stdio.yes(rate >= TARGET_ADD_MANY_PER_S)])
    if cold is not None:
        bare, served = cold.medians(coldstart.FLOOR), cold.medians(coldstart.TRIMEM)
        rows += [
            ["spawn → first search answered, s", f"{served.first_call:.2f}", f"≤ {TARGET_FIRST_SEARCH_S:.0f}",
             stdio.yes(served.first_call <= TARGET_FIRST_SEARCH_S)],
            ["spawn → `initialize`, s", (f"{served.initialize:.2f} ({served.initialize / bare.initialize:.2f}× "
             f"bare MCPServer {bare.initialize:.2f})"), f"≤ {TARGET_INITIALIZE_RATIO}× bare",
             stdio.yes(served.initialize <= TARGET_INITIALIZE_RATIO * bare.initialize)],
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
`bench/speed.py`): each real turn is analysed and embedded by the real models once; a repeated turn gets its
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
    questions = queries(samples, args.queries)

    runs: list[SearchRun] = []
    if "search" not in skip:
        remove_db(args.db)
        sizes = [int(size) for size in args.sizes.split(",")]
        runs = search_runs(base.replace("store", db_path=str(args.db)), embedder, nlp, sizes, questions)

    adds: dict[str, AddRun] = {}
    if "add" not in skip:
        add_db = report.RESULTS / "speed-add.db"
        remove_db(add_db)
        texts = corpus(samples, 2 * (args.singles + args.batch + 1))
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
    print(section)
    if not args.no_doc:
        report.write_section("speed", section)
    return 0


def backend_embedder(config: Config, backend: str) -> Embedder:
    """The configured model on ``backend``, with the configuration's model cache and threads."""
    store = config.store
    return open_embedder(
        store.embedding_model, backend, cache_dir=config.model_cache_dir, threads=store.inference_threads  # type: ignore[arg-type]
    )


def remove_db(path: Path) -> None:
    """Delete a benchmark database file and its WAL and shared-memory files."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


if __name__ == "__main__":
    raise SystemExit(main())
