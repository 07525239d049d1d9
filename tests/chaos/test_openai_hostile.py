"""Hostile OpenAI clients (issue 22, round three): dropped streams, a host killed under a stream,
a provider that rate-limits with ``Retry-After: 0`` or ``-1``, and bodies that used to be 500s.

A real host with the hosted pack, two runs at once, in front of a fake Anthropic/Gemini on
127.0.0.1 (their real wire formats): a prompt of ``hold`` streams a dot every ``TICK`` until the
caller goes (or ``HOLD_TICKS`` have gone), ``ratelimit:<value>`` is answered 429 with that
``Retry-After``, anything else gets a short reply. Runs are followed to their end over the
events websocket.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

import anyio
import httpx
import openai
import pytest
from inline_host.hub import SecretStore

from ..hosted.conftest import builtin_dir, hosted_data  # noqa: F401 (fixtures)
from .conftest import Host, follow

#: Seconds between the dots of a held stream, and how many dots at most.
TICK: Final = 0.05
HOLD_TICKS: Final = 400
CLAUDE: Final = "anthropic/claude-sonnet-4-5"
GEMINI: Final = "google/gemini-2.5-flash"


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _message_start(model: str) -> list[bytes]:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }
    block = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    return [
        _sse("message_start", {"type": "message_start", "message": message}),
        _sse("content_block_start", block),
    ]


def _text(piece: str) -> bytes:
    return _sse(
        "content_block_delta",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}},
    )


def _message_end() -> list[bytes]:
    return [
        _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _sse(
            "message_delta",
            {
                "type": "message_delta",
                "usage": {"output_tokens": 2},
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            },
        ),
        _sse("message_stop", {"type": "message_stop"}),
    ]


def _prompt(path: str, body: dict[str, Any]) -> str:
    """The last text of an Anthropic or Gemini request ("" when it ends otherwise)."""
    if path.startswith("/v1/messages"):
        content = (body.get("messages") or [{}])[-1].get("content")
        blocks = content if isinstance(content, list) else [{"text": content}]
    else:
        blocks = (body.get("contents") or [{}])[-1].get("parts") or []
    return str(blocks[-1].get("text") or "") if blocks else ""


class Upstream:
    """The fake provider; ``calls`` holds the prompt of every request it was sent."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.stalled = threading.Event()  # a "stall" request arrived
        self.unstall = threading.Event()
        self.gate = threading.Event()  # lets "gated" replies finish
        self.lock = threading.Lock()
        self.called = threading.Condition(self.lock)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _write(self, piece: bytes) -> None:
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                self.wfile.flush()

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"] or 0)))
                path = self.path.split("?", 1)[0]
                prompt = _prompt(path, body)
                with fake.called:
                    fake.calls.append(prompt)
                    fake.called.notify_all()
                if prompt.startswith("ratelimit:"):
                    self._rate_limited(path, prompt.removeprefix("ratelimit:"))
                    return
                if prompt == "badkey":  # refused, echoing the key masked but for its tail
                    bearer = self.headers.get("authorization", "").removeprefix("Bearer ")
                    key = (
                        self.headers.get("x-api-key")
                        or self.headers.get("x-goog-api-key")
                        or bearer
                    )
                    self._refused(path, f"invalid x-api-key: {key[:3]}...{key[-6:]}")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for piece in _message_start(str(body.get("model"))):
                        self._write(piece)
                    if prompt == "hold":  # a dot a tick until the caller goes
                        for _ in range(HOLD_TICKS):
                            self._write(_text("."))
                            threading.Event().wait(TICK)
                    if prompt == "stall":  # started, then silent: a read that never returns
                        fake.stalled.set()
                        fake.unstall.wait(120)
                    if prompt.startswith("gated"):  # a dot, then the rest once the test says
                        self._write(_text("."))
                        fake.gate.wait(120)
                    self._write(_text("ok"))
                    for piece in _message_end():
                        self._write(piece)
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:  # the caller went
                    self.close_connection = True

            def _refused(self, path: str, message: str) -> None:
                if path.startswith("/v1/messages"):
                    error = {"type": "authentication_error", "message": message}
                    data = json.dumps({"type": "error", "error": error}).encode()
                else:
                    data = json.dumps(
                        {"error": {"code": 401, "message": message, "status": "UNAUTHENTICATED"}}
                    ).encode()
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _rate_limited(self, path: str, retry_after: str) -> None:
                if path.startswith("/v1/messages"):
                    error = {"type": "rate_limit_error", "message": "slow down"}
                    data = json.dumps({"type": "error", "error": error}).encode()
                else:
                    data = json.dumps(
                        {
                            "error": {
                                "code": 429,
                                "message": "slow down",
                                "status": "RESOURCE_EXHAUSTED",
                            }
                        }
                    ).encode()
                self.send_response(429)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Retry-After", retry_after)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def count(self, prompt: str) -> int:
        with self.lock:
            return self.calls.count(prompt)

    def wait_for(self, prompt: str, calls: int, timeout: float) -> bool:
        """Whether ``prompt`` had been sent ``calls`` times within ``timeout`` seconds."""
        with self.called:
            return self.called.wait_for(lambda: self.calls.count(prompt) >= calls, timeout)


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    fake = Upstream()
    fake.thread.start()
    yield fake
    fake.unstall.set()
    fake.gate.set()
    fake.server.shutdown()
    fake.server.server_close()


