"""A fake Anthropic Messages API on 127.0.0.1: a scripted, deterministic model that records
every request, so a test can assert on exactly what Claude Code sent to the model.

The model is scripted by the prompt. In the user's own text of the current turn (not the
``<system-reminder>`` blocks Claude Code adds, not hook output, not tool results), each

    [[call mcp__trimem__search_memory {"query": "tea"}]]

asks for one tool call (the JSON object is optional). The model answers with one ``tool_use``
block per directive not yet called (``stop_reason: "tool_use"``), and once every result came
back it says ``done.``; with no directive it says ``ok.``. Calls stop at the first directive
whose tool the request does not offer: they are made once a later request offers it (so
``[[call ToolSearch {"query": "select:NAME"}]] [[call NAME]]`` loads a deferred tool, then
calls it), and if nothing can be called the model says ``tool not offered: NAME.``, which
also keeps any side request sane.

Where Claude Code 2.1.337 puts things: the prompt is the last text block of the first user
message, after its ``<system-reminder>`` blocks; hook output goes into a ``role: "system"``
message right after it (``SessionStart:startup hook success: TEXT``, ``UserPromptSubmit hook
additional context: TEXT``, ...); tool results come in later user messages.

Answers follow the Messages API's shapes: a JSON message, or with ``"stream": true`` (what
Claude Code always asks for) the SSE events ``message_start``, ``content_block_start`` /
``_delta`` (``text_delta``, ``input_json_delta``) / ``_stop``, ``message_delta`` (stop reason,
usage) and ``message_stop``. ``/v1/messages/count_tokens`` answers an estimate. Any other path
is recorded and answered 404 with an Anthropic-style error; with the harness's environment
Claude Code calls none (its start-up calls go to api.anthropic.com, not the base URL, and
``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC`` turns them off).
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

JSON = dict[str, Any]

SYSTEM_REMINDER = "<system-reminder>"
"""How Claude Code opens the text blocks it adds to the user's message."""

_DIRECTIVE = re.compile(r"\[\[call\s+([^\s\]{]+)\s*")


@dataclass(frozen=True)
class ToolCall:
    """One tool call the prompt asks the model to make."""

    name: str
    input: JSON


@dataclass(frozen=True)
class RecordedRequest:
    """One HTTP request as the fake received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: JSON | None
    received_at: float
    """``time.time()`` on arrival, comparable with timestamps other processes log."""

    @property
    def is_message(self) -> bool:
        """Whether this asked the model for a reply (not a token count or another endpoint)."""
        return self.method == "POST" and self.path == "/v1/messages"

    @property
    def messages(self) -> list[JSON]:
        """The conversation sent to the model, empty for other requests."""
        return list((self.body or {}).get("messages", []))

    @property
    def tool_names(self) -> list[str]:
        """The names of the tools offered to the model, in order."""
        return [tool["name"] for tool in (self.body or {}).get("tools", []) if "name" in tool]

    @property
    def turn_texts(self) -> list[str]:
        """All text the model saw of the current turn but tool results (see ``turn_texts``)."""
        return turn_texts(self.messages)

    @property
    def tool_uses(self) -> list[JSON]:
        """The ``tool_use`` blocks of the conversation so far, in order."""
        return tool_uses(self.messages)

    def tool_result_content(self, tool_use_id: str) -> str | list[JSON] | None:
        """What was forwarded to the model as the result of ``tool_use_id``, exactly as sent:
        a string or a list of content blocks; None when no result was sent for it."""
        block = tool_result(self.messages, tool_use_id)
        return None if block is None else block.get("content")


def blocks(message: JSON) -> list[JSON]:
    """A message's content as blocks: a plain string content is one text block."""
    content = message.get("content", [])
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def turn_start(messages: list[JSON]) -> int:
    """Index of the first user message of the current turn: the run of user messages that
    ends with the last one carrying no tool result (the tool-result messages after it belong
    to the same turn). ``len(messages)`` when there is none."""
    last = next((i for i in range(len(messages) - 1, -1, -1) if _is_user_turn(messages[i])), None)
    if last is None:
        return len(messages)
    while last > 0 and _is_user_turn(messages[last - 1]):
        last -= 1
    return last


