"""The stdio server's front (``mcp_server/handshake.py``): the handshake answered from the cache
before the SDK runs, every message still handed to the SDK in order, the SDK's answers to what
was answered already dropped; and, through a real ``trimem serve``, the cache written on a first
start and answering the next."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from mcp_server.tools.handshake import AnswerCache, Front

TRIMEM = Path(sys.executable).with_name("trimem")
PROTOCOL = "2025-06-18"


def request(request_id: int, method: str, **params: Any) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}) + "\n"


INITIALIZE = request(1, "initialize", protocolVersion=PROTOCOL, capabilities={},
                     clientInfo={"name": "test", "version": "1"})
INITIALIZED = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n"


def front_on(cache: AnswerCache, lines: list[str]) -> tuple[Front, io.BytesIO]:
    """A front that has read ``lines`` (then the end of its input), writing into the returned buffer."""
    wire_out = io.BytesIO()
    front = Front(cache, io.BytesIO("".join(lines).encode()), wire_out)
    front._read()  # the reader thread's work, in this thread
    return front, wire_out


def written(wire_out: io.BytesIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in wire_out.getvalue().decode().splitlines()]


def handed_on(front: Front) -> list[str]:
    return list(front.reader)


def test_a_cached_handshake_is_answered_at_once_and_still_handed_to_the_sdk(tmp_path: Path) -> None:
    cache = AnswerCache(tmp_path, "key")
    cache.remember(("initialize", PROTOCOL, ""), {"serverInfo": {"name": "trimem"}})
    cache.remember(("tools/list", PROTOCOL, ""), {"tools": [{"name": "add_memory"}]})
    lines = [INITIALIZE, INITIALIZED, request(2, "tools/list"), request(3, "ping"), request(4, "tools/call")]
    front, wire_out = front_on(cache, lines)
    assert written(wire_out) == [
        {"jsonrpc": "2.0", "id": 1, "result": {"serverInfo": {"name": "trimem"}}},
        {"jsonrpc": "2.0", "id": 2, "result": {"tools": [{"name": "add_memory"}]}},
        {"jsonrpc": "2.0", "id": 3, "result": {}},
    ]
    assert handed_on(front) == lines  # the SDK's session sees the whole conversation, in order

    for request_id in (1, 2, 3, 4):  # the SDK answers everything; only the call's answer goes out
        front.writer.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": {"from": "sdk"}}) + "\n")
    assert written(wire_out)[3:] == [{"jsonrpc": "2.0", "id": 4, "result": {"from": "sdk"}}]


def test_without_a_cached_answer_the_sdk_answers_and_its_answer_is_kept(tmp_path: Path) -> None:
    cache = AnswerCache(tmp_path, "key")
    AnswerCache(tmp_path, "an older server").remember(("initialize", PROTOCOL, ""), {"stale": True})
    front, wire_out = front_on(cache, [INITIALIZE, request(2, "tools/list", cursor="next")])
    assert written(wire_out) == []  # a stale entry answers nothing; a page past the first is never cached
    answer = {"jsonrpc": "2.0", "id": 1, "result": {"serverInfo": {"name": "trimem"}}}
    front.writer.write(json.dumps(answer) + "\n" + json.dumps({"jsonrpc": "2.0", "id": 2, "result": {}}))
    front.writer.write("\n")  # a line is delivered whole, however the SDK's writes split it
    assert written(wire_out) == [answer, {"jsonrpc": "2.0", "id": 2, "result": {}}]
    assert cache.answer(("initialize", PROTOCOL, "")) == answer["result"]
    assert cache.answer(("tools/list", PROTOCOL, "")) is None
    assert cache.answer(("initialize", "2024-11-05", "")) is None  # per protocol version
    cache.remember(("initialize", "../../escaped", ""), {"x": 1})  # a version comes from the client: never a path
    assert sorted(path.name for path in tmp_path.rglob("*")) == [f"initialize-{PROTOCOL}.json"]


def test_an_error_or_a_notification_from_the_sdk_is_written_out_and_nothing_is_cached(tmp_path: Path) -> None:
    cache = AnswerCache(tmp_path, "key")
    front, wire_out = front_on(cache, [INITIALIZE])
    error = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "unsupported"}}
    log = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}}
    front.writer.write(json.dumps(error) + "\n" + json.dumps(log) + "\n")
    assert written(wire_out) == [error, log]
    assert cache.answer(("initialize", PROTOCOL, "")) is None


def test_hostile_lines_are_handed_on_untouched_and_the_front_keeps_reading(tmp_path: Path) -> None:
    """What the SDK refuses is the SDK's to answer: the front neither answers it nor stops over it."""
    hostile = ['{"a":' * 5000 + "1" + "}" * 5000 + "\n", '{"jsonrpc":"2.0","id":[1],"method":"ping"}\n',
               '{"jsonrpc":"2.0","id":{"x":1},"method":"tools/list","params":[]}\n', "\xff\xfe not json\n", "\n",
               request(5, "ping")]
    front, wire_out = front_on(AnswerCache(tmp_path, "key"), hostile)
    assert written(wire_out) == [{"jsonrpc": "2.0", "id": 5, "result": {}}]
    assert handed_on(front) == hostile
    refusal = '{"jsonrpc":"2.0","id":[1],"error":{"code":-32600,"message":"bad id"}}'
    front.writer.write(refusal + "\n" + "[" * 5000 + "\n")  # written out as they are, whatever they hold
    assert wire_out.getvalue().decode().splitlines()[1:] == [refusal, "[" * 5000]


