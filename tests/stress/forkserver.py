"""A fork server for crash and multi-process tests: load the models once, fork writers cheaply.

Loading torch, the embedding model and spaCy takes 3–15 s, so starting a fresh Python
for each of dozens of SIGKILLs would take minutes. Instead this script (the *zygote*)
loads the models, opens no database, and forks a worker per command. Each worker
opens its own ``Engine`` (its own SQLite connection, after the fork) and is a real,
separate process: SIGKILL ends it with no cleanup, exactly like a crash.

Run as a script, it speaks a line protocol on stdin/stdout:

    zygote → ``loaded``
    ``crash DB USER SEED WHEN``   fork a worker that adds memories until it is killed: by the
                                  test after a delay (WHEN=timer), or by itself at a random row
                                  write inside a transaction or just after a commit (WHEN=inside)
    ``write DB USER COUNT SEED``  fork a worker that adds COUNT memories, searching as it goes
    worker → ``forked PID`` · ``open PID`` · ``begin PID`` · ``ack PID MEMORY_ID`` · ``done PID``
             · ``mid PID`` (about to kill itself inside a write transaction)
    zygote → ``dead PID STATUS`` when a worker has ended (STATUS is the raw wait status)

Workers write each line with one ``os.write`` (atomic on a pipe, no Python buffer to
inherit or lose) and print ``ack`` only after ``add`` has returned, i.e. committed.
``ForkServer`` is the test-side client.
"""

from __future__ import annotations

import os
import queue
import random
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

PEOPLE = ("Alice", "Bob", "Chen Wei", "Dana", "Emeka", "Fatima", "Gustav", "Hiro")
PLACES = ("Paris", "Lagos", "Kyoto", "Lima", "Oslo", "Toronto")
THINGS = ("the PostgreSQL migration", "a sourdough recipe", "the Q3 budget", "piano lessons", "her new bike")


def memory_text(tag: str, index: int) -> str:
    """A distinct, entity-bearing memory (every third one names no entity)."""
    rng = random.Random(f"{tag}-{index}")
    if index % 3 == 2:
        return f"prefers quiet mornings and strong tea, note {tag} {index}"
    who, whom, what, where = rng.choice(PEOPLE), rng.choice(PEOPLE), rng.choice(THINGS), rng.choice(PLACES)
    return f"{who} told {whom} about {what} in {where}, note {tag} {index}"


# --- zygote side ------------------------------------------------------------------------


def _say(*words: object) -> None:
    os.write(1, (" ".join(str(w) for w in words) + "\n").encode())


def _kill_inside_transactions(engine, rng: random.Random) -> None:
    """SIGKILL ourselves at a random row write (mid-transaction) or right after a commit.

    The parent's timer mostly lands while the models run, outside any transaction;
    these hooks make sure the kills that matter most happen too. The row count
    includes vec0's and FTS5's shadow-table rows.
    """
    conn = engine.backend._conn
    if rng.random() < 0.25:
        commits = rng.randint(1, 6)

        def after_commit(_conn, _name, _pages):
            nonlocal commits
            commits -= 1
            if commits == 0:
                os.kill(os.getpid(), signal.SIGKILL)
            return 0

        conn.set_wal_hook(after_commit)
    else:
        rows = rng.randint(1, 120)

        def on_row(*_args):
            nonlocal rows
            rows -= 1
            if rows == 0:
                _say("mid", os.getpid())
                os.kill(os.getpid(), signal.SIGKILL)

        conn.set_update_hook(on_row)


def _crash_worker(engine, user: str, seed: int, inside: bool) -> None:
    """Add batches of 1–4 memories forever, until the parent (or, with ``inside``, a hook
    in the middle of a write transaction) kills us."""
    from store import MemoryInput

    rng = random.Random(seed)
    pid = os.getpid()
    if inside:
        _kill_inside_transactions(engine, rng)
    index = 0
    while True:
        batch = [MemoryInput(memory_text(f"s{seed}", index + k)) for k in range(rng.randint(1, 4))]
        index += len(batch)
        _say("begin", pid)
        for added in engine.add_many(batch, user_id=user):
            _say("ack", pid, added.memory.id)


def _write_worker(engine, user: str, count: int, seed: int) -> None:
    """Add ``count`` memories one call each, searching the scope after every third add."""
    pid = os.getpid()
    for index in range(count):
        _say("begin", pid)
        (added,) = engine.add(memory_text(f"{user}-{seed}", index), user_id=user)
        _say("ack", pid, added.memory.id)
        if index % 3 == 0:
            engine.search(memory_text(f"{user}-{seed}", index), user_id=user, top_k=5)
    _say("done", pid)


def _run_worker(command: list[str], embedder, nlp) -> None:
    from store import Engine, load_config

    kind, database, user, *numbers = command
    _say("forked", os.getpid())
    config = load_config(environ={}).using(database)
    with Engine(config, embedder=embedder, nlp=nlp) as engine:
        _say("open", os.getpid())
        if kind == "crash":
            _crash_worker(engine, user, int(numbers[0]), inside=numbers[1] == "inside")
        else:
            _write_worker(engine, user, int(numbers[0]), int(numbers[1]))