def _is_user_turn(message: JSON) -> bool:
    return message.get("role") == "user" and not any(block.get("type") == "tool_result" for block in blocks(message))


def turn_texts(messages: list[JSON]) -> list[str]:
    """Every text block of the current turn's ``user`` and ``system`` messages: the prompt,
    Claude Code's ``<system-reminder>`` blocks and the hook output; all the model saw of the
    turn besides tool results."""
    return _texts(messages[turn_start(messages) :], ("user", "system"))


def user_prompt_texts(messages: list[JSON]) -> list[str]:
    """The current turn's text blocks the user typed: no system reminders, no hook output."""
    texts = _texts(messages[turn_start(messages) :], ("user",))
    return [text for text in texts if not text.lstrip().startswith(SYSTEM_REMINDER)]


def _texts(messages: list[JSON], roles: tuple[str, ...]) -> list[str]:
    return [
        block["text"]
        for message in messages
        if message.get("role") in roles
        for block in blocks(message)
        if block.get("type") == "text"
    ]


def parse_directives(text: str) -> list[ToolCall]:
    """The ``[[call NAME {json}]]`` directives in ``text``, in order; malformed ones are skipped."""
    calls = (_directive(text, match) for match in _DIRECTIVE.finditer(text))
    return [call for call in calls if call is not None]


def _directive(text: str, match: re.Match[str]) -> ToolCall | None:
    position = match.end()
    arguments: JSON = {}
    if text.startswith("{", position):
        try:
            arguments, position = json.JSONDecoder().raw_decode(text, position)
        except json.JSONDecodeError:
            return None
    return ToolCall(match.group(1), arguments) if text[position:].lstrip().startswith("]]") else None


def tool_uses(messages: list[JSON]) -> list[JSON]:
    """The ``tool_use`` blocks of the assistant messages, in order."""
    return [
        block
        for message in messages
        if message.get("role") == "assistant"
        for block in blocks(message)
        if block.get("type") == "tool_use"
    ]


def tool_result(messages: list[JSON], tool_use_id: str) -> JSON | None:
    """The whole ``tool_result`` block sent back for ``tool_use_id``, or None."""
    return next(
        (
            block
            for message in messages
            if message.get("role") == "user"
            for block in blocks(message)
            if block.get("type") == "tool_result" and block.get("tool_use_id") == tool_use_id
        ),
        None,
    )


class ScriptedModel:
    """Decides each reply from the request alone, so the answers are deterministic."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def reply(self, body: JSON) -> tuple[list[JSON], str]:
        """The content blocks and stop reason answering ``body``."""
        messages = list(body.get("messages", []))
        calls = [call for text in user_prompt_texts(messages) for call in parse_directives(text)]
        if not calls:
            return [_text("ok.")], "end_turn"
        pending = calls[len(tool_uses(messages[turn_start(messages) :])) :]
        if not pending:
            return [_text("done.")], "end_turn"
        offered = {tool.get("name") for tool in body.get("tools", [])}
        ready = list(itertools.takewhile(lambda call: call.name in offered, pending))
        if not ready:
            return [_text(f"tool not offered: {pending[0].name}.")], "end_turn"
        return [self._tool_use(call) for call in ready], "tool_use"

    def _tool_use(self, call: ToolCall) -> JSON:
        with self._lock:
            number = next(self._ids)
        return {"type": "tool_use", "id": f"toolu_fake{number:04d}", "name": call.name, "input": call.input}


def _text(text: str) -> JSON:
    return {"type": "text", "text": text}


def estimate_tokens(body: JSON) -> int:
    """A plausible input token count: about four characters a token."""
    return max(1, len(json.dumps(body.get("system", "")) + json.dumps(body.get("messages", []))) // 4)


def _output_tokens(content: list[JSON]) -> int:
    return max(1, len(json.dumps(content)) // 4)


def message(body: JSON, content: list[JSON], stop_reason: str, message_id: str) -> JSON:
    """The non-streaming Messages API answer."""
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "claude-fake"),
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": estimate_tokens(body), "output_tokens": _output_tokens(content)},
    }


def sse_events(body: JSON, content: list[JSON], stop_reason: str, message_id: str) -> Iterator[JSON]:
    """The streaming answer's events, in the order the Messages API sends them."""
    start = message(body, [], stop_reason, message_id) | {"stop_reason": None}
    start["usage"] = {"input_tokens": estimate_tokens(body), "output_tokens": 1}
    yield {"type": "message_start", "message": start}
    for index, block in enumerate(content):
        yield from _block_events(index, block)
    yield {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": None},
        "usage": {"output_tokens": _output_tokens(content)},
    }
    yield {"type": "message_stop"}