@pytest.fixture(scope="module")
def host(
    hosted_data: Path,  # noqa: F811
    builtin_dir: Path,  # noqa: F811
    upstream: Upstream,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Host]:
    """Two runs at once; a call may take 20 s; both keys stored."""
    root = tmp_path_factory.mktemp("openai-hostile")
    data, inputs = root / "data", root / "inputs"
    data.mkdir()
    inputs.mkdir()
    (data / "packs").symlink_to(hosted_data / "packs", target_is_directory=True)
    SecretStore(data).set("ANTHROPIC_API_KEY", "sk-ant-test")
    SecretStore(data).set("GEMINI_API_KEY", "AIza-test")
    h = Host(
        data,
        inputs,
        {
            "INLINE_BUILTIN_PACKS": str(builtin_dir),
            "INLINE_PACK_PATHS": "",
            "INLINE_ANTHROPIC_BASE_URL": upstream.url,
            "INLINE_GEMINI_BASE_URL": upstream.url,
            "INLINE_MAX_RUNS": "2",
            "INLINE_MAX_QUEUED": "8",
            "INLINE_CALL_TIMEOUT": "20",
        },
    )
    yield h
    h.stop()


@pytest.fixture
def api(host: Host) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{host.url}/openai/v1", api_key="unused", max_retries=0)


