"""Issue 22's ComfyUI items: a PNG text-chunk bomb, a subgraph fan-out, a lone surrogate, and a
conversion that is slow on purpose (its time limit, its client going, SIGTERM while it runs)."""

from __future__ import annotations

import json
import signal
import socket
import struct
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from inline_host.api._comfyui import CONVERSIONS
from inline_host.comfyui import (
    MAX_NODES,
    MAX_TEXT,
    Budget,
    ImportStopped,
    TooManyNodes,
    import_comfyui,
)

from .conftest import Host, proc_status

DATA = Path(__file__).resolve().parents[1] / "data" / "comfyui"
ROUTE = "/v1/import/comfyui"
MiB = 1 << 20
#: How much the host may grow while it refuses a bomb.
RSS_BOUND = 100 * MiB
#: How long SIGTERM may take with conversions in flight (uvicorn waits 5 s for them, then
#: cancels; the test server's own stop() gives 20 s before kill -9).
SIGTERM_GRACE = 15.0


# building hostile input
def png(chunks: list[tuple[bytes, bytes]]) -> bytes:
    out = b"\x89PNG\r\n\x1a\n"
    for ctype, body in [(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)), *chunks]:
        out += struct.pack(">I", len(body)) + ctype + body
        out += struct.pack(">I", zlib.crc32(ctype + body) & 0xFFFFFFFF)
    return out + struct.pack(">I", 0) + b"IEND" + struct.pack(">I", zlib.crc32(b"IEND"))


def ztxt(keyword: str, text: bytes) -> tuple[bytes, bytes]:
    return b"zTXt", keyword.encode() + b"\x00\x00" + zlib.compress(text, 9)


def png_bomb() -> bytes:
    """Six 60 MiB zTXt chunks under other keywords (never a workflow's), then a ``workflow``
    chunk of valid JSON that inflates past the cap: well under 1 MB on the wire."""
    filler = ztxt("parameters", b"\x00" * (60 * MiB))[1].split(b"\x00", 1)[1]
    others = [(b"zTXt", f"comment-{i}".encode() + b"\x00" + filler) for i in range(6)]
    workflow = b'{"nodes": [], "links": [], "pad": "' + b"a" * (MAX_TEXT + 8 * MiB) + b'"}'
    return png([*others, ztxt("workflow", workflow)])


def fan_out(levels: int = 30, width: int = 2) -> dict[str, Any]:
    """Subgraph ``sg-i`` instances ``sg-(i+1)`` ``width`` times, ``levels`` deep: a few KB that
    expand to ``width ** levels`` leaves."""
    subgraphs = []
    for i in range(levels):
        nodes = (
            [{"id": j + 1, "type": f"sg-{i + 1}", "mode": 0} for j in range(width)]
            if i < levels - 1
            else [{"id": 1, "type": "EmptyLatentImage", "widgets_values": [512, 512, 1]}]
        )
        subgraphs.append({"id": f"sg-{i}", "nodes": nodes, "links": [], "inputs": []})
    return {
        "nodes": [{"id": 1, "type": "sg-0", "mode": 0}, {"id": 2, "type": "SaveImage"}],
        "links": [],
        "definitions": {"subgraphs": subgraphs},
    }


def fan_out_count(levels: int = 30, width: int = 2) -> int:
    """The nodes ``fan_out`` expands to, instances included."""
    count = 1  # the leaf level: one node
    for _ in range(levels - 1):
        count = width * (1 + count)
    return 2 + count  # the top: the instance and SaveImage


