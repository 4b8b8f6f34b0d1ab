"""Over real stdio: warm search and add latency, resident memory under adds, one-shot ``trimem`` commands.

    python -m bench stdio [--memories 1000] [--queries 200] [--adds 10000] [--skip search,rss,cli]

Every tool call goes through the MCP SDK's own stdio client (``stdio_client`` +
``ClientSession``) to ``trimem serve`` spawned as a subprocess, as in ``bench/coldstart.py``:
the times include JSON-RPC framing, the pipes, validation and result serialisation. The
server gets a fresh ``TRIMEM_HOME`` in a temporary folder; the exported ONNX model is shared
through ``TRIMEM_MODEL_CACHE`` (taken from the environment, else ``bench/results/model-cache``),
so no run pays for, or carries the memory of, a model export. Resident memory is ``VmRSS``
from ``/proc/<pid>/status`` (Linux).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from bench import coldstart, corpus, locomo, report
from bench.timing import Latency, run_timed

if TYPE_CHECKING:
    from mcp.client.session import ClientSession

USER_ID = "stdio-bench"
TOP_K = 10
FILL_BATCH = 50
"""Messages per ``add_memory`` call while filling (not timed)."""
WARMUP = 10
CLI_QUERY = "What did Caroline research?"
CLI_REPEATS = 3

TARGET_SEARCH_P50_MS = 20.0
TARGET_SEARCH_P95_MS = 35.0
TARGET_ADD_P50_MS = 30.0
TARGET_CLI_SEARCH_S = 3.0
TARGET_RSS_MB = 350.0
TARGET_RSS_ADDS = 10_000
RSS_GROWTH_TOLERANCE_MB = 5.0
""""No growth" allows this much: allocator and SQLite page-cache noise, not a leak (~1 KB per add)."""


# --- results --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SearchLatency:
    """Warm ``search_memory`` (top_k=10) and single-text ``add_memory`` over stdio, one scope of ``memories``."""

    memories: int
    search: Latency
    add: Latency


@dataclass(frozen=True)
class RssRun:
    """Server resident memory (MB) while ``adds`` single ``add_memory`` calls arrive over stdio.

    ``series`` is ``(adds so far, VmRSS MB)``; ``growth_mb`` is RSS at the end minus RSS
    at the half-way point; ``adds_per_s`` is calls per second of client wall time.
    """

    adds: int
    series: tuple[tuple[int, float], ...]
    final_mb: float
    half_mb: float
    growth_mb: float
    adds_per_s: float


@dataclass(frozen=True)
class CliTimes:
    """Wall seconds of one-shot commands, median of ``repeats`` after one untimed run each."""

    search_s: float
    add_s: float
    version_s: float
    python_s: float
    repeats: int


@dataclass(frozen=True)
class OverStdio:
    """Every stdio measurement of one run, in ``markdown``'s argument order."""

    search: SearchLatency | None
    rss: RssRun | None
    cli: CliTimes | None

    def __iter__(self):
        return iter((self.search, self.rss, self.cli))


# --- the server -----------------------------------------------------------------------------


def model_cache() -> str:
    """The exported-model folder every spawned process shares: ``$TRIMEM_MODEL_CACHE``, else
    ``bench/results/model-cache`` (kept between runs, so only the first run ever exports)."""
    if cache := os.environ.get("TRIMEM_MODEL_CACHE"):
        return cache
    path = report.RESULTS / "model-cache"
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def server_env(home: Path) -> dict[str, str]:
    """Environment for a spawned ``trimem``: its own data folder and database, the shared model cache,
    and this checkout first on the path (the SDK's ``stdio_client`` passes no ``PYTHONPATH``, and an
    installed ``trimem`` may be another checkout's)."""
    return {
        "TRIMEM_HOME": str(home),
        "TRIMEM_DB_PATH": str(home / "memories.db"),
        "TRIMEM_MODEL_CACHE": model_cache(),
        "PYTHONPATH": str(report.ROOT),
    }


