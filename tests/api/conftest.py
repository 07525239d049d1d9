"""A real server process on loopback, a real HTTP client and real websocket clients."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from .._ports import free_port

ROOT = Path(__file__).resolve().parents[2]
TEST_PACKS = (ROOT / "tests" / "packs" / "testpack", ROOT / "tests" / "packs" / "otherpack")


@dataclass
class Server:
    """A running ``python -m inline_host`` and how to reach it."""

    proc: subprocess.Popen[bytes]
    port: int
    env: dict[str, str]
    data_dir: Path
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def client(self, **kw: object) -> httpx.Client:
        kw.setdefault("timeout", 60)
        return httpx.Client(base_url=self.url, **kw)  # type: ignore[arg-type]

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill9()


def start_server(
    data_dir: Path,
    inputs: Path,
    extra_env: dict[str, str] | None = None,
    port: int | None = None,
    wait: bool = True,
) -> Server:
    port = port or free_port()
    env = dict(os.environ)
    env.update(
        {
            "INLINE_DATA_DIR": str(data_dir),
            "INLINE_MODELS_DIR": str(data_dir / "models"),
            "INLINE_INPUT_ROOTS": os.pathsep.join([str(inputs), str(ROOT / "examples")]),
            "INLINE_PACK_PATHS": os.pathsep.join(str(p) for p in TEST_PACKS),
            "INLINE_PORT": str(port),
            "INLINE_HOST": "127.0.0.1",
        }
    )
    env.update(extra_env or {})
    log = data_dir / f"server-{port}.log"
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "inline_host"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=data_dir,
        )
    server = Server(proc, port, env, data_dir, log)
    if wait:
        wait_healthy(server)
    return server


def wait_healthy(server: Server, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"server exited: {server.log.read_text()[-3000:]}")
        try:
            if httpx.get(server.url + "/v1/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)  # polling a starting process; not synchronisation between tests
    raise RuntimeError(f"server did not start: {server.log.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def api_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("api-data")


@pytest.fixture(scope="session")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("api-inputs")


@pytest.fixture(scope="session")
def server(api_data: Path, inputs: Path) -> Iterator[Server]:
    """The contract's server, one run at a time: where the queue (positions, FIFO, coalescing
    of queued twins) is observable. ``concurrent_server`` runs the default eight at once."""
    srv = start_server(api_data, inputs, {"INLINE_MAX_RUNS": "1"})
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def concurrent_server(tmp_path_factory: pytest.TempPathFactory, inputs: Path) -> Iterator[Server]:
    """A server with the default ``INLINE_MAX_RUNS`` (8)."""
    srv = start_server(tmp_path_factory.mktemp("api-concurrent"), inputs)
    yield srv
    srv.stop()


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c
