"""Cold start over stdio: spawn → ``initialize`` answered, spawn → ``tools/list`` answered, spawn →
first tool call answered, and the server process's peak resident memory, beside a minimal MCP
server as the floor.

Uses the MCP SDK's own stdio client (``stdio_client`` + ``ClientSession``), so the
numbers are what an MCP client sees. Peak RSS is ``VmHWM`` from ``/proc/<pid>/status``
(Linux), read just before the client closes the server.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import anyio

from bench import report

QUERY = "What did Caroline research?"
FLOOR = "minimal MCPServer, one tool (floor)"
TRIMEM = "trimem serve"


@dataclass(frozen=True)
class Start:
    """One spawn: seconds to the initialize answer, to the tool list and to the first tool answer;
    peak RSS in MB."""

    initialize: float
    tools_listed: float
    first_call: float
    peak_rss_mb: float | None
    ok: bool


def children() -> set[int]:
    """Pids of this process's live children (Linux /proc)."""
    me, found = os.getpid(), set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            # the command name may hold spaces and parentheses: fields follow the last ')'
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                found.add(int(entry.name))
    return found


def _peak_rss_mb(pids: set[int]) -> float | None:
    """The largest VmHWM among the given processes, in MB."""
    peaks = []
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peaks.append(int(line.split()[1]) / 1024)
        except OSError:
            continue
    return max(peaks) if peaks else None


async def _spawn(
    command: str, args: list[str], env: dict[str, str], tool: str, arguments: dict, errlog: TextIO
) -> Start:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=command, args=args, env=env)
    before = children()
    started = time.perf_counter()
    async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        initialized = time.perf_counter() - started
        await session.list_tools()
        listed = time.perf_counter() - started
        result = await session.call_tool(tool, arguments)
        answered = time.perf_counter() - started
        peak = _peak_rss_mb(children() - before)
    return Start(initialized, listed, answered, peak, not result.is_error)


def spawn(command: str, args: list[str], env: dict[str, str], tool: str, arguments: dict) -> Start:
    """Start a server, initialize, call one tool, read its peak RSS, close it."""
    with open(os.devnull, "w") as errlog:  # opened before the event loop starts, so no call waits on it
        return anyio.run(_spawn, command, args, env, tool, arguments, errlog)


@dataclass(frozen=True)
class ColdStart:
    """Each server's runs."""

    runs: dict[str, list[Start]]
    repeats: int

    def medians(self, server: str) -> Start:
        """One server's median start (each field its own median)."""
        starts = self.runs[server]
        peaks = [s.peak_rss_mb for s in starts if s.peak_rss_mb is not None]
        return Start(
            statistics.median(s.initialize for s in starts), statistics.median(s.tools_listed for s in starts),
            statistics.median(s.first_call for s in starts),
            max(peaks) if peaks else None, all(s.ok for s in starts),
        )


def trimem_command() -> tuple[str, list[str]]:
    """The ``trimem`` console script beside this Python, else ``python -m mcp_server``."""
    script = Path(sys.executable).with_name("trimem")
    if script.exists():
        return str(script), ["serve"]
    found = shutil.which("trimem")
    return (found, ["serve"]) if found else (sys.executable, ["-m", "mcp_server", "serve"])


def trimem_script() -> list[str]:
    """The ``trimem`` command line without a command: the console script, or ``python -m mcp_server``."""
    command, serve = trimem_command()
    return [command, *serve[:-1]]


def measure(repeats: int = 3, db_path: Path | None = None, user_id: str = "default") -> ColdStart:
    """Alternate minimal and trimem spawns ``repeats`` times each (a warm OS file cache for both).

    ``db_path`` is the database ``trimem serve`` opens (a fresh empty one if None).
    """
    runs: dict[str, list[Start]] = {FLOOR: [], TRIMEM: []}
    with tempfile.TemporaryDirectory() as home:
        env = {"TRIMEM_HOME": home, "TRIMEM_DB_PATH": str(db_path or Path(home) / "memories.db")}
        command, args = trimem_command()
        minimal = [str(Path(__file__).with_name("minimal_server.py"))]
        spawn(sys.executable, minimal, {}, "echo", {"text": "hi"})  # warm the file cache for both
        spawn(command, args, env, "search_memory", {"query": QUERY, "user_id": user_id})
        for _ in range(repeats):
            runs[FLOOR].append(
                spawn(sys.executable, minimal, {}, "echo", {"text": "hi"})
            )
            runs[TRIMEM].append(
                spawn(command, args, env, "search_memory", {"query": QUERY, "user_id": user_id})
            )
    return ColdStart(runs, repeats)


def table(cold: ColdStart) -> str:
    rows = []
    for name in cold.runs:
        start = cold.medians(name)
        rows.append(
            [
                name,
                f"{1000 * start.initialize:.0f}",
                f"{1000 * start.tools_listed:.0f}",
                f"{1000 * start.first_call:.0f}",
                f"{start.peak_rss_mb:.0f}" if start.peak_rss_mb is not None else "n/a",
                "yes" if start.ok else "NO",
            ]
        )
    headers = ["server", "spawn → initialize, ms", "spawn → tools/list, ms", "spawn → first tool answer, ms",
               "peak RSS, MB", "tool ok"]
    return report.table(headers, rows)


def markdown(cold: ColdStart) -> str:
    return f"""### Cold start (stdio)

Median of {cold.repeats} spawns each, alternating, after one untimed spawn of each (warm OS file cache),
through the SDK's `stdio_client` + `ClientSession`. trimem answers the handshake from its cache of
the last start's answers while the SDK loads (`mcp_server/tools/handshake.py`; the untimed spawn fills it).
trimem's first tool answer is `search_memory`
(the models load in the background from start-up; the first search waits for them); the floor's is
its `echo` tool. Peak RSS is the server process's `VmHWM`.

{table(cold)}
"""