@asynccontextmanager
async def serve(home: Path) -> AsyncIterator[tuple[ClientSession, set[int]]]:
    """A ``ClientSession`` to a fresh ``trimem serve`` on ``home``, initialized, and the server's pid(s).

    The server's stderr goes to ``home/server.log``; the server is closed on exit, and a
    traceback in its log fails the run (figures from a server that crashed a call are not figures).
    """
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    command, args = coldstart.trimem_command()
    params = StdioServerParameters(command=command, args=args, env=server_env(home))
    before = coldstart.children()
    log = home / "server.log"
    with log.open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session, coldstart.children() - before
    if "Traceback" in (text := log.read_text()):
        raise RuntimeError(f"trimem serve logged a traceback:\n{text[-4000:]}")


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """One tool call that must succeed; its structured output (raises with the tool's message)."""
    result = await session.call_tool(tool, arguments)
    if result.is_error:
        raise RuntimeError(f"{tool} failed: {result.content[0].text if result.content else result}")
    return result.structured_content


async def timed(session: ClientSession, tool: str, **arguments: Any) -> float:
    """Seconds from sending one tool call to having its answer, on the client side."""
    started = time.perf_counter()
    await call(session, tool, **arguments)
    return time.perf_counter() - started


def rss_mb(pids: set[int]) -> float:
    """Current resident memory (``VmRSS``) of the given processes together, in MB."""
    total_kb = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total_kb += int(line.split()[1])
    return total_kb / 1024


# --- 1. search and add latency ----------------------------------------------------------------


async def _fill(session: ClientSession, texts: Sequence[str]) -> None:
    """Store texts as user messages, ``FILL_BATCH`` per ``add_memory`` call (not timed)."""
    for lo in range(0, len(texts), FILL_BATCH):
        messages = [{"role": "user", "content": text} for text in texts[lo : lo + FILL_BATCH]]
        await call(session, "add_memory", messages=messages, user_id=USER_ID)


async def _search_latency(turns: Sequence[str], questions: Sequence[str], memories: int, queries: int) -> SearchLatency:
    texts = corpus.suffixed(turns, memories + queries + 1)
    asked = corpus.cycle(questions, queries)
    with tempfile.TemporaryDirectory() as home:
        async with serve(Path(home)) as (session, _):
            await _fill(session, texts[:memories])
            for question in asked[:WARMUP]:
                await call(session, "search_memory", query=question, user_id=USER_ID, top_k=TOP_K)
            searches = [
                await timed(session, "search_memory", query=q, user_id=USER_ID, top_k=TOP_K) for q in asked
            ]
            await call(session, "add_memory", text=texts[memories], user_id=USER_ID)  # warm the single-add path
            adds = [await timed(session, "add_memory", text=t, user_id=USER_ID) for t in texts[memories + 1 :]]
    return SearchLatency(memories, Latency.of(searches), Latency.of(adds))


def measure_search(
    turns: Sequence[str], questions: Sequence[str], memories: int = 1000, queries: int = 200
) -> SearchLatency:
    """Warm search and single-add latency over stdio, ms p50/p95, with ``memories`` stored for one user.

    One server: ``memories`` distinct turns are stored (batches of messages, untimed), then
    ``WARMUP`` untimed searches, then ``queries`` timed ``search_memory`` calls (top_k=10,
    the questions cycled if fewer), then one untimed and ``queries`` timed single-text
    ``add_memory`` calls of texts not yet stored. Each time is the client's, send to answer.
    """
    return anyio.run(_search_latency, turns, questions, memories, queries)


# --- 2. resident memory under adds ------------------------------------------------------------


async def _rss_run(turns: Sequence[str], adds: int, sample_every: int) -> RssRun:
    texts = corpus.suffixed(turns, adds)
    half = adds // 2
    series: list[tuple[int, float]] = []
    with tempfile.TemporaryDirectory() as home:
        async with serve(Path(home)) as (session, pids):
            started = time.perf_counter()
            for done, text in enumerate(texts, start=1):
                await call(session, "add_memory", text=text, user_id=USER_ID)
                if done % sample_every == 0 or done in (1, half, adds):
                    series.append((done, rss_mb(pids)))
            elapsed = time.perf_counter() - started
    at = dict(series)
    return RssRun(adds, tuple(series), at[adds], at[half], at[adds] - at[half], adds / elapsed)


def measure_rss(turns: Sequence[str], adds: int = 10_000, sample_every: int = 500) -> RssRun:
    """Server RSS (MB) across ``adds`` single-text ``add_memory`` calls over stdio, and adds/s.

    One fresh server, one user, distinct texts (turns, then " (#n)" variants). ``VmRSS`` of
    the server process is read after the first add, every ``sample_every`` adds, at the
    half-way point and at the end; growth is end minus half-way. Adds/s is client wall time,
    RSS reads included (microseconds each).
    """
    if adds < 2 or sample_every < 1:
        raise ValueError(f"need adds >= 2 and sample_every >= 1, got adds={adds}, sample_every={sample_every}")
    return anyio.run(_rss_run, turns, adds, sample_every)


