"""PostgreSQL stopped, crashed and started again under a running ``trimem serve``, and a
server started before its database: the real server process, a real SDK client, and a
PostgreSQL of the test's own that it stops and starts (``RestartablePostgres``).

What a caller must see: while the database is down, a clear refusal at once (not the pool's
30 s wait); once it is back, every call served, including by a server that started while it
was down, and none failed by a connection the restart left dead in the pool.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from conftest import RestartablePostgres
from mcp import Client
from test_mcp_http import served  # pytest puts tests/ on sys.path (prepend import mode)

from store import Config, Engine, load_config
from store.postgres.connection import POOL_WAIT_S

RECOVERY_SECONDS = 60
"""How long a test waits for a server to serve again once PostgreSQL is back (a deadline, not
a measure: the retries back off to 15 s at most)."""


@pytest.fixture
def outage_config(restartable_postgres: RestartablePostgres, model_cache: Path,
                  engine_factory: Callable[[Config], Engine]) -> Config:
    """A store on the restartable server, holding one memory."""
    config = load_config(environ={}).replace("store", database_url=restartable_postgres.database(),
                                             model_cache=str(model_cache))
    with engine_factory(config) as engine:
        engine.add("The boiler service is booked for March 3", user_id="alice")
    return config


async def listed(client: Client) -> list[str]:
    """The texts ``list_memories`` shows, or the error it answers with."""
    result = await client.call_tool("list_memories", {"user_id": "alice"})
    if result.is_error:
        raise AssertionError(result.content[0].text)
    return [memory["text"] for memory in result.structured_content["memories"]]


async def error_of(client: Client) -> str:
    result = await client.call_tool("list_memories", {"user_id": "alice"})
    assert result.is_error, "served while the database was down"
    return result.content[0].text


async def served_again(client: Client) -> list[str]:
    """``listed`` once the server serves again, trying for up to ``RECOVERY_SECONDS``."""
    deadline = time.monotonic() + RECOVERY_SECONDS
    while True:
        try:
            return await listed(client)
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            await anyio.sleep(0.5)


def test_a_server_started_while_postgres_is_down_serves_once_it_starts(
    outage_config: Config, restartable_postgres: RestartablePostgres, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    restartable_postgres.stop()
    log = tmp_path / "server.log"

    async def scenario(url: str) -> None:
        async with Client(url) as client:  # the handshake needs no database
            refusal = await error_of(client)
            assert "cannot reach the PostgreSQL server" in refusal and "keeps trying" in refusal, refusal
            restartable_postgres.start()
            assert await served_again(client) == ["The boiler service is booked for March 3"]

    with served(outage_config, log, monkeypatch) as url:
        anyio.run(scenario, url)
    assert "Traceback" not in log.read_text()


@pytest.mark.parametrize("stop", ["fast", "immediate"])
def test_postgres_down_then_restarted_under_a_running_server(
    stop: str, outage_config: Config, restartable_postgres: RestartablePostgres, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``fast`` is ``pg_ctl stop``; ``immediate`` a crash. Before the outage four sessions at
    once fill the pool; after it, every call of each session is served: none meets a
    connection the restart left dead."""
    log = tmp_path / "server.log"

    async def scenario(url: str) -> None:
        async with Client(url) as a, Client(url) as b, Client(url) as c, Client(url) as d:
            clients = [a, b, c, d]
            async with anyio.create_task_group() as group:
                for client in clients:
                    group.start_soon(listed, client)
            restartable_postgres.stop(stop)
            asked = time.monotonic()
            refusal = await error_of(a)
            # A deadline, not a speed claim: half the pool's wait tells "said at once" from "waited for the pool".
            assert time.monotonic() - asked < POOL_WAIT_S / 2, "the call waited for the pool"
            assert "cannot reach the PostgreSQL server" in refusal, refusal
            restartable_postgres.start()
            for _ in range(3):
                for client in clients:
                    assert await listed(client) == ["The boiler service is booked for March 3"]

    with served(outage_config, log, monkeypatch, database_pool_size=4) as url:
        anyio.run(scenario, url)
    assert "Traceback" not in log.read_text()
