"""Claude Code's hooks: recall before a prompt by both paths, beside a bare search and its floor; the block's size.

    python -m bench hooks [--memories 10000] [--queries 200] [--command-runs 15] [--no-doc]

1. The ``mcp_tool`` path. One scope of ``--memories`` memories (the dev turns made distinct, as
   ``speed`` grows its scope, built with the ``Replay`` models) is stored in process; then one
   ``trimem serve`` on that file is reached over real stdio, as Claude Code holds it, and each
   question is asked two ways in turn, alternating which goes first: ``recall_for_prompt`` as the
   hook calls it, and a bare ``search_memory`` with the same ``top_k``. The floor is the engine's own
   ``search`` in this process on the same file: what the tool adds above it is the protocol.
2. The ``command`` path: ``trimem hook prompt`` run as Claude Code runs it, the hook's JSON on
   stdin, on the same file. Beside it, the floors of any command hook in Python: a bare interpreter
   start (``python -c pass``) and ``trimem --help`` (the package's imports, no model).
3. The block: each dev conversation in its own scope, as turns and as facts, asked its own
   questions and the next conversation's (foreign ones, which nothing there answers), through the
   hook's own recall (``mcp_server.hooks.recall.for_prompt``): the block's mean and largest size
   in characters, and the share of prompts that inject nothing at all.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio

from bench import abstention, coldstart, corpus, locomo, quality, report, stdio
from bench.replay import Replay, backend_embedder
from bench.scope_search import SCOPE, fill
from bench.timing import Latency, run_timed
from mcp_server.hooks import recall
from store import Config, Engine, load_config
from store.analysis.nlp import NLP

WARMUP = 10
TARGET_TOOL_P50_MS = 30.0
"""The issue's bound on the ``mcp_tool`` path's p50 among 10,000 memories."""
TARGET_COMMAND_P50_MS = 300.0
"""The issue's goal for the ``command`` path's p50."""
PROJECT = "/home/ana/atlas"
"""The ``cwd`` every hook payload carries."""


@dataclass(frozen=True)
class ToolRun:
    """Seconds per call of the hook's tool and of a bare search over stdio, and of the engine's own search."""

    memories: int
    hook: Latency
    bare: Latency
    floor: Latency


@dataclass(frozen=True)
class CommandRun:
    """Wall seconds of one ``trimem hook prompt`` run, and of its floors."""

    hook: Latency
    python: Latency
    help: Latency
    injected: int
    """Runs that printed a block (the questions are the scope's own, so most should)."""


@dataclass(frozen=True)
class BlockSizes:
    """What the hook injected for one shape's own and foreign questions, in characters."""

    shape: str
    own: list[int]
    foreign: list[int]


async def _over_stdio(home: Path, questions: Sequence[str], top_k: int) -> tuple[list[float], list[float]]:
    calls = {
        "recall_for_prompt": lambda q: {"prompt": q, "cwd": PROJECT, "session_id": "bench", "user_id": SCOPE},
        "search_memory": lambda q: {"query": q, "user_id": SCOPE, "top_k": top_k},
    }
    times: dict[str, list[float]] = {tool: [] for tool in calls}
    async with stdio.serve(home) as (session, _):
        for question in questions[:WARMUP]:
            for tool, arguments in calls.items():
                await stdio.call(session, tool, **arguments(question))
        for index, question in enumerate(questions):
            for tool in list(calls) if index % 2 == 0 else list(calls)[::-1]:
                times[tool].append(await stdio.timed(session, tool, **calls[tool](question)))
    return times["recall_for_prompt"], times["search_memory"]


def measure_tool(config: Config, home: Path, questions: Sequence[str], memories: int) -> ToolRun:
    """The ``mcp_tool`` path over real stdio beside a bare ``search_memory``, then the floor in process."""
    hook, bare = anyio.run(_over_stdio, home, questions, config.hooks.recall_top_k)
    floor = []
    with Engine(config) as engine:
        for question in questions[:WARMUP]:
            engine.search(question, user_id=SCOPE, top_k=config.hooks.recall_top_k)
        for question in questions:
            started = time.perf_counter()
            engine.search(question, user_id=SCOPE, top_k=config.hooks.recall_top_k)
            floor.append(time.perf_counter() - started)
    return ToolRun(memories, Latency.of(hook), Latency.of(bare), Latency.of(floor))


def measure_command(home: Path, questions: Sequence[str], runs: int) -> CommandRun:
    """``trimem hook prompt`` ``runs`` times (one untimed first), alternating with its floors."""
    script = coldstart.trimem_script()
    env = {**os.environ, **stdio.server_env(home), "TRIMEM_USER_ID": SCOPE}
    payloads = [json.dumps({"session_id": "bench", "transcript_path": "", "cwd": PROJECT,
                            "hook_event_name": "UserPromptSubmit", "prompt": question})
                for question in corpus.cycle(questions, runs + 1)]
    run_timed([*script, "hook", "prompt"], env, payloads[0])
    hook, python, help_, injected = [], [], [], 0
    for payload in payloads[1:]:
        seconds, printed = run_timed([*script, "hook", "prompt"], env, payload)
        hook.append(seconds)
        injected += bool(printed.strip())
        python.append(run_timed([sys.executable, "-c", "pass"], env)[0])
        help_.append(run_timed([*script, "--help"], env)[0])
    return CommandRun(Latency.of(hook), Latency.of(python), Latency.of(help_), injected)


def measure_blocks(base: Config, shape: str, folder: Path) -> BlockSizes:
    """Each conversation in its own scope (``quality.ingest``), asked its own and its neighbour's questions."""
    samples = locomo.load(shape=shape)
    config = base.replace("store", db_path=str(folder / f"blocks-{shape}.db"))
    own, foreign = [], []
    with Engine(config) as engine:
        quality.ingest(engine, samples)
        for sample, question, is_foreign in abstention.questions(samples):
            block = recall.for_prompt(engine, config, question.text, {"user_id": sample.sample_id})
            (foreign if is_foreign else own).append(len(block.text))
    return BlockSizes(shape, own, foreign)


def _ms(latency: Latency) -> tuple[str, str]:
    return f"{latency.p50_ms:.1f}", f"{latency.p95_ms:.1f}"


def tool_table(run: ToolRun) -> str:
    rows = [
        ["`recall_for_prompt` over stdio (the hook)", *_ms(run.hook), f"{run.hook.p50_ms / run.floor.p50_ms:.2f}×"],
        ["`search_memory` over stdio (bare search)", *_ms(run.bare), f"{run.bare.p50_ms / run.floor.p50_ms:.2f}×"],
        ["`Engine.search` in process (floor)", *_ms(run.floor), "1.00×"],
    ]
    return report.table(["call", "p50 ms", "p95 ms", "p50 / floor"], rows, "lrrr")


def command_table(run: CommandRun) -> str:
    rows = [
        ["`trimem hook prompt` (the hook)", *_ms(run.hook)],
        ["`trimem --help` (imports, no model)", *_ms(run.help)],
        ["`python -c pass` (an interpreter)", *_ms(run.python)],
    ]
    return report.table(["run", "p50 ms", "p95 ms"], rows, "lrr")


def block_table(sizes: Sequence[BlockSizes]) -> str:
    rows = []
    for size in sizes:
        for asked, lengths in (("own", size.own), ("foreign", size.foreign)):
            injected = [length for length in lengths if length]
            rows.append([size.shape, asked, len(lengths), f"{statistics.fmean(lengths):.0f}",
                         f"{statistics.fmean(injected):.0f}" if injected else "-", max(lengths),
                         f"{1 - len(injected) / len(lengths):.3f}"])
    return report.table(["shape", "questions", "asked", "mean chars", "mean chars when injected", "largest",
                         "nothing injected"], rows, "llrrrrr")


def markdown(tool: ToolRun, command: CommandRun, sizes: Sequence[BlockSizes], runs: int, config: Config,
             command_line: str, environment: str) -> str:
    largest = max(max(size.own + size.foreign) for size in sizes)
    targets = report.table(["target", "measured", "met"], [
        [f"`mcp_tool` path p50 ≤ {TARGET_TOOL_P50_MS:g} ms among {tool.memories:,} memories",
         f"{tool.hook.p50_ms:.1f} ms", report.yes(tool.hook.p50_ms <= TARGET_TOOL_P50_MS)],
        [f"`command` path p50 < {TARGET_COMMAND_P50_MS:g} ms (a goal)", f"{command.hook.p50_ms:.0f} ms",
         report.yes(command.hook.p50_ms < TARGET_COMMAND_P50_MS)],
        [f"block ≤ {config.hooks.max_block_chars:,} characters", f"largest {largest:,}",
         report.yes(largest <= config.hooks.max_block_chars)],
    ], "lrl")
    return "\n\n".join([
        "## Claude Code's hooks: recall before each prompt",
        f"Measured by `{command_line}`.",
        environment,
        targets,
        (f"**The `mcp_tool` path**, {tool.memories:,} memories in the scope, {tool.hook.calls} prompts asked both "
        f"ways in turn (top {config.hooks.recall_top_k}):"),
        tool_table(tool),
        f"**The `command` path**, {runs} runs on the same store ({command.injected} of them injected a block):",
        command_table(command),
        ("**The block**, each dev conversation in its own scope, asked its own questions and the next "
        "conversation's (foreign ones):"),
        block_table(sizes),
    ])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=10_000, help="memories in the scope the hook recalls from")
    parser.add_argument("--queries", type=int, default=200, help="prompts timed on the mcp_tool path")
    parser.add_argument("--command-runs", type=int, default=15, help="timed runs of trimem hook prompt")
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = parser.parse_args(argv)

    samples = locomo.load()
    questions = corpus.queries(samples, args.queries)
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder)
        config = load_config(environ={}).replace("store", db_path=str(home / "memories.db"))
        embedder, nlp = backend_embedder(config, config.store.embedding_backend), NLP()
        embedder.load()
        nlp.load()
        base_of = corpus.variants(samples, args.memories)
        replay = Replay(embedder, nlp, base_of)
        with Engine(config, embedder=replay, nlp=replay) as engine:
            fill(engine, list(base_of))
        tool = measure_tool(config, home, questions, args.memories)
        command = measure_command(home, questions, args.command_runs)
        sizes = [measure_blocks(config, shape, home) for shape in ("turns", "facts")]
    environment = report.environment({"spaCy pipeline": nlp.tier, "embedding backend": embedder.backend})
    section = markdown(tool, command, sizes, args.command_runs, config, report.command_line(), environment)
    report.publish("hooks", section, not args.no_doc)
    return 0