def slow_workflow(depth: int = 12, fan: int = 200, chain: int = 100) -> dict[str, Any]:
    """Under every cap (6,244 nodes, ~410,000 inputs, 20 KB), yet slow: each of the 2,048 leaves'
    ``fan`` inputs resolves up ``depth`` subgraph levels and a ``chain`` of reroutes."""
    nodes: list[dict[str, Any]] = [{"id": 1, "type": "CheckpointLoaderSimple"}]
    links: list[list[Any]] = []
    for i in range(chain):  # node 1 -> reroute 2 -> ... -> reroute chain+1
        links.append([i + 1, i + 1, 0, i + 2, 0, "*"])
        nodes.append({"id": i + 2, "type": "Reroute", "inputs": [{"name": "", "link": i + 1}]})
    links.append([chain + 1, chain + 1, 0, 9999, 0, "*"])
    nodes.append({"id": 9999, "type": "sg-0", "inputs": [{"name": "x", "link": chain + 1}]})
    subgraphs = []
    for k in range(depth - 1):
        subgraphs.append(
            {
                "id": f"sg-{k}",
                "inputs": [{"name": "x"}],
                "nodes": [
                    {"id": j, "type": f"sg-{k + 1}", "inputs": [{"name": "x", "link": j}]}
                    for j in (1, 2)
                ],
                "links": [[j, -10, 0, j, 0, "*"] for j in (1, 2)],
            }
        )
    subgraphs.append(
        {
            "id": f"sg-{depth - 1}",
            "inputs": [{"name": "x"}],
            "nodes": [
                {
                    "id": 1,
                    "type": "Slow",
                    "inputs": [{"name": f"in{i}", "link": i} for i in range(fan)],
                }
            ],
            "links": [[i, -10, 0, 1, i, "*"] for i in range(fan)],
        }
    )
    return {"nodes": nodes, "links": links, "definitions": {"subgraphs": subgraphs}}


def send_raw(port: int, body: bytes) -> socket.socket:
    """A whole import request written to a socket whose answer nobody reads."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = (
        f"POST {ROUTE} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    return sock


def kib(field: str) -> int:
    return int(field.split()[0]) * 1024


def reset_peak(pid: int) -> bool:
    """Reset ``pid``'s peak RSS (VmHWM) to its current RSS; False where the kernel refuses."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


@pytest.fixture
def own_host(tmp_path: Path) -> Iterator[Host]:
    """A host of this test alone (it is sent SIGTERM)."""
    (tmp_path / "inputs").mkdir()
    h = Host(tmp_path / "data", tmp_path / "inputs")
    yield h
    h.stop()


# (3) the PNG text-chunk bomb
def test_a_png_text_chunk_bomb_is_refused_without_inflating_it(host: Host, client: httpx.Client):
    body = png_bomb()
    assert len(body) < MiB
    assert client.get("/v1/health").status_code == 200
    if not reset_peak(host.pid):
        pytest.skip("this kernel does not let a process's peak RSS be reset")
    before = kib(proc_status(host.pid)["VmRSS"])
    r = client.post(ROUTE, content=body, headers={"content-type": "image/png"})
    status = proc_status(host.pid)
    peak, after = kib(status["VmHWM"]), kib(status["VmRSS"])
    print(f"RSS before {before / MiB:.0f} MiB, peak {peak / MiB:.0f}, after {after / MiB:.0f}")
    assert r.status_code == 413, r.text
    error = r.json()["error"]
    assert error["code"] == "workflow_too_large" and error["limit"] == MAX_TEXT
    assert "'workflow'" in error["message"] and "32 MiB" in error["message"]
    assert peak - before < RSS_BOUND, f"the host grew {(peak - before) / MiB:.0f} MiB"
    assert client.get("/v1/health").status_code == 200


# (4) the subgraph fan-out
def test_a_subgraph_fan_out_is_refused_fast_and_sigterm_still_stops_the_host(own_host: Host):
    bomb = json.dumps(fan_out()).encode()
    assert len(bomb) < 16 * 1024
    with own_host.client(timeout=20) as c:
        t0 = time.monotonic()
        r = c.post(ROUTE, content=bomb)
        took = time.monotonic() - t0
        print(f"2^30 fan-out refused in {took * 1000:.0f} ms")
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        assert error["code"] == "too_many_nodes"
        assert error["count"] == fan_out_count() and error["limit"] == MAX_NODES
        assert f"{fan_out_count():,}" in error["message"] and f"{MAX_NODES:,}" in error["message"]
        assert took < 5

        with ThreadPoolExecutor(21) as pool:
            bombs = [pool.submit(c.post, ROUTE, content=bomb) for _ in range(20)]
            health = pool.submit(c.get, "/v1/health")
            assert [f.result().status_code for f in bombs] == [422] * 20
            assert health.result().status_code == 200

        # conversions in flight (two running, two waiting) when the host is told to stop
        slow = json.dumps(slow_workflow()).encode()
        socks = [send_raw(own_host.server.port, slow) for _ in range(2 * CONVERSIONS)]
        assert c.get("/v1/health").status_code == 200  # the loop has read them
    try:
        t0 = time.monotonic()
        own_host.server.proc.send_signal(signal.SIGTERM)
        own_host.server.proc.wait(timeout=SIGTERM_GRACE)
        print(f"SIGTERM with conversions in flight: stopped in {time.monotonic() - t0:.1f} s")
    finally:
        for sock in socks:
            sock.close()