# --- 3. one-shot CLI ----------------------------------------------------------------------------


def median_wall_s(commands: Sequence[Sequence[str]], env: dict[str, str]) -> float:
    """Median wall seconds of ``commands[1:]`` (one run each); ``commands[0]`` runs first, untimed."""
    run_timed(commands[0], env)
    return statistics.median(run_timed(command, env)[0] for command in commands[1:])


def measure_cli(query: str = CLI_QUERY, repeats: int = CLI_REPEATS) -> CliTimes:
    """Wall time (s) of ``trimem --db DB search QUERY`` and ``trimem --db DB add TEXT`` as subprocesses.

    Median of ``repeats`` runs after one untimed run (model cache and OS file cache warm);
    each add is a new text, so the searches run on the few memories those adds stored.
    Floors in the same run: ``python -c pass`` and ``trimem --version`` (the CLI's imports).
    """
    script = coldstart.trimem_script()
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, **server_env(Path(home))}
        db = str(Path(home) / "memories.db")
        trimem = [*script, "--db", db]
        adds = [[*trimem, "add", f"Caroline researched adoption agencies (note {n})"] for n in range(repeats + 1)]
        add_s = median_wall_s(adds, env)
        searches = [[*trimem, "search", query]] * (repeats + 1)
        return CliTimes(
            search_s=median_wall_s(searches, env),
            add_s=add_s,
            version_s=median_wall_s([[*script, "--version"]] * (repeats + 1), env),
            python_s=median_wall_s([[sys.executable, "-c", "pass"]] * (repeats + 1), env),
            repeats=repeats,
        )


# --- 4. report ------------------------------------------------------------------------------------


def _ratio(value: float, floor: float | None) -> str:
    return f"{value / floor:.1f}×" if floor else "–"


def search_table(result: SearchLatency, floor_ms: float | None = None) -> str:
    """p50/p95 of search and add over stdio, beside the in-process floor (``bench/client.py`` puts
    them beside the peer's, measured in the same run)."""
    floor = f"{floor_ms:.1f}" if floor_ms else "–"
    rows = [
        ["`search_memory` (top_k=10), warm", f"{result.search.p50_ms:.1f}", f"{result.search.p95_ms:.1f}",
         floor, _ratio(result.search.p50_ms, floor_ms), result.search.calls],
        ["`add_memory`, one text", f"{result.add.p50_ms:.1f}", f"{result.add.p95_ms:.1f}", "–", "–",
         result.add.calls],
    ]
    headers = ["call over stdio", "p50 ms", "p95 ms", "floor p50 ms", "p50 / floor", "calls"]
    return report.table(headers, rows)


def rss_table(run: RssRun) -> str:
    """The RSS series as one compact row: adds so far → MB."""
    headers = ["adds", *(f"{done:,}" for done, _ in run.series)]
    return report.table(headers, [["RSS MB", *(f"{mb:.0f}" for _, mb in run.series)]])


def cli_table(cli: CliTimes) -> str:
    rows = [
        [f'`trimem search "{CLI_QUERY}"`', f"{cli.search_s:.2f}"],
        ["`trimem add TEXT`", f"{cli.add_s:.2f}"],
        ["floor: `trimem --version` (CLI imports only)", f"{cli.version_s:.2f}"],
        ["floor: `python -c pass`", f"{cli.python_s:.2f}"],
    ]
    return report.table(["command", "wall s"], rows)


