"""What an MCP client feels, trimem beside mcp-memory-service 12.4 measured in the same run.

The text a search hands the model, the tool list, warm search and single-add latency over raw
JSON-RPC and through the MCP SDK's client, and ingest through MCP; beside each trimem figure, its
floor in the engine.

    python -m bench peer            # once: install the peer (its docstring says how it is set up)
    python -m bench client [--memories 1000] [--queries 200] [--no-peer] [--no-doc]

With the defaults a run takes about 5 minutes on an idle 2-core machine (half of it the ingest);
``--memories 100 --queries 20`` checks the code in about one.
Without the peer's virtualenv (or with ``--no-peer``) it says so, measures trimem and its floor
alone, and judges no target that needs the peer.

Data: the first ``--memories`` turns of the LoCoMo dev conversations in order, one memory per turn,
and ``--queries`` questions answered within those turns (a fixed shuffle); both servers get the same
texts in the same order and the same questions, each in a fresh folder of its own
(``bench/results/client/<server>``, kept after the run with the server's log). The two servers
are asked in turn, one call each, the one asked first swapping every round, so whatever else loads
the machine loads both alike. Three sessions of each server, on the same folder:

1. SDK client (``stdio_client`` + ``ClientSession``): one untimed search of the empty store (trimem
   answers ``initialize`` before its models are loaded, the peer after); ingest, one single-text add
   per memory, timed; ``WARMUP`` untimed searches; ``--queries`` timed searches (top_k 10).
2. Raw JSON-RPC, no SDK (a line written to the server's stdin, its answer read from stdout):
   ``tools/list``; warm-up; timed searches at top_k 10, whose replies are measured; the same
   questions at top_k 20, untimed, measured; one untimed and ``--queries`` timed single adds.
3. SDK client: one untimed and ``--queries`` timed single adds.

Every search thus runs on exactly the ingested memories: the timed adds come after the last search.
The floor is trimem's ``Engine`` in this process with the server's configuration, doing the same:
ingest by single ``Engine.add`` calls, warm searches, single adds. Times are the client's, from
sending a call to having its answer.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

import anyio

from bench import coldstart, corpus, locomo, peer, report, stdio
from bench.timing import Latency
from mcp_server.replies import compact_json

TRIMEM = "trimem"
TIMED_TOP_K = 10
TOP_KS = (TIMED_TOP_K, 20)
WARMUP = stdio.WARMUP
CLIENT_INFO = {"name": "trimem-client-bench", "version": "1"}
CLOSE_TIMEOUT_S = 10
FOLDER = report.RESULTS / "client"
"""Each server's data folder and log, kept after the run."""

TARGET_EXTRA_CHARS = 100
"""Search text per result beyond the memory's own text, at most."""
TARGET_TOOL_LIST_CHARS = 7_000
"""Names, descriptions and input schemas of all tools (compact JSON), at most: 7 KB."""
TARGET_SEARCH_RATIO = 0.7
"""Warm search p50, trimem / peer, at most (raw and through the SDK)."""
TARGET_ADD_RATIO = 1.0
"""Single add p50, trimem / peer, at most."""
TARGET_INGEST_RATIO = 1.0
"""Ingest through MCP, trimem / peer memories per second, at least."""

SDK, RAW, ENGINE = "SDK client", "raw JSON-RPC", "in-engine"
INGEST, SEARCH, ADD = "ingest", "search", "add"


# --- the servers --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Server:
    """One MCP server as this benchmark starts and asks it."""

    name: str
    command: tuple[str, ...]
    env: Mapping[str, str]
    search_tool: str
    search_arguments: Callable[[str, int], dict[str, Any]]
    add_tool: str
    add_arguments: Callable[[str], dict[str, Any]]
    found_texts: Callable[[dict[str, Any]], list[str]]
    """The memory texts a search reply (a ``tools/call`` result as JSON) hands over, best first."""
    refused: Callable[[str, str], bool]
    """Whether a reply's text (to the named tool) says the call failed although ``isError`` is false."""

    def search(self, query: str, top_k: int = TIMED_TOP_K) -> tuple[str, dict[str, Any]]:
        return self.search_tool, self.search_arguments(query, top_k)

    def add(self, text: str) -> tuple[str, dict[str, Any]]:
        return self.add_tool, self.add_arguments(text)


