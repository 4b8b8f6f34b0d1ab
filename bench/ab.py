"""Two checkouts of trimem timed against each other in one run: search and add, interleaved.

    python -m bench ab --old ../trimem-before [--new .] [--sample conv-26] [--queries 200] [--adds 200]

Each checkout runs in a process of its own (its code on ``PYTHONPATH``), with the real
models and its own database file holding the same conversation, added turn by turn as a
user's assistant would. The parent asks both the same thing in turn, alternating who
goes first, so a busy moment of a shared machine falls on both alike:

- **search**: each of the conversation's questions, warm, ``top_k=10``;
- **add**: one new memory each (a turn of another conversation), so every add writes.

Beside them, measured in the same run by the new checkout's process, the floor: one
forward pass of the embedding model for the text, the part of either call no storage
change can remove. The figure is each call's p50, and new ÷ old.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from bench import locomo, report

WORKER = r"""
import json, sys, time
from store import Engine, MemoryInput, load_config

database, turns = sys.argv[1], json.loads(sys.argv[2])
config = load_config(environ={}).replace("store", db_path=database)
engine = Engine(config)
engine.warm_up()
for start in range(0, len(turns), 64):
    engine.add_many([MemoryInput(text) for text in turns[start:start + 64]], user_id="ab")
print("ready", flush=True)
for line in sys.stdin:
    kind, text = json.loads(line)
    started = time.perf_counter()
    if kind == "search":
        engine.search(text, user_id="ab", top_k=10)
    elif kind == "add":
        engine.add(text, user_id="ab")
    else:
        engine.embedder.embed_batch([text])
    print(time.perf_counter() - started, flush=True)
"""


class Checkout:
    """One checkout's worker process: asked one call at a time, answers its seconds."""

    def __init__(self, root: Path, database: Path, turns: Sequence[str]) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{database}{suffix}").unlink(missing_ok=True)
        environment = {**os.environ, "PYTHONPATH": str(root)}
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(database), json.dumps(list(turns))], env=environment, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        assert self._answer() == "ready"

    def _answer(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def time(self, kind: str, text: str) -> float:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps([kind, text]) + "\n")
        self.process.stdin.flush()
        return float(self._answer())

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait()


def interleaved(old: Checkout, new: Checkout, kind: str, texts: Sequence[str]) -> tuple[list[float], list[float]]:
    """Seconds per call of each checkout, both asked each text in turn, alternating who goes first."""
    times: dict[int, list[float]] = {id(old): [], id(new): []}
    for i, text in enumerate(texts):
        for checkout in (old, new) if i % 2 == 0 else (new, old):
            times[id(checkout)].append(checkout.time(kind, text))
    return times[id(old)], times[id(new)]


def ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, required=True, help="the checkout to compare against")
    parser.add_argument("--new", type=Path, default=Path(__file__).resolve().parents[1], help="this checkout")
    parser.add_argument("--sample", default="conv-26", help="the conversation stored and asked")
    parser.add_argument("--queries", type=int, default=200, help="searches timed per checkout")
    parser.add_argument("--adds", type=int, default=200, help="adds timed per checkout")
    args = parser.parse_args(argv)

    samples = locomo.load()
    sample = next(s for s in samples if s.sample_id == args.sample)
    extra = [turn.text for s in samples if s.sample_id != args.sample for turn in s.memories][: args.adds]
    questions = [question.text for question in sample.questions][: args.queries]
    turns = [turn.text for turn in sample.memories]
    report.RESULTS.mkdir(parents=True, exist_ok=True)
    old = Checkout(args.old.resolve(), report.RESULTS / "ab-old.db", turns)
    new = Checkout(args.new.resolve(), report.RESULTS / "ab-new.db", turns)
    try:
        rows = []
        for kind, texts in (("search", questions), ("add", extra)):
            before, after = interleaved(old, new, kind, texts)
            floor = [new.time("embed", text) for text in texts]
            rows.append(f"| {kind} | {len(texts)} | {ms(before):.2f} | {ms(after):.2f} | {ms(after) / ms(before):.3f} "
                        f"| {ms(floor):.2f} |")
    finally:
        old.close()
        new.close()
    print(f"{len(turns)} memories of {args.sample} in each checkout's own database; p50 in ms\n")
    print("| call | timed | old | new | new ÷ old | floor (one embedding) |\n|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0
