"""One call cannot hold the server: an add carries at most ``limits.max_messages`` messages,
and a write whose caller stopped waiting stops before its transaction and stores nothing.

The engine on both backends, and the real HTTP server process with a real SDK client.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest
from mcp import Client
from test_mcp_http import served  # pytest puts tests/ on sys.path (prepend import mode)

from store import Config, Engine, InvalidArgument, cancellation
from store.engine import MODEL_SLICE

STOPPED_LINE = "add_memory stopped: its caller no longer waits"


def messages(count: int, words: int = 3) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Turn {i}: " + " ".join(f"word{i}x{j}" for j in range(words))}
            for i in range(count)]


def test_an_add_of_more_messages_than_the_limit_is_refused_whole(engine: Engine) -> None:
    most = engine.config.limits.max_messages
    with pytest.raises(InvalidArgument, match=rf"{most + 1} messages in one call; add takes at most {most} "
                                              r"\(limits.max_messages\)"):
        engine.add(messages(most + 1), user_id="alice")
    assert engine.list(user_id="alice") == []
    assert len(engine.add(messages(most), user_id="alice")) == most


class CallerGone(Exception):
    pass


def test_an_abandoned_add_stops_within_one_slice_of_model_work(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller is gone after the first check: the models see one slice of the batch, not all."""
    embedded: list[int] = []
    embed_batch = engine.embedder.embed_batch
    monkeypatch.setattr(engine.embedder, "embed_batch", lambda texts: embedded.append(len(texts)) or embed_batch(texts))
    checks = 0

    def caller_waits_once() -> None:
        nonlocal checks
        checks += 1
        if checks > 1:
            raise CallerGone

    batch = messages(MODEL_SLICE * 3)
    assert len(batch) <= engine.config.limits.max_messages
    with cancellation.stopping_when(caller_waits_once), pytest.raises(CallerGone):
        engine.add(batch, user_id="alice")
    assert embedded == [MODEL_SLICE]
    assert engine.list(user_id="alice") == []


def test_over_mcp_the_refusal_names_the_limit(config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario(url: str) -> None:
        async with Client(url) as client:
            result = await client.call_tool("add_memory", {"messages": messages(6), "user_id": "alice"})
            assert result.is_error
            assert "6 messages in one call; add takes at most 5 (limits.max_messages)" in result.content[0].text
            listed = await client.call_tool("list_memories", {"user_id": "alice"})
            assert listed.structured_content["memories"] == []

    with served(config, tmp_path / "server.log", monkeypatch, max_messages=5) as url:
        anyio.run(scenario, url)


def test_an_add_past_the_time_limit_stops_and_stores_nothing(
    config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """500 long messages take the models several seconds; the caller is answered after one, and
    the abandoned work stops before its transaction instead of storing them all."""
    log = tmp_path / "server.log"

    async def scenario(url: str) -> None:
        async with Client(url) as client:
            await client.call_tool("list_memories", {"user_id": "alice"})  # the models load before the clock runs
            result = await client.call_tool("add_memory", {"messages": messages(500, words=40), "user_id": "alice"})
            assert result.is_error and "took longer than 1 seconds" in result.content[0].text
            deadline = time.monotonic() + 120
            while STOPPED_LINE not in log.read_text():
                assert time.monotonic() < deadline, "the abandoned add never stopped"
                await anyio.sleep(0.5)
            listed = await client.call_tool("list_memories", {"user_id": "alice"})
            assert listed.structured_content["memories"] == []

    with served(config, log, monkeypatch, tool_timeout_seconds=1) as url:
        anyio.run(scenario, url)
    assert "Traceback" not in log.read_text()