def text_of(reply: Mapping[str, Any]) -> str:
    """The text content of a tool result: what a client hands the model."""
    return "\n".join(item["text"] for item in reply.get("content", []) if item.get("type") == "text")


def trimem_server(home: Path) -> Server:
    """``trimem serve`` of this checkout on a fresh folder, asked in its default scope."""
    command, args = coldstart.trimem_command()
    return Server(
        name=TRIMEM,
        command=(command, *args),
        env=stdio.server_env(home),
        search_tool="search_memory",
        search_arguments=lambda query, top_k: {"query": query, "top_k": top_k},
        add_tool="add_memory",
        add_arguments=lambda text: {"text": text},
        found_texts=lambda reply: [result["text"] for result in reply["structuredContent"]["results"]],
        refused=lambda tool, text: False,  # trimem answers every failure with isError
    )


def peer_server(home: Path) -> Server:
    """The peer on a fresh folder, configured as ``bench/peer.py`` says."""
    return Server(
        name=peer.NAME,
        command=tuple(peer.command()),
        env=peer.environment(home),
        search_tool=peer.SEARCH_TOOL,
        search_arguments=peer.search_arguments,
        add_tool=peer.ADD_TOOL,
        add_arguments=peer.add_arguments,
        found_texts=lambda reply: peer.found_texts(text_of(reply)),
        refused=peer.refused,
    )


def checked(server: Server, tool: str, reply: dict[str, Any]) -> dict[str, Any]:
    """The reply, if it is not a failure (figures from failed calls are not figures)."""
    if reply.get("isError") or server.refused(tool, text_of(reply)):
        raise RuntimeError(f"{server.name}: {tool} failed: {text_of(reply)[:500]}")
    return reply


# --- two ways to call a tool ------------------------------------------------------------------------


class Client(Protocol):
    server: Server

    async def call(self, tool: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
        """A tool's result as JSON, and the bytes of its reply on the wire when the client sees them."""
        ...


class RawClient:
    """JSON-RPC 2.0 written to a server's stdin and read from its stdout, one line each way, no SDK.

    ``call`` is a coroutine only to share the benchmark's loop with the SDK client: its pipe I/O
    blocks, on purpose, so nothing runs between the write and the read.
    """

    def __init__(self, server: Server, log: IO[str]) -> None:
        from mcp.client.stdio import get_default_environment

        self.server = server
        self._ids = itertools.count(1)
        self._process = subprocess.Popen(
            server.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
            env=get_default_environment() | dict(server.env),  # what the SDK's stdio_client passes
        )

    def request(self, method: str, params: dict[str, Any]) -> tuple[dict[str, Any], int]:
        """The result of one request, and the bytes of the reply line."""
        request_id = next(self._ids)
        self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        while True:
            line = self._process.stdout.readline()
            if not line:
                raise RuntimeError(f"{self.server.name} closed its output (exit status {self._process.poll()})")
            message = json.loads(line)
            if message.get("id") == request_id:
                break  # other lines are notifications (logging, progress), read past as a client does
        if "error" in message:
            raise RuntimeError(f"{self.server.name}: {method} failed: {message['error']}")
        return message["result"], len(line)

    def notify(self, method: str) -> None:
        self._send({"jsonrpc": "2.0", "method": method})

    def _send(self, message: dict[str, Any]) -> None:
        self._process.stdin.write(json.dumps(message).encode() + b"\n")
        self._process.stdin.flush()

    async def call(self, tool: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], int]:
        return self.request("tools/call", {"name": tool, "arguments": arguments})

    def close(self) -> None:
        """Close stdin (the end of a stdio session) and wait for the server to exit."""
        self._process.stdin.close()
        try:
            self._process.wait(CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


@contextmanager
def raw_client(server: Server, home: Path) -> Iterator[RawClient]:
    """A raw client to a fresh process of ``server``, initialized; its stderr goes to ``home/server.log``."""
    from mcp_types import LATEST_PROTOCOL_VERSION

    with (home / "server.log").open("a") as log:
        client = RawClient(server, log)
        try:
            client.request("initialize", {
                "protocolVersion": LATEST_PROTOCOL_VERSION, "capabilities": {}, "clientInfo": CLIENT_INFO,
            })
            client.notify("notifications/initialized")
            yield client
        finally:
            client.close()


class SdkClient:
    """A server through the MCP SDK's ``ClientSession``, as an assistant's client talks to it."""

    def __init__(self, server: Server, session: Any) -> None:
        self.server = server
        self._session = session

    async def call(self, tool: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], None]:
        result = await self._session.call_tool(tool, arguments)
        return result.model_dump(mode="json", by_alias=True, exclude_none=True), None


