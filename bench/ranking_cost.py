"""What the default ranking costs over Mem0's: search p50 of both, interleaved, at growing sizes.

    python -m bench ranking_cost [--sizes 1000,10000] [--queries 300] [--rounds 2] [--ranking R] [--baseline B]

One scope grows to each size exactly as ``bench/speed.py`` builds it (``scope_search.grow`` with
the ``Replay`` models). At each size two engines with the real models are open on the
same file: the configuration's ranking (the default, ``ranking = "learned"``) and
``ranking = "mem0"``. Each question is asked of both, warm, ``top_k=10``, in alternating
order, so a busy moment of a shared machine falls on both alike; the figure is the ratio
of their p50s (``--ranking`` and ``--baseline`` measure another pair: ``--baseline trimem`` is
what learned fusion costs over the hand-set fusion it reorders). Beside it, measured in the same
run, the floor: one forward pass of the model for the query plus a numpy top-k over the stored
vectors. The budget is a ratio
of at most 1.2. "nothing" is the share of the questions the default answered with no memory
(the relevance decision, ``store/ranking/relevance.py``): the scope holds the conversations in file
order, so at 10,000 every question has its conversation there, while at 1,000 only the first
two and a half conversations are in, and the other questions are foreign to it. Then the facts
of ``bench/everyday.py`` are added to the scope: at each size, the share of their questions
whose memory is in the default's top 3, and the share of the questions none of the facts
answers that get nothing (some of those, such as "What is John's job?", are answered by the
chats, which are about John, Caroline, Paris, pets and baking).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench import corpus, everyday, locomo, report, sqlite_file
from bench.replay import Replay, backend_embedder
from bench.scope_search import SCOPE, TOP_K, SearchRun, floor_ms, grow, measure_floors
from bench.timing import percentiles
from store import Engine, MemoryInput, load_config
from store.analysis.nlp import NLP

BUDGET = 1.2
"""The default's search p50 may be at most this many times Mem0's."""
WARMUP = 10


def interleaved(default: Engine, mem0: Engine, questions: Sequence[str]) -> tuple[list[float], list[float], int]:
    """Seconds per search of each engine, the two asked each question in turn, alternating who goes
    first; and how many questions the default answered with nothing."""
    for question in questions[:WARMUP]:
        default.search(question, user_id=SCOPE, top_k=TOP_K)
        mem0.search(question, user_id=SCOPE, top_k=TOP_K)
    times: dict[int, list[float]] = {id(default): [], id(mem0): []}
    nothing = 0
    for index, question in enumerate(questions):
        for engine in (default, mem0) if index % 2 == 0 else (mem0, default):
            started = time.perf_counter()
            hits = engine.search(question, user_id=SCOPE, top_k=TOP_K)
            times[id(engine)].append(time.perf_counter() - started)
            nothing += engine is default and not hits
    return times[id(default)], times[id(mem0)], nothing


def asked_everyday(engine: Engine) -> tuple[float, float]:
    """Add the everyday facts to the scope (once), then the share of their questions answered with
    their memory in the top 3, and the share of unrelated questions answered with nothing."""
    engine.add_many([MemoryInput(fact) for fact in everyday.FACTS], user_id=SCOPE)
    found = [answer in [hit.memory.text for hit in engine.search(query, user_id=SCOPE, top_k=3)]
             for query, answer in everyday.ANSWERABLE.items()]
    nothing = [not engine.search(query, user_id=SCOPE) for query in everyday.UNRELATED]
    return sum(found) / len(found), sum(nothing) / len(nothing)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000", help="comma-separated scope sizes")
    parser.add_argument("--queries", type=int, default=300, help="questions timed per size and round")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds per size")
    parser.add_argument("--db", type=Path, default=report.RESULTS / "ranking-cost.db", help="benchmark database")
    parser.add_argument("--ranking", default="", help="the ranking measured (default: the configuration's)")
    parser.add_argument("--baseline", default="mem0", help="the ranking it is measured against")
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = parser.parse_args(argv)

    report.RESULTS.mkdir(parents=True, exist_ok=True)
    sqlite_file.remove_db(args.db)
    base = load_config(environ={}).replace("store", db_path=str(args.db))
    embedder = backend_embedder(base, base.store.embedding_backend)
    nlp = NLP()
    embedder.load()
    nlp.load()
    sizes = sorted(int(size) for size in args.sizes.split(","))
    base_of = corpus.variants(locomo.load(), max(sizes))
    texts = list(base_of)
    replay = Replay(embedder, nlp, base_of)
    questions = corpus.queries(locomo.load(), args.queries)
    rows, everyday_rows = [], []
    stored = 0
    for size in sizes:
        run = SearchRun(size)
        with Engine(base, embedder=replay, nlp=replay) as engine:
            grow(engine, texts[stored:size], run)
        stored = size
        measured = base.replace("search", ranking=args.ranking or base.search.ranking)
        with (
            Engine(measured, embedder=embedder, nlp=nlp) as default,
            Engine(base.replace("search", ranking=args.baseline), embedder=embedder, nlp=nlp) as mem0,
        ):
            measure_floors(default, questions, run)
            floor = floor_ms(run)
            for round_ in range(1, args.rounds + 1):
                ours, theirs, nothing = interleaved(default, mem0, questions)
                p50, p50_mem0 = percentiles(ours)[0], percentiles(theirs)[0]
                rows.append([f"{size:,}", round_, p50, p50_mem0, p50 / p50_mem0, floor, nothing / len(questions)])
                print(f"  {size:>7} round {round_}: {p50:.1f} vs {p50_mem0:.1f} ms", file=sys.stderr, flush=True)
            everyday_rows.append([f"{size:,}", *asked_everyday(default)])
    environment = report.environment({"spaCy pipeline": nlp.tier, "embedding backend": embedder.backend})
    headers = ["memories", "round", f"{args.ranking or 'default'} p50, ms", f"{args.baseline} p50, ms", "ratio",
               "floor, ms", "nothing"]
    everyday_headers = ["memories (+ the everyday facts)", "answerable: memory in top 3",
                        "unrelated to the facts: nothing"]
    section = "\n\n".join([
        "## What the default ranking costs: search p50 beside Mem0's, in one run",
        f"`{report.command_line()}`", environment, report.table(headers, rows), f"Budget: ratio ≤ {BUDGET}.",
        report.table(everyday_headers, everyday_rows),
    ])
    report.publish("ranking_cost", section, not args.no_doc)
    return 0 if all(row[4] <= BUDGET for row in rows) else 1