def target_rows(
    search: SearchLatency | None, rss: RssRun | None, cli: CliTimes | None
) -> list[list[object]]:
    """``[figure, measured, target, meets target]`` for every target a given result covers."""
    rows: list[list[object]] = []
    if search:
        rows += [
            ["warm search p50, ms", f"{search.search.p50_ms:.1f}", f"≤ {TARGET_SEARCH_P50_MS:.0f}",
             report.yes(search.search.p50_ms <= TARGET_SEARCH_P50_MS)],
            ["warm search p95, ms", f"{search.search.p95_ms:.1f}", f"≤ {TARGET_SEARCH_P95_MS:.0f}",
             report.yes(search.search.p95_ms <= TARGET_SEARCH_P95_MS)],
            ["single add p50, ms", f"{search.add.p50_ms:.1f}", f"≤ {TARGET_ADD_P50_MS:.0f}",
             report.yes(search.add.p50_ms <= TARGET_ADD_P50_MS)],
        ]
    if cli:
        rows.append(["`trimem search` wall, s", f"{cli.search_s:.2f}", f"≤ {TARGET_CLI_SEARCH_S:.0f}",
                     report.yes(cli.search_s <= TARGET_CLI_SEARCH_S)])
    if rss:
        # The RSS targets are stated at 10,000 adds: a shorter run is shown but not judged.
        full = rss.adds >= TARGET_RSS_ADDS
        note = "" if full else f" at {TARGET_RSS_ADDS:,} adds"
        rows += [
            [f"RSS after {rss.adds:,} adds, MB", f"{rss.final_mb:.0f}", f"≤ {TARGET_RSS_MB:.0f}{note}",
             report.yes(rss.final_mb <= TARGET_RSS_MB) if full else "n/a (shorter run)"],
            [f"RSS growth over the last {rss.adds - rss.adds // 2:,} adds, MB", f"{rss.growth_mb:+.1f}",
             f"none (≤ {RSS_GROWTH_TOLERANCE_MB:.0f} MB){note}",
             report.yes(rss.growth_mb <= RSS_GROWTH_TOLERANCE_MB) if full else "n/a (shorter run)"],
        ]
    return rows


def markdown(
    search: SearchLatency | None = None,
    rss: RssRun | None = None,
    cli: CliTimes | None = None,
    floor_ms: float | None = None,
    *,
    targets: bool = True,
) -> str:
    """The stdio section: its targets first (unless the caller tables them), then each part given.

    ``floor_ms`` is the caller's in-process floor for one search (query embedding + KNN, ms p50);
    without it the floor columns show "–".
    """
    parts = ["### Over stdio: what an MCP client feels", ""]
    rows = target_rows(search, rss, cli) if targets else []
    if rows:
        parts += [report.table(["figure", "measured", "target", "meets target"], rows), ""]
    if search:
        parts += [
            (f"**Warm latency**, {search.memories:,} LoCoMo turns stored for one user, {WARMUP} untimed searches "
            "first; each call timed on the client (SDK `stdio_client` + `ClientSession`), send to answer."),
            "", search_table(search, floor_ms), "",
        ]
    if rss:
        parts += [
            (f"**Resident memory** (`VmRSS` of the server process) over {rss.adds:,} single `add_memory` calls "
            f"with distinct texts: {rss.adds_per_s:.0f} adds/s over stdio; {rss.half_mb:.0f} MB at "
            f"{rss.adds // 2:,} adds, {rss.final_mb:.0f} MB at the end ({rss.growth_mb:+.1f} MB)."),
            "", rss_table(rss), "",
        ]
    if cli:
        parts += [
            (f"**One-shot CLI**, wall time to exit, median of {cli.repeats} after one untimed run "
            "(model cache and OS file cache warm)."),
            "", cli_table(cli), "",
        ]
    return "\n".join(parts)


# --- 5. command line ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=1000, help="memories stored before the timed searches")
    parser.add_argument("--queries", type=int, default=200, help="timed searches, and timed single adds")
    parser.add_argument("--adds", type=int, default=TARGET_RSS_ADDS, help="single adds for the RSS series")
    parser.add_argument("--sample-every", type=int, default=500, help="adds between RSS readings")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: search, rss, cli")
    parser.add_argument("--floor-ms", type=float, default=None, help="in-process search floor, ms p50")
    args = parser.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    unknown = skip - {"search", "rss", "cli"}
    if unknown:
        parser.error(f"unknown part(s) to skip: {', '.join(sorted(unknown))}; choose from search, rss, cli")

    load_at_start = os.getloadavg()[0]
    samples = locomo.load()
    turns = [turn.text for sample in samples for turn in sample.memories]
    search = rss = cli = None
    if "search" not in skip:
        search = measure_search(turns, corpus.queries(samples, args.queries), args.memories, args.queries)
        print(f"  search measured: p50 {search.search.p50_ms:.1f} ms", file=sys.stderr, flush=True)
    if "rss" not in skip:
        rss = measure_rss(turns, args.adds, args.sample_every)
        print(f"  rss measured: {rss.final_mb:.0f} MB", file=sys.stderr, flush=True)
    if "cli" not in skip:
        cli = measure_cli()
    print(markdown(search, rss, cli, args.floor_ms))
    print(report.environment({"1-min load average at the start": f"{load_at_start:.1f}"}))
    return 0
