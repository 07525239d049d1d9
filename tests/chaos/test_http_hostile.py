"""Round three over HTTP: slowloris (half-sent requests, stalled bodies, one address's crowd of
connections), hostile safetensors shapes in ``/v1/fit``, and a burst of submits racing the
queue's limit."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import Host, follow, one

#: Half-sent connections the slowloris test opens, spread over this many loopback addresses.
SLOW_CONNECTIONS = 300
SLOW_ADDRESSES = 10
#: Submits racing for the chaos host's three queue places (INLINE_MAX_QUEUED=3).
BURST = 40


@pytest.fixture(scope="module")
def slow_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    """One run at a time, three may wait; a request gets one second for its headers and a body
    one second between bytes."""
    root = tmp_path_factory.mktemp("slow")
    (root / "inputs").mkdir()
    env = {"INLINE_HEADER_TIMEOUT": "1", "INLINE_BODY_TIMEOUT": "1", "INLINE_MAX_RUNS": "1"}
    h = Host(root / "data", root / "inputs", env)
    yield h
    h.stop()


@pytest.fixture(scope="module")
def queue_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    """One run at a time, three may wait, the default deadlines (a burst of connections on a
    loaded machine may take longer than the slow host's one second to be read)."""
    root = tmp_path_factory.mktemp("queue")
    (root / "inputs").mkdir()
    h = Host(root / "data", root / "inputs", {"INLINE_MAX_RUNS": "1"})
    yield h
    h.stop()


@pytest.fixture(scope="module")
def capped_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    """Four connections per address, and headers that may take two minutes (held connections
    stay held for the whole test)."""
    root = tmp_path_factory.mktemp("capped")
    (root / "inputs").mkdir()
    env = {"INLINE_MAX_CONNECTIONS_PER_CLIENT": "4", "INLINE_HEADER_TIMEOUT": "120"}
    h = Host(root / "data", root / "inputs", env)
    yield h
    h.stop()


def dial(host: Host, source: str, data: bytes = b"") -> socket.socket:
    """A connection to ``host`` from loopback address ``source`` that has sent ``data``."""
    sock = socket.create_connection(
        ("127.0.0.1", host.server.port), timeout=10, source_address=(source, 0)
    )
    if data:
        sock.sendall(data)
    return sock


def read_to_eof(sock: socket.socket, deadline: float) -> bytes:
    """Everything the server sends until it closes the connection; fails at ``deadline``."""
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("the server still holds the connection open")
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            raise AssertionError("the server still holds the connection open") from None
        except ConnectionResetError:
            break  # closed, with our bytes unread
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def health_answers(host: Host) -> float:
    """Seconds a fresh client's ``/v1/health`` took (it must answer 200)."""
    t0 = time.monotonic()
    r = httpx.get(host.url + "/v1/health", timeout=5)
    assert r.status_code == 200, r.text
    return time.monotonic() - t0


def error_of(answer: bytes) -> dict[str, Any]:
    """The error envelope of a raw HTTP answer."""
    _, _, body = answer.partition(b"\r\n\r\n")
    return json.loads(body)["error"]


def test_half_sent_requests_cost_nobody_else_and_end_at_the_header_deadline(slow_host):
    socks: list[socket.socket] = []
    silent: list[socket.socket] = []
    try:
        for i in range(SLOW_CONNECTIONS):
            source = f"127.0.0.{2 + i % SLOW_ADDRESSES}"
            socks.append(dial(slow_host, source, b"GET /v1/health HT"))
        silent = [dial(slow_host, "127.0.0.2") for _ in range(3)]  # connect, never send
        assert health_answers(slow_host) < 5
        deadline = time.monotonic() + 30  # the deadline is one second: a generous bound
        answers = [read_to_eof(s, deadline) for s in socks]
        quiet = [read_to_eof(s, deadline) for s in silent]
    finally:
        for s in socks + silent:
            s.close()
    statuses = {a.split(b"\r\n", 1)[0] for a in answers}
    assert statuses == {b"HTTP/1.1 408 Request Timeout"}, statuses
    error = error_of(answers[0])
    assert error["code"] == "request_timeout"
    assert "INLINE_HEADER_TIMEOUT" in error["message"]
    assert quiet == [b"", b"", b""]  # asked nothing: closed without an answer
    assert health_answers(slow_host) < 5


def test_a_stalled_body_is_answered_408_and_closed(slow_host):
    port = slow_host.server.port
    head = (
        f"POST /v1/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    )
    sock = dial(slow_host, "127.0.0.2", head.encode() + b'{"graph": ')
    try:
        answer = read_to_eof(sock, time.monotonic() + 30)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert "INLINE_BODY_TIMEOUT" in error_of(answer)["message"]
    assert health_answers(slow_host) < 5


def test_one_address_holds_at_most_its_cap_of_connections(capped_host):
    held = [dial(capped_host, "127.0.0.3", b"GET /v1/health HT") for _ in range(4)]
    try:
        extra = dial(capped_host, "127.0.0.3")  # sends nothing: the answer is not reset away
        try:
            answer = read_to_eof(extra, time.monotonic() + 15)
        finally:
            extra.close()
        assert answer.startswith(b"HTTP/1.1 429 "), answer[:200]
        error = error_of(answer)
        assert error["code"] == "too_many_connections"
        assert "INLINE_MAX_CONNECTIONS_PER_CLIENT=4" in error["message"]
        assert health_answers(capped_host) < 5  # another address is served as ever
        held.pop().close()  # a connection that ends gives its place back
        request = b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        for _ in range(50):  # the server may read the close after our next dial
            sock = dial(capped_host, "127.0.0.3", request)
            try:
                answer = read_to_eof(sock, time.monotonic() + 15)
            finally:
                sock.close()
            if not answer.startswith(b"HTTP/1.1 429 "):
                break
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
    finally:
        for s in held:
            s.close()


def safetensors(path: Path, shape: Any) -> None:
    """A two-byte safetensors file whose one tensor ``w`` claims ``shape``."""
    header = json.dumps({"w": {"dtype": "F16", "shape": shape, "data_offsets": [0, 2]}}).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\x00\x00")


@pytest.mark.parametrize(
    ("name", "shape"),
    [
        ("string", "abc"),
        ("object", {"a": 1}),
        ("negative", [-1, 64]),
        ("fraction", [1.5]),
        ("boolean", [True]),
        ("enormous", [2**40, 2**40]),
    ],
)
def test_fit_refuses_a_header_shape_that_is_not_a_size(slow_host, name, shape):
    safetensors(slow_host.data / "models" / "vae" / f"shape_{name}.safetensors", shape)
    r = httpx.get(
        slow_host.url + "/v1/fit", params={"model": f"vae/shape_{name}.safetensors"}, timeout=30
    )
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_model"
    assert "tensor 'w' has shape" in error["message"], error["message"]
    assert "whole numbers >= 0" in error["message"]


def test_fit_still_sizes_a_sane_header(slow_host):
    safetensors(slow_host.data / "models" / "vae" / "shape_sane.safetensors", [1])
    r = httpx.get(slow_host.url + "/v1/fit", params={"model": "vae/shape_sane.safetensors"})
    assert r.status_code == 200, r.text
    assert r.json()["components"][0]["bytes"] == 2


async def burst(url: str, gate: Path) -> list[httpx.Response]:
    """``BURST`` different runs submitted at once, from their own address."""
    transport = httpx.AsyncHTTPTransport(
        local_address="127.0.0.12", limits=httpx.Limits(max_connections=BURST)
    )
    async with httpx.AsyncClient(base_url=url, transport=transport, timeout=60) as c:
        docs = [one("testpack/gate", {"file": str(gate), "tag": f"b{i}"}) for i in range(BURST)]
        return list(await asyncio.gather(*(c.post("/v1/runs", json=d) for d in docs)))


def test_a_burst_of_submits_never_queues_past_the_limit(queue_host, tmp_path):
    gate = tmp_path / "open"
    with queue_host.client() as c:
        first = c.post("/v1/runs", json=one("testpack/gate", {"file": str(gate), "tag": "first"}))
        assert first.status_code == 201, first.text
        first_id = first.json()["runId"]
        assert follow(queue_host.ws, first_id, {"progress"})["type"] == "progress"  # it runs
        try:
            answers = asyncio.run(burst(queue_host.url, gate))
            queued = c.get("/v1/health").json()["runs"]["queued"]
        finally:
            gate.touch()
        codes = sorted(r.status_code for r in answers)
        assert set(codes) <= {201, 429}, [r.text for r in answers if r.status_code != 201][:3]
        accepted = [r.json()["runId"] for r in answers if r.status_code == 201]
        assert len(accepted) <= 3 and queued <= 3, (codes, queued)
        for run_id in [first_id, *accepted]:
            assert follow(queue_host.ws, run_id, set())["type"] in ("run_done", "snapshot")
