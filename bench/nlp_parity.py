"""Query and write analysis over the LoCoMo dev set: snapshot, compare, time.

    python -m bench nlp_parity dump SNAPSHOT.json      # analyses of the current code
    python -m bench nlp_parity compare SNAPSHOT.json   # differences against a snapshot
    python -m bench nlp_parity time [--passes 3] [--clock wall|cpu]  # per-query p50 / p95

``--pipeline blank`` (or a spaCy package name) before the command uses another tier.

Queries are every question of ``locomo-dev.json`` (all categories, 999), analysed
one at a time through the query path; writes are every turn of its conversations
(2,760), analysed in one batch through the write path. The query path is also asked
for terms only (``entities=False``, search with the entity signal off). A snapshot taken before a
change to ``store/analysis/nlp.py`` and compared after it shows whether any BM25 term or
entity moved.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from bench import locomo
from store.analysis.nlp import NLP, Analysis


def questions(path: Path = locomo.DEFAULT_PATH) -> list[str]:
    """Every question of the file, adversarial ones included, in file order."""
    with Path(path).open(encoding="utf-8") as handle:
        return [qa["question"] for sample in json.load(handle) for qa in sample["qa"]]


def turns(path: Path = locomo.DEFAULT_PATH) -> list[str]:
    """Every turn's memory text, in conversation order."""
    return [turn.text for sample in locomo.load(path) for turn in sample.memories]


def as_plain(analysis: Analysis) -> dict:
    """An analysis as JSON: terms and (type, text, normalized) of each entity."""
    return {
        "terms": analysis.lemmatized,
        "entities": [[e.entity_type, e.text, e.normalized] for e in analysis.entities],
    }


def analyse_all(nlp: NLP) -> dict[str, list[dict]]:
    """Query-path analyses of every question, write-path analyses of every turn."""
    return {
        "queries": [as_plain(nlp.analyze_query(q)) for q in questions()],
        # Search with the entity signal off asks for terms only: they must not move.
        "queries without entities": [as_plain(nlp.analyze_query(q, entities=False)) for q in questions()],
        "writes": [as_plain(a) for a in nlp.analyze_batch(turns())],
    }


def compare(snapshot: dict[str, list[dict]], current: dict[str, list[dict]]) -> int:
    """Print each difference; return how many analyses differ."""
    differing = 0
    texts = {"queries": questions(), "queries without entities": questions(), "writes": turns()}
    # The snapshot's query analyses, entities dropped: the terms-only path must give these.
    snapshot = {**snapshot, "queries without entities": [
        {"terms": a["terms"], "entities": []} for a in snapshot["queries"]
    ]}
    for side in texts:
        before, after = snapshot[side], current[side]
        assert len(before) == len(after), f"{side}: {len(before)} vs {len(after)} texts"
        changed = [i for i, (b, a) in enumerate(zip(before, after)) if b != a]
        for i in changed:
            print(f"{side}[{i}] {texts[side][i]!r}\n  before {before[i]}\n  after  {after[i]}")
        print(f"{side}: {len(changed)} of {len(before)} differ")
        differing += len(changed)
    return differing


def time_queries(nlp: NLP, passes: int, clock: str = "wall") -> list[float]:
    """Milliseconds per question (median over ``passes``) through the query path.

    ``clock="cpu"`` counts this thread's CPU time instead of wall time: on a machine
    shared with other jobs, time spent waiting for a core is not the analysis's.
    """
    now = time.thread_time if clock == "cpu" else time.perf_counter
    query = nlp.analyze_query
    texts = questions()
    for text in texts[:50]:  # warm caches
        query(text)
    runs: list[list[float]] = [[] for _ in texts]
    for _ in range(passes):
        for i, text in enumerate(texts):
            started = now()
            query(text)
            runs[i].append((now() - started) * 1000)
    return [statistics.median(r) for r in runs]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("dump").add_argument("snapshot", type=Path)
    sub.add_parser("compare").add_argument("snapshot", type=Path)
    timing = sub.add_parser("time")
    timing.add_argument("--passes", type=int, default=3)
    timing.add_argument("--clock", choices=["wall", "cpu"], default="wall", help="wall or this thread's CPU time")
    parser.add_argument("--pipeline", help="A spaCy pipeline or 'blank' (default: the tier search).")
    args = parser.parse_args(argv)

    nlp = NLP(args.pipeline)
    nlp.load()
    if args.command == "dump":
        args.snapshot.write_text(json.dumps(analyse_all(nlp), ensure_ascii=False))
        return 0
    if args.command == "compare":
        return 1 if compare(json.loads(args.snapshot.read_text()), analyse_all(nlp)) else 0
    ms = sorted(time_queries(nlp, args.passes, args.clock))
    p50, p95 = ms[len(ms) // 2], ms[int(len(ms) * 0.95)]
    print(f"query analysis ({args.clock} clock) over {len(ms)} questions, tier {nlp.tier}: "
          f"p50 {p50:.2f} ms, p95 {p95:.2f} ms, mean {statistics.fmean(ms):.2f} ms")
    return 0
