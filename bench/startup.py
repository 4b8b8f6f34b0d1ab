"""What an MCP client waits for, over real stdio: spawn → ``initialize`` answered, then the
first ``search_memory`` (cold: the models are still loading in the background) and warm
searches after it.

    python bench/startup.py [--runs 5] [--warm 20]

Each run spawns ``trimem serve`` (the console script Claude Desktop starts) on a copy
of a database seeded once with a few dozen memories, so every run starts equally cold
except for the operating system's file cache. Prints seconds; nothing is asserted.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

QUERY = "Where does Ana live and what does she do?"
FACTS = [
    f"{name} {fact}"
    for name in ("Ana", "Bob", "Chen", "Dara", "Eli", "Femi")
    for fact in (
        "lives in Lisbon", "works as a nurse", "is allergic to peanuts", "plays the cello on Sundays",
        "is learning Japanese", "has a dog called Miso", "prefers window seats on long flights",
    )
]


def parameters(home: Path, db: Path) -> StdioServerParameters:
    script = Path(sys.executable).with_name("trimem")
    command, args = (str(script), ["serve"]) if script.exists() else (sys.executable, ["-m", "mcp_server", "serve"])
    return StdioServerParameters(
        command=command, args=args,
        env={"TRIMEM_HOME": str(home), "TRIMEM_DB_PATH": str(db), "TRIMEM_LOG_LEVEL": "WARNING"},
    )


async def seed(home: Path, db: Path) -> None:
    with open(home / "seed.log", "w") as errlog:
        async with Client(stdio_client(parameters(home, db), errlog=errlog), mode="legacy") as client:
            for fact in FACTS:
                result = await client.call_tool("add_memory", {"text": fact})
                assert not result.is_error, result.content


async def one_run(home: Path, db: Path, warm: int) -> tuple[float, float, float, list[float]]:
    """(spawn→initialize, initialize→first search, spawn→first search, warm search times)."""
    with open(home / "run.log", "w") as errlog:
        start = time.perf_counter()
        async with Client(stdio_client(parameters(home, db), errlog=errlog), mode="legacy") as client:
            initialized = time.perf_counter()
            result = await client.call_tool("search_memory", {"query": QUERY, "top_k": 5})
            first = time.perf_counter()
            assert not result.is_error and result.structured_content["results"], result.content
            warm_times = []
            for n in range(warm):
                began = time.perf_counter()
                await client.call_tool("search_memory", {"query": f"{QUERY} ({n})", "top_k": 5})
                warm_times.append(time.perf_counter() - began)
    return initialized - start, first - initialized, first - start, warm_times


async def main(runs: int, warm: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="trimem-startup-"))
    try:
        seeded = home / "seeded.db"
        await seed(home, seeded)
        results = []
        for n in range(runs):
            db = home / f"run{n}.db"
            shutil.copy(seeded, db)
            results.append(await one_run(home, db, warm))
        initialize, cold_after, cold_total, warm_all = (
            [r[0] for r in results], [r[1] for r in results], [r[2] for r in results],
            [t for r in results for t in r[3]],
        )
        warm_all.sort()
        print(f"runs: {runs}, memories: {len(FACTS)}, warm searches per run: {warm}")
        print(f"spawn → initialize answered     median {statistics.median(initialize):.3f} s  "
              f"(min {min(initialize):.3f}, max {max(initialize):.3f})")
        print(f"initialize → first search (cold) median {statistics.median(cold_after):.3f} s")
        print(f"spawn → first search (cold)      median {statistics.median(cold_total):.3f} s  "
              f"(min {min(cold_total):.3f}, max {max(cold_total):.3f})")
        if warm_all:
            p95 = warm_all[min(len(warm_all) - 1, int(0.95 * len(warm_all)))]
            print(f"warm search                      median {statistics.median(warm_all) * 1000:.1f} ms  "
                  f"p95 {p95 * 1000:.1f} ms")
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warm", type=int, default=20)
    options = parser.parse_args()
    anyio.run(main, options.runs, options.warm)
