"""A loopback stand-in for the OpenAI (chat completions and Responses) and Anthropic HTTP APIs,
driven by a script.

Tests point the real SDKs at it (``base_url=stub.url + "/v1"`` for openai, ``base_url=stub.url``
for anthropic) and script its answers::

    with StubServer() as stub:
        stub.script([
            {"tool_calls": [{"name": "lookup", "arguments": {"q": "x"}}]},
            {"text": "done", "usage": {"input_tokens": 12, "output_tokens": 3}},
        ])
        ...
        assert stub.requests[1]["messages"][-1]["role"] == "tool"

Each request to ``POST /v1/chat/completions``, ``POST /v1/responses`` (the OpenAI Responses API,
which the OpenAI Agents SDK uses by default) or ``POST /v1/messages`` takes the next script item
and answers it in that endpoint's format (not streamed). A script item is a dict with any of:

- ``"text"``: the answer's text;
- ``"tool_calls"``: ``[{"name": str, "arguments": dict | str, "id"?: str}]`` (a ``str`` is sent
  verbatim as OpenAI's arguments, e.g. invalid JSON);
- ``"usage"``: ``{"input_tokens": int, "output_tokens": int}`` (for Anthropic, other keys such
  as ``cache_read_input_tokens`` are passed through);
- ``"finish_reason"``: the provider's own spelling (``"length"``, ``"max_tokens"``, ...);
- ``"status"`` and ``"error"``: answer with this HTTP error instead;
- ``"delay_seconds"``: wait this long before answering (timeouts, or a request to kill a client
  in the middle of: wait until :attr:`StubServer.requests` has it);
- ``"body"``: a raw JSON body to send as is.

When the script runs out the stub answers 400 (which the SDKs do not retry) saying so.

A chat-completions request with ``"stream": true`` is answered with the same answer as
server-sent ``chat.completion.chunk`` events: the text in two chunks, each tool call in one, then
the finish reason and the usage, then ``data: [DONE]``.

Child processes only need :attr:`StubServer.url`: the server runs in the test process, which
sees their requests in :attr:`StubServer.requests`. A process can also script it or read its log
over HTTP (``POST /_stub/script`` with a JSON list, ``GET /_stub/requests``); see
:func:`remote_script` and :func:`remote_requests`.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

OPENAI_PATH = "/v1/chat/completions"
RESPONSES_PATH = "/v1/responses"
ANTHROPIC_PATH = "/v1/messages"


@dataclass
class RecordedRequest:
    """One request the stub received."""

    path: str
    headers: dict[str, str]
    body: Any = field(default=None)


class StubServer:
    """An OpenAI- and Anthropic-compatible HTTP server on 127.0.0.1, in a daemon thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._script: deque[dict[str, Any]] = deque()
        self.log: list[RecordedRequest] = []
        self._ids = 0
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="llm-stub",
            daemon=True,
        )
        self._thread.start()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``, without a path."""
        host, port = self._httpd.server_address[:2]
        assert isinstance(host, str)  # an AF_INET server
        return f"http://{host}:{port}"

    @property
    def requests(self) -> list[Any]:
        """The parsed JSON bodies of the API requests received so far, oldest first."""
        with self._lock:
            return [entry.body for entry in self.log if not entry.path.startswith("/_stub")]

    def script(self, items: Iterable[Mapping[str, Any]]) -> None:
        """Append answers to the script (see the module docstring for the item keys)."""
        with self._lock:
            self._script.extend(dict(item) for item in items)

    @property
    def remaining(self) -> int:
        """How many scripted answers have not been used yet."""
        with self._lock:
            return len(self._script)

    def close(self) -> None:
        """Stop serving and release the port."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _next_item(self) -> dict[str, Any] | None:
        with self._lock:
            return self._script.popleft() if self._script else None

    def _next_id(self, prefix: str) -> str:
        with self._lock:
            self._ids += 1
            return f"{prefix}{self._ids}"

    def _record(self, entry: RecordedRequest) -> None:
        with self._lock:
            self.log.append(entry)


