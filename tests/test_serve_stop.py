"""Stopping ``trimem serve``: one Ctrl-C (SIGINT) or SIGTERM ends it at once, with status 0 and no
traceback, and every write it acknowledged before is stored.

The stdio server is driven with raw JSON-RPC lines, as a client in a terminal would leave it:
stdin still open, the transport waiting for the next line.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import anyio
import apsw
import pytest
from mcp import Client
from test_mcp_stdio import server_command

from bench.load import free_port, wait_for

STOP_SECONDS = 5
"""Far above the fraction of a second a stop takes, far below the 30 s and more it hung for."""


def rpc(stdin: IO[str], stdout: IO[str], number: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    stdin.write(json.dumps({"jsonrpc": "2.0", "id": number, "method": method, "params": params}) + "\n")
    stdin.flush()
    while True:  # skip notifications (log messages) until the answer
        message = json.loads(stdout.readline())
        if message.get("id") == number:
            return message


def stored_texts(db_path: Path) -> list[str]:
    with apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY) as conn:
        return [text for (text,) in conn.execute("SELECT text FROM memories")]


@contextlib.contextmanager
def server_process(command: list[str], folder: Path, **streams: Any) -> Iterator[subprocess.Popen[str]]:
    """``trimem serve`` with its stderr in ``folder/server.log``, killed at the end if still running."""
    with (folder / "server.log").open("w") as log:
        server = subprocess.Popen(command, stderr=log, text=True, **streams)
        try:
            yield server
        finally:
            server.kill()
            server.wait()


def assert_stopped_cleanly(status: int, folder: Path, db_name: str, acknowledged: str) -> None:
    """Status 0, no traceback or "Aborted!" in the server's log, and the acknowledged write stored."""
    assert status == 0
    log = (folder / "server.log").read_text()
    assert "Traceback" not in log and "Aborted" not in log, log
    assert stored_texts(folder / db_name) == [acknowledged]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_stdio_server_stops_at_once_and_keeps_what_it_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signum: signal.Signals
) -> None:
    monkeypatch.setenv("TRIMEM_DB_PATH", str(tmp_path / "stdio.db"))
    with server_process(server_command(), tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as server:
        assert server.stdin is not None and server.stdout is not None
        rpc(server.stdin, server.stdout, 1, "initialize", {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "terminal", "version": "0"}})
        server.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
        added = rpc(server.stdin, server.stdout, 2, "tools/call",
                    {"name": "add_memory", "arguments": {"text": "The spare key is under the blue pot"}})
        assert added["result"]["isError"] is False, added
        server.send_signal(signum)
        status = server.wait(timeout=STOP_SECONDS)
    assert_stopped_cleanly(status, tmp_path, "stdio.db", "The spare key is under the blue pot")


def test_http_server_stops_on_ctrl_c_with_a_session_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Uvicorn finishes the requests in flight and stops; the command then ends with status 0,
    not "Aborted!" and status 1, though a client still holds its session open."""
    port = free_port()
    monkeypatch.setenv("TRIMEM_DB_PATH", str(tmp_path / "http.db"))
    command = [sys.executable, "-m", "mcp_server", "serve", "--transport", "http", "--port", str(port)]

    async def scenario(server: subprocess.Popen[str]) -> None:
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            added = await client.call_tool("add_memory", {"text": "The boiler is serviced in March"})
            assert not added.is_error
            server.send_signal(signal.SIGINT)
            with anyio.fail_after(STOP_SECONDS):
                while server.poll() is None:
                    await anyio.sleep(0.05)

    with server_process(command, tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL) as server:
        wait_for(port)
        anyio.run(scenario, server)
        status = server.wait(timeout=STOP_SECONDS)
    assert_stopped_cleanly(status, tmp_path, "http.db", "The boiler is serviced in March")