@asynccontextmanager
async def sdk_client(server: Server, home: Path) -> AsyncIterator[SdkClient]:
    """An SDK client to a fresh process of ``server``, initialized; its stderr goes to ``home/server.log``."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    command, *args = server.command
    params = StdioServerParameters(command=command, args=args, env=dict(server.env))
    with (home / "server.log").open("a") as log:
        async with stdio_client(params, errlog=log) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield SdkClient(server, session)


# --- asking in turn -----------------------------------------------------------------------------------


Ask = Callable[[Server], tuple[str, dict[str, Any]]]
"""One call to make of every server, in its own tool's terms."""


@dataclass(frozen=True)
class Answer:
    reply: dict[str, Any]
    wire_bytes: int | None
    seconds: float


def in_turn(count: int, servers: int) -> Iterator[tuple[int, int]]:
    """``(call, server)`` indexes: each call made of every server, the one asked first swapping every call."""
    for call in range(count):
        order = range(servers) if call % 2 == 0 else reversed(range(servers))
        for server in order:
            yield call, server


async def ask_in_turn(clients: Sequence[Client], asks: Sequence[Ask]) -> list[list[Answer]]:
    """Every call made of every client in turn; per client, its answers in order, each timed."""
    answers: list[list[Answer]] = [[] for _ in clients]
    for call, index in in_turn(len(asks), len(clients)):
        client = clients[index]
        tool, arguments = asks[call](client.server)
        started = time.perf_counter()
        reply, wire_bytes = await client.call(tool, arguments)
        seconds = time.perf_counter() - started
        answers[index].append(Answer(checked(client.server, tool, reply), wire_bytes, seconds))
    return answers


def searches(questions: Sequence[str], top_k: int = TIMED_TOP_K) -> list[Ask]:
    return [lambda server, q=question: server.search(q, top_k) for question in questions]


def adds(texts: Sequence[str]) -> list[Ask]:
    return [lambda server, t=text: server.add(t) for text in texts]


# --- what is measured ---------------------------------------------------------------------------------


@dataclass
class ReplySizes:
    """What the search replies of one server at one top_k held, summed over the questions."""

    replies: int = 0
    results: int = 0
    text_chars: int = 0
    own_chars: int = 0
    """Of ``text_chars``, the memories' own texts."""
    structured_chars: int = 0
    """``structuredContent`` as compact JSON (0 when the server sends none)."""
    wire_bytes: int = 0
    """The whole JSON-RPC reply lines."""

    def count(self, server: Server, answer: Answer) -> None:
        found = server.found_texts(answer.reply)
        structured = answer.reply.get("structuredContent")
        self.replies += 1
        self.results += len(found)
        self.text_chars += len(text_of(answer.reply))
        self.own_chars += sum(map(len, found))
        self.structured_chars += len(compact_json(structured)) if structured is not None else 0
        self.wire_bytes += answer.wire_bytes or 0

    def per_result(self, chars: int) -> float:
        return chars / self.results if self.results else 0.0

    @property
    def extra_per_result(self) -> float:
        """Text per result beyond the memories' own words: ids, scores, dates, headers, labels."""
        return self.per_result(self.text_chars - self.own_chars)