def remote_script(url: str, items: list[dict[str, Any]]) -> None:
    """Append answers to the script of the stub at ``url`` (from any process)."""
    request = urllib.request.Request(
        url + "/_stub/script",
        data=json.dumps(items).encode(),
        headers={"content-type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def remote_requests(url: str) -> list[Any]:
    """Return the API request bodies the stub at ``url`` has received (from any process)."""
    with urllib.request.urlopen(url + "/_stub/requests", timeout=10) as response:
        return list(json.loads(response.read()))


def _make_handler(stub: StubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.0: one request per connection, so no keep-alive socket outlives a test.
        protocol_version = "HTTP/1.0"

        def setup(self) -> None:
            super().setup()
            # Headers and body go out in two writes: without this, Nagle's algorithm holds the
            # body until the client's delayed ACK (~40 ms a request).
            self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            if self.path == "/_stub/requests":
                self._send(200, stub.requests)
            else:
                self._send(404, {"error": {"message": f"no route GET {self.path}"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = {"__unparsed__": raw.decode("utf-8", "replace")}
            headers = {key.lower(): value for key, value in self.headers.items()}
            path = self.path.split("?", 1)[0]
            stub._record(RecordedRequest(path=path, headers=headers, body=body))
            if path == "/_stub/script":
                stub.script(body or [])
                self._send(200, {"ok": True})
            elif path == OPENAI_PATH:
                self._answer(body, _openai_body, _openai_error)
            elif path == RESPONSES_PATH:
                self._answer(body, _responses_body, _openai_error)
            elif path == ANTHROPIC_PATH:
                self._answer(body, _anthropic_body, _anthropic_error)
            else:
                self._send(404, {"error": {"message": f"no route POST {self.path}"}})

        def _answer(self, body: Any, render: Any, render_error: Any) -> None:
            item = stub._next_item()
            if item is None:
                self._send(400, render_error("tether stub: the script has no answer left"))
                return
            if item.get("delay_seconds"):
                time.sleep(float(item["delay_seconds"]))
            if _streams_chat(render, body, item):
                self._send_chat_chunks(_openai_chunks(_openai_body(stub, item, body)))
                return
            if "status" in item:
                message = item.get("error", f"scripted HTTP {item['status']}")
                self._send(int(item["status"]), render_error(message))
            elif "body" in item:
                self._send(200, item["body"])
            else:
                self._send(200, render(stub, item, body))

        def _send(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test)

        def _send_chat_chunks(self, chunks: list[dict[str, Any]]) -> None:
            lines = [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks] + ["data: [DONE]\n\n"]
            data = "".join(lines).encode()
            try:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

    return Handler


def _usage(item: Mapping[str, Any]) -> tuple[int, int]:
    usage = item.get("usage") or {}
    return int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))


def _openai_body(stub: StubServer, item: Mapping[str, Any], request: Any) -> dict[str, Any]:
    calls = item.get("tool_calls") or []
    message: dict[str, Any] = {"role": "assistant", "content": item.get("text")}
    if calls:
        message["tool_calls"] = [
            {
                "id": call.get("id") or stub._next_id("call_stub_"),
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": call["arguments"]
                    if isinstance(call.get("arguments"), str)
                    else json.dumps(call.get("arguments", {})),
                },
            }
            for call in calls
        ]
    input_tokens, output_tokens = _usage(item)
    return {
        "id": stub._next_id("chatcmpl-stub-"),
        "object": "chat.completion",
        "created": 0,
        "model": (request or {}).get("model", "stub"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": item.get("finish_reason") or ("tool_calls" if calls else "stop"),
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": input_tokens,
            "completion_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
        },
    }


def _responses_body(stub: StubServer, item: Mapping[str, Any], request: Any) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if item.get("text") is not None:
        output.append(
            {
                "type": "message",
                "id": stub._next_id("msg_stub_"),
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": item["text"], "annotations": []}],
            }
        )
    for call in item.get("tool_calls") or []:
        arguments = call.get("arguments", {})
        output.append(
            {
                "type": "function_call",
                "id": stub._next_id("fc_stub_"),
                "call_id": call.get("id") or stub._next_id("call_stub_"),
                "name": call["name"],
                "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                "status": "completed",
            }
        )
    input_tokens, output_tokens = _usage(item)
    request = request if isinstance(request, dict) else {}
    return {
        "id": stub._next_id("resp_stub_"),
        "object": "response",
        "created_at": 0,
        "model": request.get("model", "stub"),
        "status": "completed",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "temperature": None,
        "top_p": None,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def _openai_error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "server_error", "param": None, "code": None}}


def _anthropic_body(stub: StubServer, item: Mapping[str, Any], request: Any) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if item.get("text") is not None:
        content.append({"type": "text", "text": item["text"]})
    calls = item.get("tool_calls") or []
    content.extend(
        {
            "type": "tool_use",
            "id": call.get("id") or stub._next_id("toolu_stub_"),
            "name": call["name"],
            "input": call.get("arguments", {}),
        }
        for call in calls
    )
    input_tokens, output_tokens = _usage(item)
    # Other usage keys (cache_read_input_tokens, ...) pass through to Anthropic as given.
    usage = {**(item.get("usage") or {}), "input_tokens": input_tokens}
    usage["output_tokens"] = output_tokens
    return {
        "id": stub._next_id("msg_stub_"),
        "type": "message",
        "role": "assistant",
        "model": (request or {}).get("model", "stub"),
        "content": content,
        "stop_reason": item.get("finish_reason") or ("tool_use" if calls else "end_turn"),
        "stop_sequence": None,
        "usage": usage,
    }


def _anthropic_error(message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": "api_error", "message": message}}


def _streams_chat(render: Any, body: Any, item: Mapping[str, Any]) -> bool:
    """A streamed chat-completions request answered with a scripted answer (not an error)."""
    streamed = isinstance(body, dict) and bool(body.get("stream"))
    return render is _openai_body and streamed and "status" not in item and "body" not in item


def _openai_chunks(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """A whole chat completion as the ``chat.completion.chunk`` events the API streams."""
    head = {k: answer[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice, message = answer["choices"][0], answer["choices"][0]["message"]
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    text = message.get("content") or ""
    if text:
        half = len(text) // 2
        deltas += [{"content": text[:half]}, {"content": text[half:]}]
    for index, call in enumerate(message.get("tool_calls") or []):
        deltas.append({"tool_calls": [{"index": index, **call}]})
    chunks = [
        {**head, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
    ]
    end = {"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}
    chunks.append({**head, "choices": [end]})
    chunks.append({**head, "choices": [], "usage": answer["usage"]})
    return chunks
