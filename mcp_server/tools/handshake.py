"""The stdio server's first half second: the MCP handshake answered at once, while the SDK loads.

Importing the MCP SDK and building trimem's tools costs about half a second of CPU before the
SDK can answer anything, and a client that starts a session meanwhile (Claude Code in ``-p``
runs waits about two seconds) may go ahead without trimem's tools and hooks. So ``trimem serve``
reads stdin itself from its first instant (``Front``): ``ping`` is answered at once, and what a
client asks before its first call (``CACHED_METHODS``: the handshake of either protocol era,
``initialize`` or ``server/discover``, and the lists of tools, prompts and resources) too, when
this same server answered it before (``AnswerCache``, keyed by everything the answers depend on). Every message, those included, is then handed to the SDK's server
in the order it came, and the SDK's own answers to what was already answered are dropped, so
the SDK's session sees the whole conversation. Without a cached answer (a first start, a new
version or configuration) the request waits for the SDK, whose answer is then cached.

Only the standard library is imported here: that is what makes it fast.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import re
import threading
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any, BinaryIO

from store.config import Config

CACHED_METHODS = ("initialize", "server/discover", "tools/list", "prompts/list", "resources/list")
"""The requests answered from the cache: what a client asks before its first tool call, whose
answers depend only on the server and the protocol version (``server/discover`` is the
2026-07-28 protocol's handshake, which Claude Code 2.1 speaks; ``initialize`` the earlier one)."""
VERSION = re.compile(r"[0-9A-Za-z.-]{0,32}")
"""A protocol version as a cache file may be named after (versions are dates)."""
PROTOCOL_META = "io.modelcontextprotocol/protocolVersion"
"""Where a request of the 2026-07-28 protocol names its version: every request carries it."""
LISTEN, ACKNOWLEDGED = "subscriptions/listen", "notifications/subscriptions/acknowledged"
"""The 2026-07-28 protocol's subscription, which a server acknowledges with a notification (not an
answer: the request stays open for the notifications it asked for). Claude Code counts a server
connected once it is acknowledged."""
SUBSCRIPTION_META = "io.modelcontextprotocol/subscriptionId"
"""Where an acknowledgement names its subscription: the listen request's id."""
Ask = tuple[str, str, str]
"""What a cached answer answers: the method, the protocol version, and a digest of the request's
parameters where the answer depends on them (the notifications a listen asks for), else ``""``."""
ID = int | str
SOURCE_PACKAGES = ("mcp_server", "store")
"""The packages whose sources make the answers: the tools, their replies' shapes, their limits."""


class AnswerCache:
    """The last answers of this server to ``CACHED_METHODS``, one file per method and protocol
    version in ``folder``, each valid only for the ``key`` it was written under."""

    def __init__(self, folder: Path, key: str) -> None:
        self.folder = folder
        self.key = key

    @classmethod
    def for_server(cls, folder: Path, configuration: str) -> AnswerCache:
        """The cache of a server with ``configuration`` (its settings, as text) run by this code:
        trimem's and the SDK's versions and every source file of ``mcp_server`` and ``store`` (in a
        checkout, a change to a tool, a reply's shape or a limit changes the answers without a new
        version) are part of the key."""
        root = Path(__file__).resolve().parents[2]
        sources = sorted(
            (str(path.relative_to(root)), status.st_mtime_ns, status.st_size)
            for package in SOURCE_PACKAGES for path in (root / package).rglob("*.py")
            if (status := path.stat())
        )
        versions = [version_of(name) for name in ("trimem", "mcp", "pydantic")]
        key = hashlib.sha256(json.dumps([versions, sources, configuration]).encode()).hexdigest()
        return cls(folder, key)

    def _path(self, ask: Ask) -> Path | None:
        """The file for ``ask``; None for a version no file may be named after (it comes from the
        client: never a path)."""
        method, protocol, variant = ask
        if not VERSION.fullmatch(protocol):
            return None
        return self.folder / f"{'-'.join(filter(None, (method.replace('/', '-'), protocol, variant)))}.json"

    def answer(self, ask: Ask) -> Any | None:
        """The cached answer to ``ask``, or None."""
        path = self._path(ask)
        if path is None:
            return None
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return stored.get("result") if isinstance(stored, dict) and stored.get("key") == self.key else None

    def remember(self, ask: Ask, result: Any) -> None:
        """Keep ``result`` for the next start; a cache that cannot be written only costs that start time."""
        path = self._path(ask)
        if path is None:
            return
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            temporary.write_text(json.dumps({"key": self.key, "result": result}), encoding="utf-8")
            os.replace(temporary, path)
        except OSError:
            temporary.unlink(missing_ok=True)


def version_of(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


class Front:
    """stdin and stdout of the stdio server, owned from the start: the handshake answered early,
    every line handed on to the SDK (``reader``), the SDK's lines written out (``writer``)."""

    def __init__(self, cache: AnswerCache, wire_in: BinaryIO, wire_out: BinaryIO) -> None:
        self.cache = cache
        self._in = wire_in
        self._out = wire_out
        self._write_lock = threading.Lock()
        self._lines: queue.Queue[str] = queue.Queue()
        self._answered: set[ID] = set()
        """Requests answered here, whose answers from the SDK are dropped."""
        self._acknowledged: set[ID] = set()
        """Subscriptions acknowledged here, whose acknowledgements from the SDK are dropped."""
        self._pending: dict[ID, Ask] = {}
        """Cacheable requests left to the SDK, by id: its answer is cached when it comes."""
        self._protocol = ""
        self._state_lock = threading.Lock()
        self.reader = LineReader(self._lines)
        self.writer = LineWriter(self._from_sdk)

    @classmethod
    def on_stdio(cls, cache: AnswerCache) -> Front:
        """A front on this process's stdin and stdout, which it takes over: fd 0 then reads the null
        device and fd 1 writes to stderr, so nothing else in the process can write on the wire."""
        wire_in = os.fdopen(os.dup(0), "rb")
        wire_out = os.fdopen(os.dup(1), "wb", buffering=0)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(2, 1)
        return cls(cache, wire_in, wire_out)

    def start(self) -> Front:
        threading.Thread(target=self._read, name="trimem-stdin", daemon=True).start()
        return self

    def _read(self) -> None:
        """Every line of stdin, answered here when it can be, then handed on; EOF ends the reader."""
        for raw in iter(self._in.readline, b""):
            line = raw.decode("utf-8", errors="replace")
            self._early(line)
            self._lines.put(line)
        self._lines.put("")

    def _early(self, line: str) -> None:
        """Answer ``line`` now when it is a ping, or a handshake request answered before."""
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):  # the SDK refuses it too, and says so
            return
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            return
        method, request_id, params = message["method"], message.get("id"), message.get("params") or {}
        if not isinstance(request_id, int | str) or isinstance(request_id, bool) or not isinstance(params, dict):
            return  # a notification, or a request the SDK will refuse
        protocol = self._protocol_of(method, params)
        if method == "ping":
            self._answer(request_id, {})
        elif method == LISTEN:
            variant = hashlib.sha256(json.dumps(params.get("notifications"), sort_keys=True).encode()).hexdigest()
            self._from_cache(request_id, (method, protocol, variant[:16]), self._acknowledge)
        elif method in CACHED_METHODS and not params.get("cursor"):  # a page past the first is never cached
            self._from_cache(request_id, (method, protocol, ""), self._answer)

    def _from_cache(self, request_id: ID, ask: Ask, reply: Callable[[ID, Any], None]) -> None:
        cached = self.cache.answer(ask)
        if cached is not None:
            reply(request_id, cached)
            return
        with self._state_lock:
            self._pending[request_id] = ask

    def _answer(self, request_id: ID, result: Any) -> None:
        with self._state_lock:
            self._answered.add(request_id)
        self._send(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}, separators=(",", ":")))

    def _acknowledge(self, request_id: ID, params: Any) -> None:
        with self._state_lock:
            self._acknowledged.add(request_id)
        params = {**params, "_meta": {**params.get("_meta", {}), SUBSCRIPTION_META: request_id}}
        self._send(json.dumps({"jsonrpc": "2.0", "method": ACKNOWLEDGED, "params": params}, separators=(",", ":")))

    def _protocol_of(self, method: str, params: dict[str, Any]) -> str:
        """The protocol version a request is asked under: its own (``initialize``'s
        ``protocolVersion``, or the 2026-07-28 protocol's ``_meta``), else the session's."""
        meta = params.get("_meta")
        own = params.get("protocolVersion") if method == "initialize" else (
            meta.get(PROTOCOL_META) if isinstance(meta, dict) else None)
        with self._state_lock:
            if method == "initialize" and own is not None:
                self._protocol = str(own)
            return self._protocol if own is None else str(own)

    def _from_sdk(self, line: str) -> None:
        """A line the SDK wrote: dropped when it answers or acknowledges what was already answered
        or acknowledged here, kept in the cache when it does so for the first time, written out."""
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            message = None
        if isinstance(message, dict) and self._handled_here(message):
            return
        self._send(line)

    def _handled_here(self, message: dict[str, Any]) -> bool:
        """Whether ``message`` from the SDK repeats what this front sent already; a first answer to a
        cacheable request is cached on the way."""
        if message.get("method") == ACKNOWLEDGED:
            params = message.get("params")
            meta = params.get("_meta") if isinstance(params, dict) else None
            if not isinstance(params, dict) or not isinstance(meta, dict):
                return False
            unnamed = {**params, "_meta": {key: value for key, value in meta.items() if key != SUBSCRIPTION_META}}
            return self._settled(self._acknowledged, meta.get(SUBSCRIPTION_META), unnamed)
        if "method" not in message and message.get("id") is not None:  # an answer, a result or an error
            return self._settled(self._answered, message["id"], message.get("result"))
        return False

    def _settled(self, sent: set[ID], request_id: Any, answer: Any) -> bool:
        """True when this front already sent the reply to ``request_id`` (in ``sent``); else the
        reply ``answer`` (None: nothing to keep) is cached when the request was cacheable."""
        if not isinstance(request_id, int | str):
            return False
        with self._state_lock:
            if request_id in sent:
                sent.discard(request_id)
                return True
            ask = self._pending.pop(request_id, None)
        if ask is not None and answer is not None:
            self.cache.remember(ask, answer)
        return False

    def _send(self, line: str) -> None:
        with self._write_lock:
            self._out.write(line.rstrip("\n").encode("utf-8") + b"\n")
            self._out.flush()