def zygote() -> None:
    """Load the models, then fork one worker per command line until stdin closes."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # forking after the tokenizer ran
    from store import load_config
    from store.analysis.embeddings import open_embedder
    from store.analysis.nlp import NLP

    config = load_config(environ={"TRIMEM_MODEL_CACHE": os.environ["TRIMEM_MODEL_CACHE"]})
    store = config.store
    embedder = open_embedder(store.embedding_model, store.embedding_backend, cache_dir=config.model_cache_dir, threads=1)
    nlp = NLP(config.store.spacy_pipeline or None)
    embedder.embed_batch(["warm up"])
    nlp.analyze_query("Alice warmed up in Paris")
    _say("loaded")
    pending = b""
    children: set[int] = set()
    open_stdin = True
    while open_stdin or children:
        ready, _, _ = select.select([0] if open_stdin else [], [], [], 0.05)
        if ready:
            chunk = os.read(0, 4096)
            open_stdin = bool(chunk)
            pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            command = line.decode().split()
            if not command:
                continue
            pid = os.fork()
            if pid == 0:
                status = 1
                try:
                    _run_worker(command, embedder, nlp)
                    status = 0
                except BaseException:  # noqa: BLE001 - a forked worker reports any failure and exits
                    import traceback

                    traceback.print_exc()
                finally:
                    os._exit(status)
            children.add(pid)
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                children.discard(pid)
                _say("dead", pid, status)


# --- test side --------------------------------------------------------------------------


@dataclass
class Worker:
    """What one forked worker said."""

    pid: int
    acked: list[str] = field(default_factory=list)
    in_flight: bool = False
    mid_transaction: bool = False
    opened: bool = False
    done: bool = False
    status: int | None = None


class ForkServer:
    """Starts the zygote and turns its output lines into ``Worker`` records."""

    def __init__(self, stderr_path: Path, model_cache: Path, load_timeout: float = 300.0) -> None:
        self._stderr = open(stderr_path, "w+")  # noqa: SIM115 - held open for the zygote; close() closes it
        env = {
            **os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1",
            "TRIMEM_MODEL_CACHE": str(model_cache),
        }
        self._proc = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            cwd=Path(__file__).resolve().parents[2],
        )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.workers: dict[int, Worker] = {}
        self._unclaimed: list[int] = []
        self.expect("loaded", timeout=load_timeout)

    def _pump(self) -> None:
        for raw in self._proc.stdout:
            self._lines.put(raw.decode(errors="replace").strip())
        self._lines.put("eof")

    def stderr(self) -> str:
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read()[-4000:]

    def _handle(self, line: str) -> None:
        kind, *rest = line.split()
        if kind in ("loaded", "eof"):
            return
        pid = int(rest[0])
        worker = self.workers.setdefault(pid, Worker(pid))
        if kind == "forked":
            self._unclaimed.append(pid)
        elif kind == "open":
            worker.opened = True
        elif kind == "begin":
            worker.in_flight = True
        elif kind == "ack":
            worker.acked.append(rest[1])
            worker.in_flight = False
        elif kind == "mid":
            worker.mid_transaction = True
        elif kind == "done":
            worker.done = True
        elif kind == "dead":
            worker.status = int(rest[1])

    def expect(self, wanted: str, timeout: float) -> str:
        """Handle lines until one starts with ``wanted``; fail after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"fork server: no {wanted!r} within {timeout}s\n{self.stderr()}") from None
            if line == "eof" and wanted != "eof":
                raise AssertionError(f"fork server exited early\n{self.stderr()}")
            self._handle(line)
            if line.split()[0] == wanted:
                return line

    def drain(self, seconds: float) -> None:
        """Handle whatever arrives during ``seconds`` (acks keep coming while we wait)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                self._handle(self._lines.get(timeout=left))
            except queue.Empty:
                return

    def start(self, *command: object, timeout: float = 60.0) -> Worker:
        """Fork one worker and return it once it has announced itself."""
        self._proc.stdin.write((" ".join(str(c) for c in command) + "\n").encode())
        self._proc.stdin.flush()
        while not self._unclaimed:
            self.expect("forked", timeout)
        return self.workers[self._unclaimed.pop(0)]

    def wait_dead(self, worker: Worker, timeout: float = 60.0) -> Worker:
        """Handle lines until the zygote has reaped ``worker``."""
        deadline = time.monotonic() + timeout
        while worker.status is None:
            self.expect("dead", max(0.1, deadline - time.monotonic()))
        return worker

    def close(self) -> None:
        """Close stdin (the zygote exits once its workers have) and reap it."""
        if self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._stderr.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        for worker in self.workers.values():
            if worker.status is None:
                try:
                    os.kill(worker.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.close()


if __name__ == "__main__":
    zygote()
