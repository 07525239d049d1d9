"""``--ray ADDRESS`` that does not answer: one line and exit 2 before serving, within
``INLINE_RAY_CONNECT_TIMEOUT``; SIGTERM while it waits stops the host at once. And a cluster
that does answer is joined before the host serves."""

from __future__ import annotations

import contextlib
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from inline_host import Settings
from inline_host.workers._ray_connect import RayUnreachable, gcs_endpoint, probe

from ..api.conftest import Server, free_port, start_server, wait_healthy
from ._cluster import Cluster

pytestmark = pytest.mark.timeout(1800)  # the cluster test starts the session's cluster


@contextlib.contextmanager
def silent_gcs() -> Iterator[socket.socket]:
    """A listener on loopback that completes TCP handshakes and never says a word."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock


def host(tmp_path: Path, address: str, timeout: float) -> Server:
    """A host (not waited for) whose workers are on the Ray cluster at ``address``."""
    inputs = tmp_path / "inputs"
    inputs.mkdir(exist_ok=True)
    env = {"INLINE_RAY_ADDRESS": address, "INLINE_RAY_CONNECT_TIMEOUT": str(timeout)}
    return start_server(tmp_path / "data", inputs, env, wait=False)


def errors(server: Server) -> list[str]:
    return [line for line in server.log.read_text().splitlines() if line.startswith("error:")]


def test_the_connect_timeout_is_a_setting() -> None:
    assert Settings.from_env({}).ray_connect_timeout == 30.0
    assert Settings.from_env({"INLINE_RAY_CONNECT_TIMEOUT": "2.5"}).ray_connect_timeout == 2.5
    with pytest.raises(ValueError, match="INLINE_RAY_CONNECT_TIMEOUT must be a number"):
        Settings.from_env({"INLINE_RAY_CONNECT_TIMEOUT": "soon"})


@pytest.mark.parametrize(
    ("address", "endpoint"),
    [
        ("10.0.0.2:6379", ("10.0.0.2", 6379)),
        ("ray://head:10001", ("head", 10001)),
        ("[::1]:6379", ("::1", 6379)),
        ("auto", None),
        ("head", None),
        ("head:0", None),
    ],
)
def test_the_address_dialled_first(address: str, endpoint: tuple[str, int] | None) -> None:
    assert gcs_endpoint(address) == endpoint


def test_a_refused_address_is_refused_by_the_probe() -> None:
    port = free_port()
    with pytest.raises(RayUnreachable, match=f"127.0.0.1:{port}: connection refused"):
        probe(f"127.0.0.1:{port}", 5)


def test_an_address_nobody_listens_on_is_one_line_and_exit_2_before_serving(tmp_path):
    address = f"127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    server = host(tmp_path, address, 5)
    try:
        assert server.proc.wait(timeout=120) == 2
    finally:
        server.stop()
    lines = server.log.read_text().strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: could not join the Ray cluster at {address}"), lines
    assert "serving" not in lines[0]
    assert time.monotonic() - t0 < 60


def test_a_cluster_that_never_answers_is_exit_2_after_the_connect_timeout(tmp_path):
    with silent_gcs() as gcs:
        address = f"127.0.0.1:{gcs.getsockname()[1]}"
        server = host(tmp_path, address, 3)
        try:
            assert server.proc.wait(timeout=120) == 2
        finally:
            server.stop()
    (line,) = errors(server)
    assert f"at {address}: no answer within 3s (INLINE_RAY_CONNECT_TIMEOUT)" in line
    assert "serving" not in server.log.read_text()


def test_sigterm_while_the_host_waits_for_ray_stops_it_at_once(tmp_path):
    with silent_gcs() as gcs:
        gcs.settimeout(120)
        server = host(tmp_path, f"127.0.0.1:{gcs.getsockname()[1]}", 300)
        try:
            conn, _ = gcs.accept()  # the host dialled the address: it is in its connect attempt
            conn.close()
            t0 = time.monotonic()
            server.proc.send_signal(signal.SIGTERM)
            code = server.proc.wait(timeout=30)
            took = time.monotonic() - t0
        finally:
            server.stop()
    assert code == -signal.SIGTERM, code
    assert took < 10, f"stopped {took:.1f}s after SIGTERM"
    assert "serving" not in server.log.read_text()


def test_a_cluster_that_answers_is_joined_before_the_host_serves(tmp_path, cluster: Cluster):
    server = host(tmp_path, cluster.address, 120)
    try:
        wait_healthy(server, timeout=300)
        assert httpx.get(f"{server.url}/v1/health", timeout=10).status_code == 200
        log = server.log.read_text()
        assert "error:" not in log and "Inline serving /v1" in log
        t0 = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        # uvicorn shuts down, then re-raises the signal it caught: -15 is a clean stop
        assert server.proc.wait(timeout=60) == -signal.SIGTERM
        assert time.monotonic() - t0 < 30
    finally:
        server.stop()
