"""Export and import throughput, each beside its floor measured in the same run.

    python -m bench transfer [--memories 10000] [--no-doc]

A fresh database is filled with ``--memories`` distinct LoCoMo turns (the variants of
``bench/speed.py`` beyond the real ones), each with a little metadata, through
``Engine.add_many`` in chunks of 256 with the real models. Then:

- **export**: ``Engine.export()`` written to a file; its **floor** is a bare ``SELECT`` of
  the same rows in one read transaction, each written as a JSON line.
- **import**: ``Engine.import_memories`` of that file into a second fresh database, and
  the check pass (``dry_run=True``, what ``trimem import`` runs first) on its own; its
  **floor** is ``add_many`` of the same texts into a third fresh database, after the
  import: the batch write path an import cannot avoid (every memory embedded, parsed and
  linked again). Filling the first database warmed the models on the same texts (spaCy
  learns each new word once), so the import and its floor start equally warm.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench import corpus, locomo, report, sqlite_file
from bench.replay import backend_embedder
from store import Engine, MemoryInput, load_config
from store.analysis.nlp import NLP
from store.exchange.transfer import CHUNK, MEMORY_KEYS

SCOPE = "transfer"


def bare_select(path: Path, target: Path) -> int:
    """The export floor: every memory row read in one transaction and written as JSON, nothing else."""
    columns = MEMORY_KEYS
    count = 0
    with sqlite_file.reading(path) as view, target.open("w", encoding="utf-8") as out:
        for row in view.conn.execute(f"SELECT {', '.join(columns)} FROM memories ORDER BY rowid"):
            out.write(json.dumps(dict(zip(columns, row)), ensure_ascii=False) + "\n")
            count += 1
    return count


def timed(action):
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=10_000, help="memories exported and imported")
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = parser.parse_args(argv)

    base = load_config(environ={})
    embedder = backend_embedder(base, base.store.embedding_backend)
    nlp = NLP()
    embedder.load()
    nlp.load()
    texts = corpus.texts(locomo.load(), args.memories)
    items = [MemoryInput(text, {"n": i, "source": "bench"}) for i, text in enumerate(texts)]

    with tempfile.TemporaryDirectory(prefix="trimem-transfer-") as folder:
        work = Path(folder)
        source = Engine(base.replace("store", db_path=str(work / "source.db")), embedder=embedder, nlp=nlp)
        target = Engine(base.replace("store", db_path=str(work / "target.db")), embedder=embedder, nlp=nlp)
        floor = Engine(base.replace("store", db_path=str(work / "floor.db")), embedder=embedder, nlp=nlp)

        def add_all(engine: Engine) -> None:
            for start in range(0, len(items), CHUNK):
                engine.add_many(items[start : start + CHUNK], user_id=SCOPE)

        with source, target, floor:
            fill_s, _ = timed(lambda: add_all(source))
            print(f"  filled: {fill_s:.1f} s", file=sys.stderr, flush=True)
            export_path = work / "export.jsonl"

            def export() -> None:
                with export_path.open("w", encoding="utf-8") as out:
                    out.writelines(source.export())

            export_s, _ = timed(export)
            floor_s, selected = timed(lambda: bare_select(source.backend.path, work / "bare.jsonl"))
            check_s, checked = timed(lambda: target.import_memories(export_path, dry_run=True))
            import_s, imported = timed(lambda: target.import_memories(export_path))
            print(f"  import: {import_s:.1f} s", file=sys.stderr, flush=True)
            add_s, _ = timed(lambda: add_all(floor))
            assert selected == checked.read == imported.imported == args.memories, (selected, checked, imported)
            size_mb = export_path.stat().st_size / 1e6

    n = args.memories

    def rate(seconds: float) -> str:
        return f"{n / seconds:,.0f}"

    rows = [
        ["export (`Engine.export` to a file)", f"{n:,}", export_s, rate(export_s), "bare SELECT written as JSON",
         floor_s, rate(floor_s), f"{export_s / floor_s:.2f}"],
        ["import (`Engine.import_memories`)", f"{n:,}", import_s, rate(import_s), "`add_many` of the same texts",
         add_s, rate(add_s), f"{import_s / add_s:.2f}"],
        ["import check pass (`dry_run=True`)", f"{n:,}", check_s, rate(check_s), "", "", "", ""],
    ]
    section = "\n\n".join([
        "## Export and import",
        f"`{report.command_line()}`: {n:,} memories, export file {size_mb:.1f} MB. {report.environment()}",
        report.table(["operation", "memories", "seconds", "memories/s", "floor", "floor s", "floor memories/s",
                      "× floor"], rows, "lrrrlrrr"),
        ("The import floor is the batch write path itself (models and SQL for every memory), run after "
        "the import on equally warm models: an import embeds, parses and links every memory again rather "
        f"than trusting vectors from another database. (Filling the source database, the same `add_many` "
        f"on cold models, took {fill_s:.1f} s.) `trimem import` runs the check pass first, then the import."),
    ])
    report.publish("transfer", section, not args.no_doc)
    return 0
