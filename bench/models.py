"""The embedding models side by side: what a stronger model costs a search and an import.

    python -m bench models [--models all-MiniLM-L6-v2,all-mpnet-base-v2] [--backends onnx,torch]
                           [--size 10000] [--queries 200] [--no-doc]

For each model and backend, in one run: one scope grown to ``--size`` memories as
``bench/ranking_cost.py`` grows it (``scope_search.grow`` with the ``Replay`` models, so the real
turns are embedded by the model measured), then warm searches with the default ranking, each
timed whole, beside their floor (the query's forward pass plus numpy's exact top-k over the
scope's vectors, ``scope_search.measure_floors``). The model's share of an import is its
throughput on the first 1,000 turns in batches. The first model and backend is the baseline
of every row. Recall is ``bench/quality.py``'s (``--embedding-model``, ``--embedding-backend``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench import corpus, locomo, report, sqlite_file
from bench.replay import Replay, backend_embedder
from bench.scope_search import SearchRun, floor_ms, grow, measure_floors, measure_search
from bench.timing import percentiles
from store import Engine, load_config
from store.analysis.nlp import NLP
from store.analysis.packaged_models import DEFAULT_MODEL, MPNET

IMPORT_TEXTS = 1000
"""Turns embedded in batches for the model's import throughput."""


def measure(model: str, backend: str, size: int, questions: Sequence[str], nlp: NLP, db: Path) -> list[object]:
    """One row: the model's query embedding, import throughput, and search p50 with its floor."""
    sqlite_file.remove_db(db)
    config = load_config(environ={}).replace("store", db_path=str(db), embedding_model=model)
    embedder = backend_embedder(config, backend)
    embedder.load()
    base_of = corpus.variants(locomo.load(), size)
    texts = list(base_of)
    started = time.perf_counter()
    embedder.embed_batch(texts[:IMPORT_TEXTS])
    throughput = IMPORT_TEXTS / (time.perf_counter() - started)
    run = SearchRun(size)
    with Engine(config, embedder=Replay(embedder, nlp, base_of), nlp=nlp) as engine:
        grow(engine, texts, run)
    with Engine(config, embedder=embedder, nlp=nlp) as engine:
        measure_floors(engine, questions, run)
        measure_search(engine, questions, run)
    sqlite_file.remove_db(db)
    forward = percentiles(run.forward_pass)[0]
    search, search_p95 = percentiles(run.total)
    floor = floor_ms(run)
    print(f"  {model} ({embedder.backend}): search {search:.1f} ms, floor {floor:.1f} ms", file=sys.stderr, flush=True)
    return [model, embedder.backend, embedder.dimension, forward, throughput, search, search_p95, floor, search / floor]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=f"{DEFAULT_MODEL},{MPNET.name}", help="comma-separated model names")
    parser.add_argument("--backends", default="onnx", help="comma-separated embedding backends")
    parser.add_argument("--size", type=int, default=10_000, help="memories in the searched scope")
    parser.add_argument("--queries", type=int, default=200, help="questions timed per model")
    parser.add_argument("--db", type=Path, default=report.RESULTS / "models.db", help="benchmark database")
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = parser.parse_args(argv)

    report.RESULTS.mkdir(parents=True, exist_ok=True)
    nlp = NLP()
    nlp.load()
    questions = corpus.queries(locomo.load(), args.queries)
    rows = [
        measure(model, backend, args.size, questions, nlp, args.db)
        for model in args.models.split(",") for backend in args.backends.split(",")
    ]
    baseline = rows[0][5]
    for row in rows:
        row.append(row[5] / baseline)
    headers = ["model", "backend", "dimension", "query embedding p50, ms", "import: texts/s embedded",
               f"search p50 at {args.size:,}, ms", "search p95, ms", "floor, ms", "search ÷ floor",
               f"search ÷ {rows[0][0]} ({rows[0][1]})"]
    section = "\n\n".join([
        "## Embedding models: what a search and an import cost",
        f"`{report.command_line()}`",
        report.environment({"spaCy pipeline": nlp.tier, "inference threads": "1"}),
        (f"One scope of {args.size:,} memories a model; {args.queries} warm searches, `top_k=10`, default ranking. "
         "The floor is the query's forward pass plus numpy's exact top-k over the scope's vectors, in the same run."),
        report.table(headers, rows),
    ])
    report.publish("models", section, not args.no_doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
