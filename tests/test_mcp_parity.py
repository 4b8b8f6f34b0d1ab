"""One scenario through the three surfaces (engine, CLI, MCP tools) gives the same answers: the
CLI's JSON each score whole, the MCP tools' brief each to 2 decimals."""

from __future__ import annotations

import json
from collections.abc import Callable

import anyio
import pytest
from click.testing import CliRunner
from mcp import Client

from mcp_server.cli import cli
from mcp_server.tools.server import build_server
from store import Config, Engine

FACTS = ["Ana works at Globex in Lisbon", "Ana is allergic to peanuts", "Bob repairs old bicycles"]
QUERY = "Where does Ana work?"
Ranking = list[tuple[str, float]]


def via_engine(config: Config, open_engine: Callable[[Config], Engine]) -> Ranking:
    with open_engine(config) as engine:
        for fact in FACTS:
            engine.add(fact, user_id="default")
        return [(hit.memory.text, hit.score) for hit in engine.search(QUERY, user_id="default")]


def via_cli(config: Config, open_engine: Callable[[Config], Engine]) -> Ranking:
    def run(*args: str) -> str:
        result = CliRunner().invoke(cli, ["--db", config.store.db_path, *args])
        assert result.exit_code == 0, result.output
        return result.stdout

    for fact in FACTS:
        run("add", fact)
    return [(hit["text"], hit["score"]) for hit in json.loads(run("search", QUERY))["results"]]


def via_mcp(config: Config, open_engine: Callable[[Config], Engine]) -> Ranking:
    async def scenario() -> Ranking:
        async with Client(build_server(config, open_engine=open_engine)) as client:
            for fact in FACTS:
                assert not (await client.call_tool("add_memory", {"text": fact})).is_error
            result = await client.call_tool("search_memory", {"query": QUERY})
            return [(hit["text"], hit["score"]) for hit in result.structured_content["results"]]

    return anyio.run(scenario)


@pytest.mark.parametrize(("surface", "tolerance"), [(via_cli, 1e-6), (via_mcp, 0.005 + 1e-9)], ids=["cli", "mcp"])
def test_surfaces_agree_with_the_engine(
    surface: Callable[..., Ranking], tolerance: float, another_store: Callable[[str], Config],
    engine_factory: Callable[[Config], Engine], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("store.engine.Engine", engine_factory)  # the CLI opens its engine with the shared models
    expected = via_engine(another_store("engine"), engine_factory)
    got = surface(another_store("surface"), engine_factory)
    assert [text for text, _ in got] == [text for text, _ in expected]
    assert [score for _, score in got] == pytest.approx([score for _, score in expected], abs=tolerance)
