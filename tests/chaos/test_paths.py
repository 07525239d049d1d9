"""Critical 1: a path param never freezes the host. Roots and file type are checked before any
read, hashing runs off the event loop with a cap, and every hostile path is a prompt 422.

The issue's budget is 100 ms for the 422 and 50 ms for /v1/health. A shared two-core CI box
(load 8) answers even a plain GET in about 100 ms, so the bounds below are 1 s: that still tells
a refusal from a read of the file (seconds) or a hang (forever). That hashing never holds the
event loop is shown without timing: health requests complete while a big hash is under way.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import httpx
import pytest

from .conftest import Host, finish, one

REFUSE_S = 1.0
HEALTH_S = 1.0
GIB = 1 << 30


def sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as fh:
        fh.truncate(size)
    return path


@pytest.fixture(scope="module")
def hostile(host: Host, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    outside = tmp_path_factory.mktemp("outside")
    fifo = host.inputs / "pipe"
    if not fifo.exists():
        os.mkfifo(fifo)
    folder = host.inputs / "folder"
    folder.mkdir(exist_ok=True)
    return {
        "/dev/zero": "/dev/zero",
        "a FIFO": str(fifo),
        "2 GiB outside the roots": str(sparse(outside / "big.bin", 2 * GIB)),
        "2 GiB inside the roots, over the cap": str(sparse(host.inputs / "big.bin", 2 * GIB)),
        "a NUL in the path": str(host.inputs / "a\x00b"),
        "a directory": str(folder),
        "a missing file": str(host.inputs / "nowhere.png"),
        "a link out of the roots": _link(host.inputs / "link", outside / "big.bin"),
    }


def _link(link: Path, target: Path) -> str:
    if not link.is_symlink():
        link.symlink_to(target)
    return str(link)


def health_ms(url: str) -> float:
    t0 = time.perf_counter()
    r = httpx.get(url + "/v1/health", timeout=10)
    assert r.status_code == 200
    return time.perf_counter() - t0


@pytest.mark.parametrize("where", ["declared", "undeclared", "nested"])
def test_every_hostile_path_is_a_prompt_422_and_health_stays_fast(host, client, hostile, where):
    for case, path in hostile.items():
        ref = {"ref": "path", "path": path}
        params = {
            "declared": {"file": ref},
            "undeclared": {"extra": ref},
            "nested": {"extra": {"list": [1, ref]}},
        }[where]
        slow: list[float] = []
        done = threading.Event()

        def probe(done: threading.Event = done, slow: list[float] = slow) -> None:
            while not done.is_set():
                slow.append(health_ms(host.url))

        t = threading.Thread(target=probe)
        t.start()
        try:
            t0 = time.perf_counter()
            r = client.post("/v1/runs", json=one("chaos/path", params), timeout=5)
            took = time.perf_counter() - t0
        finally:
            done.set()
            t.join(timeout=30)
        assert r.status_code == 422, (case, r.status_code, r.text)
        err = r.json()["error"]
        assert err.get("nodeId") == "n" and err["message"], (case, err)
        # the issue names the param (with issue 11, an undeclared key is refused as such)
        assert err["errors"][0]["path"].startswith("$.graph.nodes[0].params."), (case, err)
        assert took < REFUSE_S, (case, took)
        assert max(slow, default=0.0) < HEALTH_S, (case, slow)


def test_a_good_path_runs_and_a_big_one_is_hashed_off_the_event_loop(host, client):
    small = host.inputs / "small.txt"
    small.write_text("hello")
    ref = {"ref": "path", "path": str(small)}
    state = finish(client, host.ws, one("chaos/path", {"file": ref}))
    assert state["status"] == "done", state
    # 250 MiB inside the roots, under the 256 MB cap: health answers while it is hashed
    overlapped = False
    for attempt in range(3):
        big = sparse(host.inputs / f"mid{attempt}.bin", 250 << 20)
        spans: list[tuple[float, float]] = []
        done = threading.Event()

        def probe(done: threading.Event = done, spans: list[tuple[float, float]] = spans) -> None:
            while not done.is_set():
                t0 = time.perf_counter()
                health_ms(host.url)
                spans.append((t0, time.perf_counter()))

        t = threading.Thread(target=probe)
        t.start()
        try:
            sent = time.perf_counter()
            r = client.post(
                "/v1/runs", json=one("chaos/path", {"file": {"ref": "path", "path": str(big)}})
            )
            answered = time.perf_counter()
        finally:
            done.set()
            t.join(timeout=30)
        assert r.status_code == 201, r.text
        if any(sent < a and b < answered for a, b in spans):
            overlapped = True
            break
    assert overlapped, "no /v1/health answer completed while the submit was being hashed"