@dataclass(frozen=True)
class ToolList:
    """The ``tools/list`` a client hands the model: each tool's name, description and input schema."""

    chars: dict[str, int]
    """Per tool, characters of its name, its description and its input schema as compact JSON."""
    reply_bytes: int
    """The whole ``tools/list`` JSON-RPC reply line (output schemas and annotations too)."""

    @classmethod
    def of(cls, result: dict[str, Any], reply_bytes: int) -> ToolList:
        sizes = {tool["name"]: len(tool["name"]) + len(tool.get("description") or "") + len(compact_json(
            tool["inputSchema"])) for tool in result["tools"]}
        return cls(sizes, reply_bytes)

    @property
    def total(self) -> int:
        return sum(self.chars.values())


@dataclass
class Measured:
    """Everything measured of one server, or of its floor (``ENGINE``)."""

    name: str
    seconds: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    """Per ``(INGEST | SEARCH | ADD, SDK | RAW | ENGINE)``, each timed call's seconds."""
    replies: dict[int, ReplySizes] = field(default_factory=dict)
    tools: ToolList | None = None

    def timed(self, kind: str, client: str, answers: Sequence[Answer]) -> None:
        self.seconds[kind, client] = [answer.seconds for answer in answers]

    def latency(self, kind: str, client: str) -> Latency | None:
        times = self.seconds.get((kind, client))
        return Latency.of(times) if times else None

    def per_second(self, client: str) -> float | None:
        """Ingest rate: memories per second of this server's own call time."""
        times = self.seconds.get((INGEST, client))
        return len(times) / sum(times) if times else None


# --- the run ----------------------------------------------------------------------------------------------


def dataset(memories: int, queries: int, more: int) -> tuple[list[str], list[str], list[str]]:
    """Distinct turn texts of the dev conversations in order: ``memories`` to ingest and ``more`` after
    them to add; and ``queries`` questions answered within the first ``memories`` turns (a fixed
    shuffle, repeated if there are fewer)."""
    samples = locomo.load()
    texts = corpus.suffixed([turn.text for sample in samples for turn in sample.memories], memories + more)
    heads: list[locomo.Sample] = []
    for sample in samples:
        taken = sum(len(head.memories) for head in heads)
        if taken >= memories:
            break
        heads.append(locomo.head(sample, max_turns=memories - taken))
    questions = corpus.queries(heads, queries)
    if not questions:
        raise ValueError(f"no question is answered within the first {memories} turns; store more memories")
    return texts[:memories], texts[memories:], corpus.cycle(questions, queries)


async def measure_servers(
    servers: Sequence[Server], homes: Sequence[Path], memories: Sequence[str], questions: Sequence[str],
    added: Sequence[str],
) -> list[Measured]:
    """The three sessions of the module docstring; ``added`` holds 2 × (1 + queries) new texts."""
    measured = [Measured(server.name) for server in servers]
    half = len(added) // 2
    async with sdk_clients(servers, homes) as clients:
        await ingest_and_search(clients, memories, questions, measured)
    with raw_clients(servers, homes) as clients:
        await raw_session(clients, questions, added[:half], measured)
    async with sdk_clients(servers, homes) as clients:
        await ask_in_turn(clients, adds(added[half : half + 1]))
        record(measured, ADD, SDK, await ask_in_turn(clients, adds(added[half + 1 :])))
    return measured


@asynccontextmanager
async def sdk_clients(servers: Sequence[Server], homes: Sequence[Path]) -> AsyncIterator[list[SdkClient]]:
    async with AsyncExitStack() as stack:
        yield [await stack.enter_async_context(sdk_client(s, h)) for s, h in zip(servers, homes)]


@contextmanager
def raw_clients(servers: Sequence[Server], homes: Sequence[Path]) -> Iterator[list[RawClient]]:
    with ExitStack() as stack:
        yield [stack.enter_context(raw_client(s, h)) for s, h in zip(servers, homes)]


def record(measured: Sequence[Measured], kind: str, client: str, answers: Sequence[Sequence[Answer]]) -> None:
    """Each server's answers as its timed calls of one kind through one client."""
    for m, its_answers in zip(measured, answers):
        m.timed(kind, client, its_answers)