def _block_events(index: int, block: JSON) -> Iterator[JSON]:
    if block["type"] == "text":
        yield {"type": "content_block_start", "index": index, "content_block": _text("")}
        delta = {"type": "text_delta", "text": block["text"]}
    else:
        yield {"type": "content_block_start", "index": index, "content_block": block | {"input": {}}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
    yield {"type": "content_block_delta", "index": index, "delta": delta}
    yield {"type": "content_block_stop", "index": index}


def encode_sse(events: Iterator[JSON]) -> bytes:
    """Server-sent events as the Messages API frames them: ``event:`` then ``data:`` lines."""
    return "".join(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n" for event in events).encode()


class FakeMessagesAPI:
    """The fake API server, serving on a free port in a thread while used as a context manager."""

    def __init__(self) -> None:
        self.model = ScriptedModel()
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._message_ids = itertools.count(1)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """What ``ANTHROPIC_BASE_URL`` should be."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    def record(self, request: RecordedRequest) -> None:
        """Keep ``request``; called by the handler threads."""
        with self._lock:
            self._requests.append(request)

    def next_message_id(self) -> str:
        """A fresh ``msg_`` id."""
        with self._lock:
            return f"msg_fake{next(self._message_ids):04d}"

    def message_requests(self) -> list[RecordedRequest]:
        """The requests that asked the model for a reply, side requests included."""
        return [request for request in self.requests if request.is_message]

    def conversation(self, prompt: str) -> list[RecordedRequest]:
        """The main conversation's requests, in order: those whose first user message holds
        ``prompt``. The last one has seen every tool result."""
        return [request for request in self.message_requests() if prompt in "\n".join(_first_user_texts(request))]

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def _first_user_texts(request: RecordedRequest) -> list[str]:
    first = next((message for message in request.messages if message.get("role") == "user"), {})
    return [block["text"] for block in blocks(first) if block.get("type") == "text"]


def _handler_for(api: FakeMessagesAPI) -> type[BaseHTTPRequestHandler]:
    """A request handler class bound to ``api``."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the Anthropic client expects

        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the recorded requests are the log."""

        def _serve(self) -> None:
            request = self._read()
            api.record(request)
            if request.method == "POST" and request.path == "/v1/messages/count_tokens":
                self._send_json(200, {"input_tokens": estimate_tokens(request.body or {})})
            elif request.is_message and request.body is not None:
                self._answer(request.body)
            else:
                error = {"type": "not_found_error", "message": f"fake API: no {request.method} {request.path}"}
                self._send_json(404, {"type": "error", "error": error})

        def _read(self) -> RecordedRequest:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            headers = {key.lower(): value for key, value in self.headers.items()}
            path = self.path.split("?", 1)[0]
            return RecordedRequest(self.command, path, headers, body if isinstance(body, dict) else None, time.time())

        def _answer(self, body: JSON) -> None:
            content, stop_reason = api.model.reply(body)
            message_id = api.next_message_id()
            if body.get("stream"):
                self._send(200, "text/event-stream", encode_sse(sse_events(body, content, stop_reason, message_id)))
            else:
                self._send_json(200, message(body, content, stop_reason, message_id))

        def _send_json(self, status: int, payload: JSON) -> None:
            self._send(status, "application/json", json.dumps(payload).encode())

        def _send(self, status: int, content_type: str, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("request-id", "req_fake")
            self.end_headers()
            self.wfile.write(data)

    return Handler
