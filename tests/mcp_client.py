"""The MCP server in process, through the SDK's in-memory client: fixtures and call helpers
shared by the MCP test modules (registered in ``conftest.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from mcp import Client

from mcp_server.tools.server import build_server
from store import Config, Engine


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def opened(engine_factory: Callable[[Config], Engine]) -> list[Engine]:
    """The engines the server's lifespan opened, so a test can reach behind the protocol."""
    return []


@pytest.fixture
async def connect(
    config: Config, engine_factory: Callable[[Config], Engine], opened: list[Engine]
) -> Callable[..., Any]:
    """``async with connect(config) as client``: the real server, in process."""
    from contextlib import asynccontextmanager

    def factory(cfg: Config) -> Engine:
        opened.append(engine_factory(cfg))
        return opened[-1]

    @asynccontextmanager
    async def open_client(cfg: Config = config) -> AsyncIterator[Client]:
        async with Client(build_server(cfg, open_engine=factory)) as client:
            yield client

    return open_client


@pytest.fixture
async def client(connect: Callable[..., Any]) -> AsyncIterator[Client]:
    async with connect() as instance:
        yield instance


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool call that must succeed; its structured output."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def fail(client: Client, tool: str, **arguments: Any) -> str:
    """A tool call that must fail; its message."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    return result.content[0].text