async def ingest_and_search(
    clients: Sequence[SdkClient], memories: Sequence[str], questions: Sequence[str], measured: Sequence[Measured]
) -> None:
    """Session 1: ingest, then warm searches, through the SDK client."""
    await ask_in_turn(clients, searches(questions[:1]))  # each ready: trimem loads its models after initialize
    record(measured, INGEST, SDK, await ask_in_turn(clients, adds(memories)))
    await ask_in_turn(clients, searches(questions[:WARMUP]))
    record(measured, SEARCH, SDK, await ask_in_turn(clients, searches(questions)))
    _progress(measured, "ingest and search through the SDK client")


async def raw_session(
    clients: Sequence[RawClient], questions: Sequence[str], added: Sequence[str], measured: Sequence[Measured]
) -> None:
    """Session 2, raw JSON-RPC: the tool list, the search replies at each top_k, warm searches and adds."""
    for m, client in zip(measured, clients):
        m.tools = ToolList.of(*client.request("tools/list", {}))
    await ask_in_turn(clients, searches(questions[:WARMUP]))
    for top_k in TOP_KS:
        answers = await ask_in_turn(clients, searches(questions, top_k))
        for client, m, its_answers in zip(clients, measured, answers):
            sizes = m.replies[top_k] = ReplySizes()
            for answer in its_answers:
                sizes.count(client.server, answer)
        if top_k == TIMED_TOP_K:
            record(measured, SEARCH, RAW, answers)
    await ask_in_turn(clients, adds(added[:1]))
    record(measured, ADD, RAW, await ask_in_turn(clients, adds(added[1:])))
    _progress(measured, "tool list, replies, search and add over raw JSON-RPC")


def _progress(measured: Sequence[Measured], what: str) -> None:
    print(f"  measured {what} ({', '.join(m.name for m in measured)})", file=sys.stderr, flush=True)


def measure_floor(memories: Sequence[str], questions: Sequence[str], added: Sequence[str]) -> Measured:
    """trimem's engine in this process, with the server's configuration, doing what the servers do."""
    from store import Engine, load_config

    floor = Measured(ENGINE)
    with tempfile.TemporaryDirectory() as home:
        config = load_config(environ=stdio.server_env(Path(home)))
        user_id = config.server.user_id
        with Engine(config) as engine:
            engine.warm_up()
            floor.seconds[INGEST, ENGINE] = [_seconds(engine.add, text, user_id=user_id) for text in memories]
            for question in questions[:WARMUP]:
                engine.search(question, user_id=user_id, top_k=TIMED_TOP_K)
            floor.seconds[SEARCH, ENGINE] = [
                _seconds(engine.search, question, user_id=user_id, top_k=TIMED_TOP_K) for question in questions
            ]
            engine.add(added[0], user_id=user_id)
            floor.seconds[ADD, ENGINE] = [_seconds(engine.add, text, user_id=user_id) for text in added[1:]]
    return floor


def _seconds(fn: Callable[..., object], *args: object, **kwargs: object) -> float:
    started = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - started


@dataclass(frozen=True)
class Run:
    """One run: trimem, the peer (None when it was not run, and why), the floor."""

    trimem: Measured
    peer: Measured | None
    peer_missing: str | None
    floor: Measured
    memories: int
    queries: int


def run(memories: int, queries: int, folder: Path, with_peer: bool = True) -> Run:
    """Measure trimem and (when it is installed and wanted) the peer, then the floor, on the same data.

    Each server's data and log go to a fresh ``folder/<server>`` (emptied first, kept after the run).
    """
    per_client = 1 + queries  # one untimed add, then the timed ones
    stored, added, questions = dataset(memories, queries, more=2 * per_client)
    missing = peer.missing() if with_peer else "not asked for (--no-peer)"
    homes = [folder / "trimem", folder / "peer"]
    for home in homes:
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
    servers = [trimem_server(homes[0])] + ([] if missing else [peer_server(homes[1])])
    measured = anyio.run(measure_servers, servers, homes, stored, questions, added)
    floor = measure_floor(stored, questions, added[:per_client])
    return Run(measured[0], measured[1] if len(measured) > 1 else None, missing, floor, memories, queries)