# conversions that take long: a time limit, and a client that goes
def test_a_slow_conversion_stops_at_its_time_limit():
    data = json.dumps(slow_workflow()).encode()
    t0 = time.monotonic()
    with pytest.raises(ImportStopped, match=r"longer than 0\.5 s") as caught:
        import_comfyui(data, where="slow.json", budget=Budget.start("slow.json", 0.5))
    assert caught.value.timed_out and time.monotonic() - t0 < 5
    with pytest.raises(TooManyNodes, match=f"{fan_out_count(14):,} nodes"):  # in-process too
        import_comfyui(json.dumps(fan_out(14)).encode())


def test_a_client_that_goes_frees_its_conversion(host: Host, client: httpx.Client):
    slow = json.dumps(slow_workflow()).encode()
    socks = [send_raw(host.server.port, slow) for _ in range(CONVERSIONS)]
    assert client.get("/v1/health").status_code == 200  # the loop has read both
    for sock in socks:
        sock.close()
    t0 = time.monotonic()
    r = client.post(ROUTE, content=(DATA / "z_image_turbo_example.api.json").read_bytes())
    took = time.monotonic() - t0
    print(f"a workflow after two abandoned slow ones: {took:.2f} s")
    assert r.status_code == 200, r.text
    assert took < 8  # the abandoned ones hold their threads until stopped, not for 20 s


# (low) a lone surrogate
@pytest.mark.parametrize("where", ["value", "title"])
def test_a_lone_surrogate_is_a_clear_422(client: httpx.Client, where: str):
    prompt: dict[str, Any] = {
        "1": {"class_type": "PrimitiveString", "inputs": {"value": "hello"}},
        "2": {"class_type": "TestEchoText", "inputs": {"text": ["1", 0], "suffix": "!"}},
    }
    if where == "value":
        prompt["1"]["inputs"]["value"] = "a\ud800b"
    else:
        prompt["2"]["_meta"] = {"title": "\udfff"}
    body = json.dumps(prompt).encode()  # ensure_ascii: the JSON escape "\\ud800"
    assert b"\\ud" in body
    r = client.post(ROUTE, content=body)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "not_a_workflow" and "lone surrogate" in error["message"]
    assert ("$.1.inputs.value" if where == "value" else "$.2._meta.title") in error["message"]
    assert client.get("/v1/health").status_code == 200


# (low) LoadImage paths over HTTP
def test_load_image_paths_over_http_say_nothing_of_what_exists_on_the_host(
    client: httpx.Client, tmp_path: Path
):
    """A LoadImage naming ``/proc/self/exe``, the host's working folder, a real file outside
    the input roots and a missing file: each import answers the same way, the path passed on
    as written (never resolved), with no warning that tells which exist."""
    real = tmp_path / "exists.png"
    real.write_bytes(b"\x89PNG\r\n\x1a\n")
    answers = []
    for name in ("/proc/self/exe", "/proc/self/cwd/inline.db", str(real), "/no/such/file.png"):
        prompt = {
            "1": {"class_type": "LoadImage", "inputs": {"image": name}},
            "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0]}},
        }
        r = client.post(ROUTE, content=json.dumps(prompt).encode())
        assert r.status_code == 200, r.text
        doc = r.json()
        nodes = {n["id"]: n for n in doc["graph"]["nodes"]}
        assert nodes["1"]["params"]["asset"] == {"ref": "path", "path": name}
        report = json.dumps(doc["report"]).replace(name, "NAME")
        answers.append(report)
    assert all(a == answers[0] for a in answers), answers
