"""How long ``trimem ui`` takes to answer a search, beside the engine's own search time.

    python -m bench ui [--memories 10000] [--queries 100] [--no-doc]

One scope is built to ``--memories`` LoCoMo turns as ``bench/speed.py`` builds it
(``Replay``: real models for the distinct turns, real SQL). Then, in the same run and
for the same questions, warm, taking turns question by question:

- floor: ``Engine.explain`` in this process, the one engine call the page makes for a
  search (with every score part, the query analysis and the dropped candidates), and
  ``Engine.search`` beside it for reference;
- server: ``GET /search`` of a real ``trimem ui --no-browser`` process on that file, over
  loopback HTTP (the engine call, rendering the fragment, HTTP);
- browser: in headless Chromium (/usr/bin/chromium, through Playwright), from submitting
  the search box until the new results are in the page, bars drawn, and a frame painted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from bench import corpus, locomo, report
from bench.replay import Replay, backend_embedder
from bench.scope_search import SCOPE, SearchRun, grow
from bench.timing import percentiles
from store import Engine, load_config
from store.analysis.nlp import NLP

WARMUP = 5
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
BROWSER_SEARCH = """async (query) => {
    const form = document.getElementById('controls');
    const results = document.getElementById('results');
    const answered = new Promise(resolve => new MutationObserver((_, observer) => {
        observer.disconnect();
        requestAnimationFrame(() => requestAnimationFrame(resolve));  // the frame with the bars, painted
    }).observe(results, {childList: true}));
    const started = performance.now();
    form.elements.q.value = query;
    form.requestSubmit();
    await answered;
    return performance.now() - started;
}"""


def wall(call: Callable[[str], object]) -> Callable[[str], float]:
    """``call``, returning the seconds it took."""

    def timed(question: str) -> float:
        started = time.perf_counter()
        call(question)
        return time.perf_counter() - started

    return timed


def interleaved(timers: dict[str, Callable[[str], float]], questions: Sequence[str]) -> dict[str, list[float]]:
    """Seconds per question for each timer, the timers taking turns question by question (so a
    change in the machine's load falls on every row alike), after a few untimed warm-ups."""
    for question in questions[:WARMUP]:
        for timer in timers.values():
            timer(question)
    times: dict[str, list[float]] = {name: [] for name in timers}
    for question in questions:
        for name, timer in timers.items():
            times[name].append(timer(question))
    return times


def start_ui(db: Path, log: Path) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "TRIMEM_DB_PATH": str(db), "TRIMEM_USER_ID": SCOPE}
    process = subprocess.Popen(
        [sys.executable, "-m", "mcp_server", "ui", "--no-browser", "--port", "0"],
        stdout=subprocess.PIPE, stderr=log.open("w"), text=True, env=env,
        cwd=Path(__file__).resolve().parents[1],
    )
    line = process.stdout.readline()
    match = re.fullmatch(r"trimem ui: (\S+)\n", line)
    if not match:
        process.terminate()
        raise SystemExit(f"trimem ui did not start: {line!r}; see {log}")
    return process, match.group(1)


def fetch_search(url: str, query: str) -> None:
    with urllib.request.urlopen(f"{url}search?{urllib.parse.urlencode({'q': query})}", timeout=60) as response:
        if response.status != 200:
            raise SystemExit(f"search answered {response.status}")
        response.read()


@contextlib.contextmanager
def browser_page(url: str) -> Iterator[Any]:
    """The page, open in headless Chromium."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(url)
        yield page
        browser.close()


def markdown(size: int, top_k: int, rows: dict[str, list[float]], command: str, environment: str) -> str:
    lines = [
        f"## The page (`trimem ui`): a search at {size:,} memories",
        "",
        f"`{command}`. {environment}",
        "",
        (f"Warm, the same {len(next(iter(rows.values())))} LoCoMo questions for each row, the rows taking turns "
        f"question by question; the configured top_k ({top_k}), every score part. The floor is the engine call "
        "the page makes, timed in the same run. Other work on the machine slows every row alike (see the load "
        "average above): compare the rows with each other, and with other runs only at the same load."),
        "",
        report.table(
            ["", "p50 ms", "p95 ms"],
            [[name, *(f"{value:.1f}" for value in percentiles(times))] for name, times in rows.items()],
        ),
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=10_000, help="memories in the scope")
    parser.add_argument("--queries", type=int, default=100, help="questions timed")
    parser.add_argument("--db", type=Path, default=report.RESULTS / "ui.db", help="benchmark database")
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = parser.parse_args(argv)

    report.RESULTS.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{args.db}{suffix}").unlink(missing_ok=True)
    config = load_config(environ={})
    config = config.replace("store", db_path=str(args.db))
    embedder = backend_embedder(config, config.store.embedding_backend)
    nlp = NLP()
    embedder.load()
    nlp.load()
    samples = locomo.load()
    questions = corpus.queries(samples, args.queries)
    base_of = corpus.variants(samples, args.memories)
    replay = Replay(embedder, nlp, base_of)
    with Engine(config, embedder=replay, nlp=replay) as engine:
        grow(engine, list(base_of), SearchRun(args.memories))
    print(f"  built {args.memories} memories", file=sys.stderr, flush=True)

    with Engine(config, embedder=embedder, nlp=nlp) as engine:
        process, url = start_ui(args.db, report.RESULTS / "ui.log")
        try:
            with browser_page(url) as page:
                rows = interleaved(
                    {
                        "Engine.search, in process (no score parts)": wall(
                            lambda q: engine.search(q, user_id=SCOPE)
                        ),
                        "floor: Engine.explain, in process": wall(lambda q: engine.explain(q, user_id=SCOPE)),
                        "server: GET /search over loopback HTTP": wall(lambda q: fetch_search(url, q)),
                        # The page's own clock, from submitting the box to the painted frame.
                        "browser: submit to results painted": lambda q: page.evaluate(BROWSER_SEARCH, q) / 1000,
                    },
                    questions,
                )
        finally:
            process.terminate()
            process.wait(timeout=30)
    environment = report.environment({"spaCy pipeline": nlp.tier, "embedding backend": embedder.backend})
    section = markdown(args.memories, config.search.top_k, rows, report.command_line(), environment)
    report.publish("ui", section, not args.no_doc)
    return 0