def failure_of(exc: BaseException) -> BaseException:
    """What went wrong, out of the task groups the SDK's client wraps it in."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


# --- the report ---------------------------------------------------------------------------------------------


def _ratio(ours: float | None, theirs: float | None) -> str:
    return f"{ours / theirs:.2f}" if ours is not None and theirs else "–"


def _verdict(ok: bool | None, needs_peer: bool = False) -> str:
    """A target's cell: met or not; nothing for a row without a target."""
    if ok is None:
        return "n/a: peer not run" if needs_peer else ""
    return report.yes(ok)


def _number(value: float | None, digits: int = 0) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def reply_table(run: Run) -> str:
    """Search replies at each top_k: what the text costs the model, beside the memories' own words."""
    rows = []
    for top_k in TOP_KS:
        ours = run.trimem.replies[top_k]
        theirs = run.peer.replies[top_k] if run.peer else None
        figures = [
            ("results per reply", lambda s: s.results / s.replies, None, None),
            ("text chars per reply", lambda s: s.text_chars / s.replies, None, None),
            ("text chars per result", lambda s: s.per_result(s.text_chars), ours.per_result(ours.own_chars), None),
            ("text chars per result beyond the memory's own", lambda s: s.extra_per_result, 0.0,
             ours.extra_per_result <= TARGET_EXTRA_CHARS),
            ("structuredContent chars per reply", lambda s: s.structured_chars / s.replies, None, None),
            ("JSON-RPC reply bytes per reply", lambda s: s.wire_bytes / s.replies, None, None),
        ]
        for name, value, floor, ok in figures:
            target = f"≤ {TARGET_EXTRA_CHARS}" if ok is not None else ""
            rows.append([
                f"top_k {top_k}: {name}", _number(value(ours), 1), _number(value(theirs) if theirs else None, 1),
                _ratio(value(ours), value(theirs) if theirs else None), _number(floor, 1), target, _verdict(ok),
            ])
    return report.table(["search reply", TRIMEM, "peer", "trimem / peer", "floor: own text", "target", "meets"], rows)


def tool_table(run: Run) -> str:
    """The tool list's size, all tools and the largest, beside the target."""
    ours, theirs = run.trimem.tools, run.peer.tools if run.peer else None
    figures = [
        ("tools", lambda tools: len(tools.chars), "", None),
        ("names + descriptions + input schemas, chars", lambda tools: tools.total,
         f"≤ {TARGET_TOOL_LIST_CHARS:,}", ours.total <= TARGET_TOOL_LIST_CHARS),
        ("largest tool, chars", lambda tools: max(tools.chars.values()), "", None),
        ("whole `tools/list` reply, bytes", lambda tools: tools.reply_bytes, "", None),
    ]
    rows = [
        [name, _number(value(ours)), _number(value(theirs) if theirs else None),
         _ratio(value(ours), value(theirs) if theirs else None), target, _verdict(ok)]
        for name, value, target, ok in figures
    ]
    return report.table(["tool list", TRIMEM, "peer", "trimem / peer", "target", "meets"], rows)


def per_tool(tools: ToolList) -> str:
    """Each tool's chars, largest first, on one line."""
    return ", ".join(f"`{name}` {chars:,}" for name, chars in sorted(tools.chars.items(), key=lambda item: -item[1]))


def latency_table(run: Run) -> str:
    """Warm search and single add p50 / p95 per client, beside the engine's own call and the targets."""
    rows = []
    for kind, ratio in ((SEARCH, TARGET_SEARCH_RATIO), (ADD, TARGET_ADD_RATIO)):
        floor = run.floor.latency(kind, ENGINE)
        for client in (RAW, SDK):
            ours = run.trimem.latency(kind, client)
            theirs = run.peer.latency(kind, client) if run.peer else None
            ok = ours.p50_ms <= ratio * theirs.p50_ms if theirs else None
            rows += [
                [f"{kind}, {client}: p50 ms", _number(ours.p50_ms, 1), _number(theirs and theirs.p50_ms, 1),
                 _ratio(ours.p50_ms, theirs and theirs.p50_ms), _number(floor.p50_ms, 1),
                 f"≤ {ratio:g} × peer", _verdict(ok, needs_peer=True)],
                [f"{kind}, {client}: p95 ms", _number(ours.p95_ms, 1), _number(theirs and theirs.p95_ms, 1),
                 _ratio(ours.p95_ms, theirs and theirs.p95_ms), _number(floor.p95_ms, 1), "", ""],
            ]
    return report.table(["warm call", TRIMEM, "peer", "trimem / peer", "floor: in-engine", "target", "meets"], rows)