class LineReader:
    """What the SDK reads as its stdin: the lines the front handed on, ``""`` at the end."""

    def __init__(self, lines: queue.Queue[str]) -> None:
        self._lines = lines
        self._ended = False

    def readline(self) -> str:
        if self._ended:
            return ""
        line = self._lines.get()
        self._ended = line == ""
        return line

    def __iter__(self) -> Iterator[str]:
        return iter(self.readline, "")


class LineWriter:
    """What the SDK writes as its stdout: whole lines, each handed to the front."""

    def __init__(self, deliver: Callable[[str], None]) -> None:
        self._deliver = deliver
        self._buffer = ""

    def write(self, text: str) -> int:
        self._buffer += text
        *lines, self._buffer = self._buffer.split("\n")
        for line in lines:
            if line:
                self._deliver(line)
        return len(text)

    def flush(self) -> None:
        """Every whole line is delivered as it is written: nothing waits here."""


def serve_stdio(config: Config) -> None:
    """Serve MCP over stdio for ``config``: the front on stdin and stdout at once, then the MCP
    server (whose import and construction are the slow part) on the front's streams."""
    front = Front.on_stdio(AnswerCache.for_server(config.handshake_cache_dir(), repr(config))).start()
    import anyio
    from mcp.server.stdio import stdio_server

    from mcp_server.tools.server import build_server

    # what MCPServer.run_stdio_async runs, on other streams
    lowlevel = build_server(config)._lowlevel_server

    async def run() -> None:
        async with stdio_server(stdin=anyio.wrap_file(front.reader), stdout=anyio.wrap_file(front.writer)) as (
            read_stream, write_stream,
        ):
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())

    anyio.run(run)

