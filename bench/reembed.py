"""Time to change the embedding model of a database, beside its floor.

    python -m bench reembed [--memories 10000]

Builds one scope of ``--memories`` LoCoMo-based memories as ``bench/speed.py`` does
(real SQL; stand-in models beyond the real turns, see ``replay.Replay``), then runs
``Engine.reembed`` into a copy of the packaged all-MiniLM-L6-v2 folder (another model
name, the same network, so the work is exactly that of a real model change of this
size). The floor, measured in the same run, is the unavoidable work: one embedding pass
of the very texts re-embedded (every memory's text and every entity's name).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bench import corpus, locomo, report, sqlite_file
from bench.replay import Replay, backend_embedder
from bench.scope_search import fill
from store import Engine, load_config
from store.analysis.nlp import NLP
from store.analysis.packaged_models import default_model_path


def measure(work: Callable[[], object]) -> tuple[float, float]:
    """Wall and CPU seconds of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - wall, time.process_time() - cpu


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=10_000, help="memories in the database")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="trimem-reembed-") as work:
        folder = Path(work) / "all-MiniLM-L6-v2"  # same folder name and weights: the same ONNX copy
        shutil.copytree(default_model_path(), folder)
        base = load_config(environ={}).replace("store", db_path=str(Path(work) / "reembed.db"))
        embedder = backend_embedder(base, base.store.embedding_backend)
        target = backend_embedder(base.replace("store", embedding_model=str(folder)),
                                        base.store.embedding_backend)
        nlp = NLP()
        for model in (embedder, target, nlp):
            model.load()
        texts = corpus.variants(locomo.load(), args.memories)
        replay = Replay(embedder, nlp, texts)
        with Engine(base, embedder=replay, nlp=replay) as engine:  # type: ignore[arg-type]
            fill(engine, list(texts))
            with sqlite_file.reading(engine.backend.path) as view:
                memory_texts = [row[0] for row in view.conn.execute("SELECT text FROM memories")]
                names = [row[0] for row in view.conn.execute("SELECT normalized FROM entities")]

        floors = [measure(lambda: target.embed_batch(memory_texts + names))]
        with Engine(base.replace("store", embedding_model=str(folder)), embedder=target, nlp=nlp,
                    reembedding=True) as engine:
            figure = measure(engine.reembed)
            result = engine.status()
        floors.append(measure(lambda: target.embed_batch(memory_texts + names)))

    floor = min(floors)  # before and after: the machine may be busier during one of them
    rows = [
        ["`Engine.reembed` (chunks, checks, switch)", f"{figure[0]:.1f} s", f"{figure[1]:.1f} s"],
        ["floor: embedding the same texts once", f"{floor[0]:.1f} s", f"{floor[1]:.1f} s"],
        ["overhead over the floor", f"{figure[0] / floor[0] - 1:+.0%}", f"{figure[1] / floor[1] - 1:+.0%}"],
    ]
    counts = result["counts"]
    print(f"Re-embedding {counts['memories']:,} memories and {counts['entities']:,} entities "
          f"({target.backend}, {report.cpu_model()}); CPU time is this process's, steadier than wall "
          "time on a shared machine:\n")
    print(report.table(["", "wall", "CPU"], rows, "lrr"))
    print(f"\n`{report.command_line()}`")
    return 0