def ingest_table(run: Run) -> str:
    """Memories per second through MCP, one single-text add each, beside the engine's own adds."""
    ours = run.trimem.per_second(SDK)
    theirs = run.peer.per_second(SDK) if run.peer else None
    ok = ours >= TARGET_INGEST_RATIO * theirs if theirs else None
    row = [f"{run.memories:,} single adds, {SDK}: memories/s", _number(ours, 1), _number(theirs, 1),
           _ratio(ours, theirs), _number(run.floor.per_second(ENGINE), 1), "≥ peer", _verdict(ok, needs_peer=True)]
    return report.table(["ingest", TRIMEM, "peer", "trimem / peer", "floor: in-engine", "target", "meets"], [row])


def markdown(run: Run, command: str, environment: str) -> str:
    """The client section of docs/benchmarks.md."""
    peer_note = (
        f"The peer is {peer.NAME} (`{peer.SEARCH_TOOL}` with mode `{peer.SEARCH_MODE}`, `{peer.ADD_TOOL}`), "
        "set up as `bench/peer.py` says."
        if run.peer else f"**The peer was not measured**: {run.peer_missing}. Only trimem and its floor are shown, "
        "and no target that needs the peer is judged."
    )
    tools = [f"trimem's tools: {per_tool(run.trimem.tools)}."]
    if run.peer:
        tools.append(f"The peer's: {per_tool(run.peer.tools)}.")
    return "\n".join([
        "## What an MCP client feels, beside mcp-memory-service", "",
        (f"`{command}`: {run.memories:,} LoCoMo turns, one memory each, and {run.queries} questions answered "
        f"within them, the same for both servers, asked in turn (`bench/client.py` says how). {peer_note} "
        "The floor is trimem's `Engine` in the benchmark's own process, same configuration, same calls."), "",
        environment, "",
        ("**Search replies**, measured on the raw JSON-RPC replies to every question: the text is what a "
        "client hands the model; the memories' own text is what no reply can do without."), "",
        reply_table(run), "",
        "**Tool list**, from `tools/list`: each tool's name, description and input schema as compact JSON.", "",
        tool_table(run), "", *tools, "",
        (f"**Warm latency**, {run.queries} timed calls per row after {WARMUP} untimed; searches at top_k "
        f"{TIMED_TOP_K} on the {run.memories:,} memories, adds of new texts. Raw: one JSON line written to "
        "the server's stdin, the answer read from its stdout. SDK: `ClientSession.call_tool` over `stdio_client`."), "",
        latency_table(run), "",
        ("**Ingest through MCP**: the memories stored at the start, one single-text add per call; the rate "
        "is calls per second of each server's own call time."), "",
        ingest_table(run), "",
    ])


def main(argv: Sequence[str] | None = None) -> int:
    from mcp.shared.exceptions import MCPError

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=1000, help="memories ingested, one add each, before searching")
    parser.add_argument("--queries", type=int, default=200, help="timed searches, and timed single adds, per client")
    parser.add_argument("--no-peer", action="store_true", help="measure trimem and its floor only")
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = parser.parse_args(argv)
    if args.memories < 1 or args.queries < 1:
        parser.error("--memories and --queries must be at least 1")

    load_at_start = os.getloadavg()[0]
    try:
        result = run(args.memories, args.queries, FOLDER, with_peer=not args.no_peer)
    except Exception as exc:  # a failed call, a server that died: say which, without a traceback
        failure = failure_of(exc)
        if not isinstance(failure, (RuntimeError, ValueError, OSError, MCPError)):
            raise
        print(f"the client benchmark stopped: {failure} (the servers' logs: {FOLDER}/*/server.log)", file=sys.stderr)
        return 1
    environment = report.environment({"1-min load average at the start": f"{load_at_start:.1f}"})
    section = markdown(result, report.command_line(), environment)
    report.publish("client", section, not args.no_doc)
    return 0
