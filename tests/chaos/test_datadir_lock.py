"""One host per data dir: a second is refused in one line; a killed host leaves no stale lock,
and no child of the host holds it."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

from ..api.conftest import free_port, start_server
from .conftest import Host, finish, gone, one, worker

LOCK = "host.lock"
O_CLOEXEC = 0o2000000  # as /proc/<pid>/fdinfo/<fd> "flags" shows it (octal)


@contextlib.contextmanager
def restarted_after(host: Host) -> Iterator[None]:
    """Whatever happens in the block, the session's host serves again after it."""
    try:
        yield
    finally:
        if host.server.proc.poll() is not None:
            host.start()


def lock_fds(pid: int, lock: Path) -> list[str]:
    """The fds of ``pid`` open on ``lock``."""
    fds = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") == str(lock):
                fds.append(fd)
    return fds


def test_a_second_host_on_the_data_dir_exits_2_in_one_line_naming_pid_and_port(host, client):
    assert client.get("/v1/health").status_code == 200
    t0 = time.monotonic()
    second = start_server(host.data, host.inputs, host.env, port=free_port(), wait=False)
    try:
        assert second.proc.wait(timeout=60) == 2
    finally:
        second.stop()
    took = time.monotonic() - t0
    lines = second.log.read_text().strip().splitlines()
    assert len(lines) == 1, lines
    assert f"pid {host.pid}" in lines[0] and f"port {host.server.port}" in lines[0], lines
    assert str(host.data) in lines[0] and "serving" not in lines[0]
    assert took < 30, f"refused after {took:.1f}s"
    # the first one never noticed
    assert client.get("/v1/health").status_code == 200
    record = json.loads((host.data / LOCK).read_text())
    assert record == {"pid": host.pid, "port": host.server.port}


def test_after_kill_9_of_the_holder_a_new_host_starts_on_the_data_dir_and_serves(host):
    old = host.pid
    with restarted_after(host):
        host.restart(kill9=True)  # start_server waits for /v1/health to answer 200
    assert host.pid != old
    record = json.loads((host.data / LOCK).read_text())
    assert record == {"pid": host.pid, "port": host.server.port}
    with host.client() as c:
        state = finish(c, host.ws, one("chaos/surrogate", {"nonce": time.time_ns()}))
    assert state["status"] == "done", state


def test_no_child_of_the_host_holds_the_lock(host, client):
    lock = host.data / LOCK
    state = finish(client, host.ws, one("chaos/grandchild", {"nonce": time.time_ns()}))
    assert state["status"] == "done", state
    grandchild = int(client.get(f"/v1/takes/{state['takes'][0]['id']}/bytes").text)
    child = worker(client, "chaospack")
    assert child is not None
    # the host holds it once, close-on-exec; its worker and the worker's child not at all
    (fd,) = lock_fds(host.pid, lock)
    flags = next(
        line.split()[1]
        for line in Path(f"/proc/{host.pid}/fdinfo/{fd}").read_text().splitlines()
        if line.startswith("flags:")
    )
    assert int(flags, 8) & O_CLOEXEC
    for pid in (child["pid"], grandchild):
        assert not gone(pid) and lock_fds(pid, lock) == [], pid
    try:
        with restarted_after(host):
            host.stop(kill9=True)
            # free at once, whether or not the worker has noticed its host is gone yet
            fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            finally:
                os.close(fd)
    finally:
        # nobody is left to reap the worker's child once its host was killed: this test's job
        with contextlib.suppress(ProcessLookupError):
            os.kill(grandchild, signal.SIGKILL)


def test_an_engine_beside_a_serving_host_leaves_its_temp_files_alone(host, client) -> None:
    """``inline run`` on a data dir a host serves must not sweep the host's half-written
    files as a crash's leftovers; once no host holds the dir, they are swept."""
    import anyio
    from inline_host import Engine, Settings

    assert client.get("/v1/health").status_code == 200
    in_progress = host.data / "blobs" / ".tmp-being-written"
    in_progress.parent.mkdir(parents=True, exist_ok=True)
    in_progress.write_bytes(b"half a blob")
    settings = Settings.from_env(
        {
            "INLINE_SANDBOX_READ": os.environ.get("INLINE_SANDBOX_READ", ""),
            "INLINE_DATA_DIR": str(host.data),
            "INLINE_MODELS_DIR": str(host.data / "models"),
        }
    )

    async def open_engine() -> None:
        async with Engine.open(settings):
            pass

    try:
        anyio.run(open_engine)
        assert in_progress.exists()  # the host is alive: its temps are work in progress
        with restarted_after(host):
            host.stop(kill9=True)
            anyio.run(open_engine)
            assert not in_progress.exists()  # the holder is gone: a crash's leftover
    finally:
        in_progress.unlink(missing_ok=True)


def listening_inode(port: int) -> str:
    """The socket inode listening on 127.0.0.1:``port`` (``/proc/net/tcp``)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, inode = fields[1], fields[3], fields[9]
        if state == "0A" and int(local.split(":")[1], 16) == port:
            return inode
    raise AssertionError(f"nothing listens on port {port}")


def test_no_child_of_the_host_holds_its_listening_socket(host, client) -> None:
    """A worker (and the worker's own child) that outlived a kill -9 of the host would keep its
    port: none of them may hold the listening socket."""
    state = finish(client, host.ws, one("chaos/grandchild", {"nonce": time.time_ns()}))
    assert state["status"] == "done", state
    grandchild = int(client.get(f"/v1/takes/{state['takes'][0]['id']}/bytes").text)
    child = worker(client, "chaospack")
    assert child is not None
    socket_link = f"socket:[{listening_inode(host.server.port)}]"

    def holds(pid: int) -> bool:
        links = []
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                links.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        return socket_link in links

    assert holds(host.pid)  # the check sees the socket where it is
    for pid in (child["pid"], grandchild):
        assert not gone(pid) and not holds(pid), pid
    with contextlib.suppress(ProcessLookupError):
        os.kill(grandchild, signal.SIGKILL)