MODERN = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientInfo": {"name": "test"}}


def test_the_2026_protocol_handshake_and_its_subscription_are_answered_from_the_cache(tmp_path: Path) -> None:
    """Claude Code 2.1 speaks the 2026-07-28 protocol: no initialize, each request names its version,
    and a server counts as connected once its subscription is acknowledged (a notification)."""
    lines = [request("discover", "server/discover", _meta=META),
             request("listen:0", "subscriptions/listen", _meta=META, notifications={"toolsListChanged": True}),
             request(3, "tools/list", _meta=META)]
    ack = {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
           "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": "listen:0"},
                      "notifications": {"toolsListChanged": True}}}
    cold, cold_out = front_on(AnswerCache(tmp_path, "key"), lines)
    assert written(cold_out) == []
    from_sdk = [{"jsonrpc": "2.0", "id": "discover", "result": {"supportedVersions": [MODERN]}}, ack,
                {"jsonrpc": "2.0", "id": 3, "result": {"tools": []}}]
    cold.writer.write("".join(json.dumps(line) + "\n" for line in from_sdk))
    assert written(cold_out) == from_sdk

    lines[1] = lines[1].replace("listen:0", "listen:7")  # the next start's subscription has an id of its own
    warm, warm_out = front_on(AnswerCache(tmp_path, "key"), lines)
    acked = {**ack, "params": {**ack["params"], "_meta": {"io.modelcontextprotocol/subscriptionId": "listen:7"}}}
    assert written(warm_out) == [from_sdk[0], acked, from_sdk[2]]
    warm.writer.write(json.dumps(acked) + "\n")  # the SDK's own acknowledgement: already sent
    assert len(written(warm_out)) == 3
    other = request("listen:8", "subscriptions/listen", _meta=META, notifications={"promptsListChanged": True})
    assert written(front_on(AnswerCache(tmp_path, "key"), [other])[1]) == []  # another ask, another answer


def exchange(env: dict[str, str], lines: list[str], answers: int) -> list[dict[str, Any]]:
    """``trimem serve`` over stdio: ``lines`` sent one by one, each request's answer read before the next."""
    with subprocess.Popen([str(TRIMEM), "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, env=env) as server:
        assert server.stdin is not None and server.stdout is not None
        read: list[dict[str, Any]] = []
        for line in lines:
            server.stdin.write(line.encode())
            server.stdin.flush()
            if '"id"' in line:
                read.append(json.loads(server.stdout.readline()))
        server.stdin.close()
        server.wait(timeout=60)
    assert len(read) == answers
    return read


def test_trimem_serve_answers_a_second_start_from_what_the_first_answered(tmp_path: Path) -> None:
    env = {**os.environ, "TRIMEM_HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    search = request(3, "tools/call", name="search_memory", arguments={"query": "tea"})
    conversation = [INITIALIZE, INITIALIZED, request(2, "tools/list"), search]
    first = exchange(env, conversation, 3)
    folder = tmp_path / "cache" / "trimem" / "handshake"
    assert sorted(path.name for path in folder.iterdir()) == [f"initialize-{PROTOCOL}.json",
                                                              f"tools-list-{PROTOCOL}.json"]
    assert first[2]["result"]["isError"] is False

    second = exchange(env, conversation, 3)
    assert second == first  # the same handshake, and the SDK's session, fed the replayed one, serves calls

    # An answer that can only have come from the cache: the front answered before the SDK did.
    entry = folder / f"initialize-{PROTOCOL}.json"
    stored = json.loads(entry.read_text())
    stored["result"]["serverInfo"]["title"] = "from the cache"
    entry.write_text(json.dumps(stored))
    third = exchange(env, conversation[:2], 1)
    assert third[0]["result"]["serverInfo"]["title"] == "from the cache"
