"""Local stand-ins for Anthropic's Messages API and Gemini's generateContent API, speaking their
real wire formats (server-sent events) on 127.0.0.1, for the providers' own SDKs to talk to."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ANTHROPIC_THINKING = ["Let me ", "check the ", "weather."]
ANTHROPIC_TEXT = ["I'll look ", "that up ", "for you."]
GEMINI_THOUGHT = ["Thinking about ", "Paris."]
GEMINI_TEXT = ["Bonjour", ", it is ", "sunny."]


def _sse(event: str | None, data: dict[str, Any]) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def anthropic_events(model: str) -> list[bytes]:
    """A streamed Messages reply: a thinking block, a text block and a tool_use block."""
    out = [
        _sse("message_start", {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 12, "output_tokens": 1}}}),
        _sse("content_block_start", {"type": "content_block_start", "index": 0,
             "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
    ]  # fmt: skip
    for piece in ANTHROPIC_THINKING:
        out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                        "delta": {"type": "thinking_delta", "thinking": piece}}))  # fmt: skip
    out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                    "delta": {"type": "signature_delta", "signature": "sig"}}))  # fmt: skip
    out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": 0}))
    out.append(_sse("ping", {"type": "ping"}))
    out.append(_sse("content_block_start", {"type": "content_block_start", "index": 1,
                    "content_block": {"type": "text", "text": ""}}))  # fmt: skip
    for piece in ANTHROPIC_TEXT:
        out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": 1,
                        "delta": {"type": "text_delta", "text": piece}}))  # fmt: skip
    out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": 1}))
    out.append(_sse("content_block_start", {"type": "content_block_start", "index": 2,
                    "content_block": {"type": "tool_use", "id": "toolu_01", "name": "get_weather",
                                      "input": {}}}))  # fmt: skip
    for piece in ['{"city": ', '"Paris", "unit"', ': "C"}']:
        out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": 2,
                        "delta": {"type": "input_json_delta", "partial_json": piece}}))  # fmt: skip
    out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": 2}))
    out.append(_sse("message_delta", {"type": "message_delta",
                    "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                    "usage": {"output_tokens": 30}}))  # fmt: skip
    out.append(_sse("message_stop", {"type": "message_stop"}))
    return out


def gemini_chunks(model: str) -> list[bytes]:
    """A streamGenerateContent reply (alt=sse): thoughts, text, then a function call."""

    def chunk(parts: list[dict[str, Any]], finish: str | None = None) -> bytes:
        cand: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        if finish:
            cand["finishReason"] = finish
        body = {
            "candidates": [cand],
            "modelVersion": model,
            "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 5},
        }
        return f"data: {json.dumps(body)}\r\n\r\n".encode()

    out = [chunk([{"text": t, "thought": True}]) for t in GEMINI_THOUGHT]
    out += [chunk([{"text": t}]) for t in GEMINI_TEXT]
    out.append(chunk([{"functionCall": {"id": "fc_7", "name": "get_weather",
                                        "args": {"city": "Paris"}}}], finish="STOP"))  # fmt: skip
    return out


class FakeUpstream:
    """Both fakes in one server. ``fail`` is a list of statuses answered, one per request,
    before the real answers (``529`` overloaded, ``429``...; ``401`` is never retried)."""

    def __init__(self, image: bytes) -> None:
        self.image = image
        self.fail: list[int] = []
        #: when set, an error answer quotes the key it was sent (as some APIs do)
        self.echo_key = False
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _reply_json(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status in (429, 529, 503):
                    self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, pieces: list[bytes]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for p in pieces:
                    self.wfile.write(f"{len(p):x}\r\n".encode() + p + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(size) or b"{}")
                path = self.path.split("?", 1)[0]
                fake.requests.append({"path": self.path, "headers": dict(self.headers),
                                      "body": body})  # fmt: skip
                if fake.fail:
                    status = fake.fail.pop(0)
                    key = (
                        self.headers.get("x-api-key")
                        or self.headers.get("x-goog-api-key")
                        or self.headers.get("Authorization", "").removeprefix("Bearer ")
                    )
                    quoted = f" (key {key})" if fake.echo_key else ""
                    if path.startswith("/v1/messages"):
                        kind = "overloaded_error" if status == 529 else "rate_limit_error"
                        said = f"fake upstream says {status}{quoted}"
                        error = {"type": kind, "message": said}
                        self._reply_json(status, {"type": "error", "error": error})
                    else:
                        self._reply_json(status, {"error": {"code": status,
                            "message": f"fake upstream says {status}{quoted}",
                            "status": "RESOURCE_EXHAUSTED"}})  # fmt: skip
                    return
                if path == "/v1/messages":
                    self._stream(anthropic_events(str(body.get("model"))))
                elif path.endswith(":streamGenerateContent"):
                    self._stream(gemini_chunks(path.rsplit("/", 1)[-1].split(":")[0]))
                elif path.endswith(":generateContent"):
                    data = base64.b64encode(fake.image).decode()
                    self._reply_json(200, {"candidates": [{"content": {"role": "model", "parts": [
                        {"text": "Here it is."},
                        {"inlineData": {"mimeType": "image/png", "data": data}}]},
                        "finishReason": "STOP", "index": 0}]})  # fmt: skip
                else:
                    self._reply_json(404, {"error": {"code": 404, "message": "no such route"}})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeUpstream:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