def ask(prompt: str, model: str = CLAUDE, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": prompt}], **extra}


@dataclass
class Opened:
    """A streamed completion under way: the response, its run, the rest of its lines."""

    response: httpx.Response
    run_id: str
    lines: Iterator[str]


def open_stream(
    http: httpx.Client, body: dict[str, Any], *, content: bool, retry: bool = False
) -> Opened:
    """Start a streamed completion and read it up to its first chunk (with ``content``: up to
    the first text, so its upstream call is under way). ``retry``: sent as an OpenAI SDK's
    retry of the same body."""
    headers = {"x-stainless-retry-count": "1"} if retry else {}
    request = http.build_request("POST", "/openai/v1/chat/completions", headers=headers,
                                 json={**body, "stream": True})  # fmt: skip
    response = http.send(request, stream=True)
    assert response.status_code == 200, response.read()
    lines = response.iter_lines()
    for line in lines:
        if _content(line) or (line.startswith("data: {") and not content):
            break
    return Opened(response, response.headers["x-inline-run-id"], lines)


def _content(line: str) -> str:
    """The text an SSE line of a completion stream carries."""
    if not line.startswith("data: {"):
        return ""
    choices = json.loads(line.removeprefix("data: ")).get("choices")
    return str(choices[0]["delta"].get("content") or "") if choices else ""


def ended(host: Host, run_id: str) -> str:
    """How the run ended (its status), once it has, from its events."""
    end = follow(host.ws, run_id, set(), timeout=20)
    if end["type"] == "snapshot":
        return str(end["state"]["status"])
    return {"run_done": "done"}.get(end["type"], end["type"])


def test_dropped_streams_cancel_their_runs_and_free_the_slots(host: Host, upstream: Upstream):
    before = upstream.count("hold")
    with httpx.Client(base_url=host.url, timeout=30) as http:
        held = [open_stream(http, ask("hold"), content=True) for _ in range(2)]  # both slots
        queued = open_stream(http, ask("hold"), content=False)  # waits for a slot
        for opened in [*held, queued]:
            opened.response.close()  # the client goes
    for opened in [*held, queued]:
        assert ended(host, opened.run_id) == "cancelled"
    # a new request gets a slot at once, and the third never reached the provider
    api = openai.OpenAI(base_url=f"{host.url}/openai/v1", api_key="unused", max_retries=0)
    reply = api.chat.completions.create(
        model=CLAUDE, messages=[{"role": "user", "content": "hi"}], timeout=15
    )
    assert reply.choices[0].message.content == "ok"
    assert upstream.count("hold") == before + 2


def test_a_run_a_retry_listens_to_outlives_its_first_try(host: Host, upstream: Upstream):
    """The SDK's retry of a stream attaches to the first try's run: the first try's going
    leaves the run to the retry, past the grace; the retry's going cancels it."""
    from inline_host.api.openai._listeners import GRACE

    with httpx.Client(base_url=host.url, timeout=30) as http:
        first = open_stream(http, ask("hold"), content=True)
        retry = open_stream(http, ask("hold"), content=True, retry=True)
        run_id = first.run_id
        assert retry.run_id == run_id
        first.response.close()
        dots = 0
        for line in retry.lines:  # twice the grace of dots, streamed after the first try left
            dots += _content(line).count(".")
            if dots * TICK > 2 * GRACE:
                break
        assert httpx.get(f"{host.url}/v1/runs/{run_id}", timeout=10).json()["status"] == "running"
        retry.response.close()
    assert ended(host, run_id) == "cancelled"


def test_a_dropped_plain_completion_cancels_its_run(host: Host, upstream: Upstream):
    """Not streamed: the route itself listens for the client's disconnect."""
    before = upstream.count("hold")
    known = {r["runId"] for r in httpx.get(f"{host.url}/v1/runs", timeout=10).json()["runs"]}
    body = json.dumps(ask("hold")).encode()
    with socket.create_connection(("127.0.0.1", host.server.port), timeout=30) as sock:
        sock.sendall(
            b"POST /openai/v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        assert upstream.wait_for("hold", before + 1, timeout=30)  # its call is under way
        live = httpx.get(f"{host.url}/v1/runs", timeout=10).json()["runs"]
        (run_id,) = [r["runId"] for r in live if r["runId"] not in known]
    assert ended(host, run_id) == "cancelled"


def test_a_run_is_cancelled_only_once_its_last_listener_left():
    """A retry attached to a run keeps it: the first try's leaving cancels nothing. A run
    still queued goes at once; a running one after the grace, unless a request joined it."""
    from inline_host.api.openai._listeners import Listeners

    class Service:
        def __init__(self, status: str) -> None:
            self.status, self.cancelled, self.ended = status, 0, anyio.Event()

        async def settled(self, run_id: str) -> None:
            await self.ended.wait()

        def state(self, run_id: str) -> Any:
            return type("State", (), {"status": self.status})()

        async def cancel(self, run_id: str) -> str:
            self.status, self.cancelled = "cancelled", self.cancelled + 1
            self.ended.set()
            return "cancelled"

    async def main() -> None:
        listeners, running = Listeners(grace=0), Service("running")
        first, retry = listeners.join(["run_a"]), listeners.join(["run_a"])
        assert await listeners.leave(running, first) == []  # type: ignore[arg-type]
        assert await listeners.leave(running, first) == []  # type: ignore[arg-type]  # once
        assert listeners.listening("run_a") == 1 and running.cancelled == 0
        assert await listeners.leave(running, retry) == ["run_a"]  # type: ignore[arg-type]
        assert listeners.listening("run_a") == 0 and running.cancelled == 1
        patient, queued = Listeners(grace=3600), Service("queued")
        with anyio.fail_after(30):  # no grace for a run that has not started
            lease = patient.join(["run_b"])
            assert await patient.leave(queued, lease) == ["run_b"]  # type: ignore[arg-type]
        patient.grace, running, out = 0.2, Service("running"), []
        lease = patient.join(["run_c"])

        async def leave() -> None:
            out.extend(await patient.leave(running, lease))  # type: ignore[arg-type]

        async with anyio.create_task_group() as tg:
            tg.start_soon(leave)
            await anyio.wait_all_tasks_blocked()  # leave() waits out its grace
            retry = patient.join(["run_c"])  # a retry attaches meanwhile
        assert out == [] and running.cancelled == 0 and patient.listening("run_c") == 1
        assert await patient.leave(running, retry) == ["run_c"]  # type: ignore[arg-type]

    anyio.run(main)


def test_a_streamed_completion_whose_host_was_killed_is_not_run_again(
    host: Host, upstream: Upstream
):
    before = upstream.count("hold")
    with httpx.Client(base_url=host.url, timeout=30) as http:
        opened = open_stream(http, ask("hold"), content=True)
        host.restart(kill9=True)  # the client's connection goes with it
        opened.response.close()
    run_id = opened.run_id
    assert ended(host, run_id) == "cancelled"
    state = httpx.get(f"{host.url}/v1/runs/{run_id}", timeout=10).json()
    assert state["status"] == "cancelled"
    assert "its client is gone" in state["error"]["message"]
    assert upstream.count("hold") == before + 1  # one billed call, not two


def test_a_run_store_made_before_scoped_runs_gets_the_column(tmp_path: Path):
    """An inline.db of an older host: opened, it gains ``scoped`` (its runs resume, as then)."""
    from inline_host.runs._store import SCHEMA, RunStore, StoredRun

    old = SCHEMA.replace(",\n    scoped INTEGER NOT NULL DEFAULT 0", "")
    assert old != SCHEMA
    with sqlite3.connect(tmp_path / "inline.db") as db:
        db.executescript(old)
        db.execute(
            "INSERT INTO runs (run_id, target, status, request, request_hash, created_at)"
            " VALUES ('run_old', 'n', 'queued', '{}', 'h', 1)"
        )
    store = RunStore(tmp_path / "inline.db")
    new = StoredRun(run_id="run_new", target="n", status="queued", request={}, state=None,
                    client_run_id=None, request_hash="h", created_at=2, scoped=True)  # fmt: skip
    store.add_run(new)
    assert [(r.run_id, r.scoped) for r in store.unfinished()] == [("run_old", False),
                                                                  ("run_new", True)]  # fmt: skip
    store.close()
    RunStore(tmp_path / "inline.db").close()  # a second open finds the column there


@pytest.mark.parametrize("model", [CLAUDE, GEMINI])
@pytest.mark.parametrize("retry_after", ["0", "-1"])
def test_a_429_with_retry_after_zero_or_negative_is_tried_three_times(
    api: openai.OpenAI, upstream: Upstream, model: str, retry_after: str
):
    prompt = f"ratelimit:{retry_after}"
    before = upstream.count(prompt)
    with pytest.raises(openai.RateLimitError) as err:
        api.chat.completions.create(
            model=model, messages=[{"role": "user", "content": prompt}], timeout=60
        )
    assert err.value.code == "rate_limit_exceeded"
    assert "rate limited, gave up after 3 tries" in err.value.message
    assert err.value.response.headers["x-should-retry"] == "false"
    assert upstream.count(prompt) - before == 3


def test_a_seed_beyond_64_bits_is_a_400(api: openai.OpenAI):
    with pytest.raises(openai.BadRequestError) as err:
        api.chat.completions.create(
            model=CLAUDE, messages=[{"role": "user", "content": "hi"}], seed=2**70
        )
    assert err.value.param == "seed" and "64-bit" in err.value.message


@pytest.mark.parametrize(
    "tool_calls",
    [
        "get_weather",
        [1],
        [{"id": "c1", "type": "function", "function": "get_weather"}],
        [{"id": "c1", "type": "function", "function": {"name": 7, "arguments": "{}"}}],
        [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}],
        [{"id": ["c1"], "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    ],
)
def test_malformed_tool_calls_in_messages_are_a_400(host: Host, tool_calls: Any):
    messages = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": tool_calls},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    r = httpx.post(
        f"{host.url}/openai/v1/chat/completions",
        timeout=30,
        json={"model": CLAUDE, "messages": messages},
    )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"].startswith("messages[1].tool_calls"), error
    assert set(error) == {"message", "type", "param", "code"}


def test_system_only_messages_are_a_400(api: openai.OpenAI):
    for model in (CLAUDE, GEMINI):
        with pytest.raises(openai.BadRequestError) as err:
            api.chat.completions.create(
                model=model, messages=[{"role": "system", "content": "Be brief."}]
            )
        assert err.value.param == "messages" and "only system" in err.value.message


def test_a_google_model_without_its_key_is_a_400_naming_the_secret(
    api: openai.OpenAI, host: Host, upstream: Upstream
):
    store = SecretStore(host.data)
    store.remove("GEMINI_API_KEY")
    try:
        before = len(upstream.calls)
        for model in ("google/gemini-2.5-flash", "google/anything-at-all"):
            with pytest.raises(openai.BadRequestError) as err:
                api.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": "hi"}]
                )
            assert err.value.code == "secret_missing" and err.value.param == "model"
            assert "inline secrets set GEMINI_API_KEY" in err.value.message
        assert len(upstream.calls) == before
    finally:
        store.set("GEMINI_API_KEY", "AIza-test")


# (low) masked secrets
@pytest.mark.parametrize("model", [CLAUDE, GEMINI])
def test_a_key_the_provider_echoes_in_part_never_reaches_the_client(
    host: Host, upstream: Upstream, model: str
):
    """The provider refuses the key, echoing it masked but for its last six characters: no
    piece of the key is in the answer, the run's state or its events."""
    with host.client(timeout=60) as http:
        body = {**ask("badkey", model), "stream": True}
        response = http.post("/openai/v1/chat/completions", json=body)
        run_id = response.headers["x-inline-run-id"]
        state = http.get(f"/v1/runs/{run_id}").json()
    assert state["status"] == "error", state
    assert "invalid x-api-key" in state["error"]["message"], state["error"]
    key = "sk-ant-test" if model == CLAUDE else "AIza-test"
    for text in (response.text, json.dumps(state)):
        assert key[-6:] not in text and key[-4:] not in text, text


# (7) a stalled hosted call, cancelled, takes nothing else down
def test_a_stalled_hosted_call_cancelled_leaves_its_workers_other_calls_alone(
    host: Host, upstream: Upstream
):
    """One Claude call stalls inside a read its provider never answers; a stream of the same
    worker is under way beside it (the host runs two at once). Cancelling the stalled one, as
    its timeout does, ends it at once: the worker is not stopped and the stream finishes."""

    def claude(prompt: str) -> dict[str, Any]:
        params = {"messages": [{"role": "user", "content": prompt}]}
        nodes = [{"id": "c", "type": "anthropic/complete", "params": params}]
        return {"graph": {"schemaVersion": 1, "nodes": nodes}, "target": "c"}

    with host.client(timeout=60) as http:
        stalled = http.post("/v1/runs", json=claude("stall")).json()["runId"]
        assert upstream.stalled.wait(60)
        before = http.get("/v1/health").json()["workers"]["hosted"]
        stream = http.post("/v1/runs", json=claude("gated")).json()["runId"]
        assert upstream.wait_for("gated", 1, 60)
        assert http.delete(f"/v1/runs/{stalled}").status_code == 200
        assert ended(host, stalled) == "cancelled"
        upstream.gate.set()
        assert ended(host, stream) == "done", http.get(f"/v1/runs/{stream}").json()
        after = http.get("/v1/health").json()["workers"]["hosted"]
        assert (after["pid"], after["generation"]) == (before["pid"], before["generation"])
