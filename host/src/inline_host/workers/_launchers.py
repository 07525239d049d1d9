"""The launchers whose workers are children of the host.

- ``LocalLauncher`` (the default): a child process on a socketpair, its end passed as an
  inherited fd. Host and worker share memory, so bulk bytes go through ``/dev/shm``.
- ``TcpLauncher``: a child process that dials back over TCP on loopback
  (``--connect HOST:PORT``) and presents a per-worker secret, passed in its environment and
  checked before the handshake. It shares no memory with the host (as a worker on another
  machine would not): bulk bytes travel inline in bounded chunks.

Each worker runs in its own process group, so stopping it also stops whatever it started.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hmac
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from inline_registry import Confinement, apply_env, confined_command, worker_command, worker_env
from inline_sdk._shm import SHM_DIR

from ._launcher import LaunchedWorker, LaunchFailed, Liveness, gpu_env

#: What a launcher asks before it starts a worker of a pack: its sandbox, or None.
Confine = Callable[[str, Path], Confinement | None]

#: Whether ``/proc`` tells a process's state (Linux).
_PROC = os.path.exists("/proc/self/stat")
_PF_EXITING = 0x4
_SIGKILL_BIT = 1 << (signal.SIGKILL - 1)
#: The environment variable a TCP worker reads its secret from (the SDK's name for it).
SECRET_ENV = "INLINE_WORKER_SECRET"
_SECRET_LIMIT = 1024


class _ProcStat:
    """``/proc/<pid>/stat`` of one child, kept open: one read tells whether it is past the point
    of reading another call, before its exit can be waited for: a SIGKILL pending (a fatal
    signal is added to every thread's own pending set as ``kill`` returns, which the ``signal``
    field shows), its main thread exiting or a zombie (the other threads of a killed worker
    die after it, and only then is its socket closed). The open file belongs to that process:
    once it is reaped, reads fail, whatever process gets its pid next."""

    def __init__(self, pid: int) -> None:
        try:
            self._fd: int | None = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._fd = None

    def dying(self) -> bool:
        if self._fd is None:
            return False
        try:
            data = os.pread(self._fd, 1024, 0)
        except ProcessLookupError:
            return True  # reaped
        except OSError:
            return False
        fields = data.rpartition(b")")[2].split()
        if not fields or fields[0] in (b"Z", b"X"):
            return True
        flags = int(fields[6]) if len(fields) > 6 else 0
        pending = int(fields[28]) if len(fields) > 28 else 0
        return bool(flags & _PF_EXITING or pending & _SIGKILL_BIT)

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


class _ChildWorker:
    """A worker that is a child process of the host (both local launchers)."""

    def __init__(
        self,
        proc: anyio.abc.Process,
        stream: anyio.abc.ByteStream,
        *,
        shares_memory: bool,
        launcher: str,
        sandboxed: bool = False,
        inner: int | None = None,
        shm_dir: Path | None = None,
    ) -> None:
        self._proc = proc
        self.sandboxed = sandboxed
        self.shm_dir = shm_dir
        self.stream = stream
        #: the worker's own process: inside a sandbox, bwrap's descendant (what it runs)
        self.pid: int | None = inner or proc.pid
        self._inner = inner
        self.shares_memory = shares_memory
        self._launcher = launcher
        self._stat = _ProcStat(self.pid) if _PROC else None
        self._pidfd = _pidfd(self.pid)

    def stderr(self) -> AsyncIterator[bytes] | None:
        return aiter(self._proc.stderr) if self._proc.stderr is not None else None

    async def wait(self) -> int | None:
        with anyio.move_on_after(5):
            await self._proc.wait()
        if self._proc.returncode is None:
            self.kill()
            await self._proc.wait()
        if self._stat is not None:
            self._stat.close()
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self._pidfd)
            self._pidfd = None
        code = self._proc.returncode
        if self.sandboxed and code is not None and 128 < code <= 128 + 64:
            return 128 - code  # bwrap exits 128 + N for a worker killed by signal N
        return code

    def has_exited(self) -> bool:
        if self._dying():
            return True
        if self._pidfd is not None:
            return bool(_readable(self._pidfd))
        return self._waited()

    def liveness(self) -> Liveness:
        """Its process's exit, a pidfd, is polled together with its socket's end."""
        if self._pidfd is None:
            return Liveness(self.stream, self.has_exited)
        return Liveness(self.stream, self._dying, self._pidfd)

    def _dying(self) -> bool:
        """Exited, as far as this host knows, or past serving (``_ProcStat``)."""
        if self._proc.returncode is not None:
            return True
        return self._stat is not None and self._stat.dying()

    def _waited(self) -> bool:
        try:  # WNOWAIT: only look; the process stays for ``wait`` to reap
            seen = os.waitid(os.P_PID, self._proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True  # reaped already
        return seen is not None

    def kill(self) -> None:
        if self._inner is not None:  # the sandbox's own: its namespace dies with it
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self._inner, signal.SIGKILL)
        # the worker leads its own process group: take its children down with it
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        if self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()

    def describe(self) -> dict[str, Any]:
        return {"launcher": self._launcher, "pid": self.pid, "sandboxed": self.sandboxed}


def _worker_below(pid: int) -> int | None:
    """The process bwrap ``pid`` runs (its descendant running ``inline_sdk.worker``), once it
    has started; None before."""
    todo, seen = [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo += [int(c) for c in fh.read().split()]
            if p != pid:
                with open(f"/proc/{p}/cmdline", "rb") as fh:
                    argv = fh.read().split(b"\0")
                if b"inline_sdk.worker" in argv and not argv[0].endswith(b"bwrap"):
                    return p
        except (OSError, ValueError):
            continue
    return None


async def _sandboxed_worker(proc: anyio.abc.Process, timeout: float) -> int | None:
    """The pid of the worker inside the sandbox bwrap ``proc`` set up: looked for until it has
    started (a few ms), or ``proc`` ended, or ``timeout``."""
    if not _PROC:
        return None
    with anyio.move_on_after(timeout):
        while proc.returncode is None:
            found = _worker_below(proc.pid)
            if found is not None:
                return found
            await anyio.sleep(0.002)  # polling /proc for a process still being exec'd
    return None


def _pidfd(pid: int) -> int | None:
    """A descriptor that polls readable once the process ``pid`` has exited (Linux 5.3+)."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return opener(pid)
    except OSError:
        return None


def _readable(fd: int) -> bool:
    look = select.poll()
    look.register(fd, select.POLLIN)
    return bool(look.poll(0))


def _confined(
    command: list[str], env: Mapping[str, str], confinement: Confinement | None
) -> tuple[list[str], dict[str, str]]:
    """The command and environment of a worker, inside its sandbox when it has one."""
    if confinement is None:
        return command, dict(env)
    try:
        inner, changes = confined_command(command, confinement)
    except OSError as exc:  # its scratch folder cannot be made
        raise LaunchFailed(f"cannot prepare its sandbox: {exc}") from None
    return inner, apply_env(env, changes)


async def _spawn(command: list[str], env: Mapping[str, str], pass_fds: tuple[int, ...] = ()) -> Any:
    return await anyio.open_process(
        command,
        pass_fds=pass_fds,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=dict(env),
        start_new_session=True,
    )


class LocalLauncher:
    """A child process on a socketpair (the child's end passed as an inherited fd)."""

    name = "local"

    def __init__(self, confine: Confine | None = None) -> None:
        self.confine = confine

    async def launch(
        self, pack: str, python: Path, timeout: float, *, gpu: int | None = None
    ) -> LaunchedWorker:
        confinement = self.confine(pack, python) if self.confine is not None else None
        shm_dir = None
        if confinement is not None:  # its /dev/shm is a folder of its own, which the host reads
            shm_dir = private_shm(pack)
            confinement = dataclasses.replace(confinement, shm=shm_dir)
        host_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            command, env = _confined(
                worker_command(python, pack, child_end.fileno()),
                worker_env(gpu_env(gpu)),
                confinement,
            )
            proc = await _spawn(command, env, pass_fds=(child_end.fileno(),))
        except BaseException:
            host_end.close()
            if shm_dir is not None:
                shutil.rmtree(shm_dir, ignore_errors=True)
            raise
        finally:
            child_end.close()
        stream = await anyio.abc.SocketStream.from_socket(host_end)
        inner = await _sandboxed_worker(proc, timeout) if confinement is not None else None
        return _ChildWorker(proc, stream, shares_memory=True, launcher=self.name,
                            sandboxed=confinement is not None, inner=inner,
                            shm_dir=shm_dir)  # fmt: skip


def private_shm(pack: str) -> Path:
    """A new folder under ``/dev/shm`` for one sandboxed worker of ``pack`` to see as its
    ``/dev/shm``: ``inline-<host pid>-<pack>.shm-<random>`` (a dead host's is swept by name)."""
    try:
        return Path(tempfile.mkdtemp(prefix=f"inline-{os.getpid()}-{pack}.shm-", dir=SHM_DIR))
    except OSError as exc:
        raise LaunchFailed(f"cannot make its shared-memory folder: {exc}") from None


class TcpLauncher:
    """A child process that dials the host over TCP on loopback and presents a secret.

    It stands for a worker elsewhere: it is told no shared memory exists, so every bulk byte
    crosses the stream in chunks, exactly as it would between machines.
    """

    name = "tcp"

    def __init__(self, host: str = "127.0.0.1", confine: Confine | None = None) -> None:
        self.host = host
        self.confine = confine

    async def launch(
        self, pack: str, python: Path, timeout: float, *, gpu: int | None = None
    ) -> LaunchedWorker:
        confinement = self.confine(pack, python) if self.confine is not None else None
        if confinement is not None:  # it dials the host: it keeps the network
            confinement = dataclasses.replace(confinement, network=True)
        secret = secrets.token_hex(32)
        multi = await anyio.create_tcp_listener(local_host=self.host, local_port=0)
        listener = multi.listeners[0]
        try:
            sock = listener.extra(anyio.abc.SocketAttribute.raw_socket)
            port = sock.getsockname()[1]
            command = [
                str(python),
                "-m",
                "inline_sdk.worker",
                "--connect",
                f"{self.host}:{port}",
                "--pack",
                pack,
            ]
            env = worker_env({SECRET_ENV: secret, **gpu_env(gpu)})
            command, env = _confined(command, env, confinement)
            proc = await _spawn(command, env)
            try:
                stream = await self._accept(listener, secret, proc, timeout)
            except BaseException:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                with anyio.CancelScope(shield=True):
                    await proc.wait()
                raise
        finally:
            await multi.aclose()
        inner = await _sandboxed_worker(proc, timeout) if confinement is not None else None
        return _ChildWorker(proc, stream, shares_memory=False, launcher=self.name,
                            sandboxed=confinement is not None, inner=inner)  # fmt: skip

    async def _accept(
        self, listener: Any, secret: str, proc: anyio.abc.Process, timeout: float
    ) -> anyio.abc.ByteStream:
        """The first connection that presents ``secret``; others are dropped."""
        with anyio.fail_after(timeout):
            while True:
                conn = await _first_of(listener.accept(), proc.wait())
                if conn is None:
                    raise LaunchFailed(
                        f"the worker exited (status {proc.returncode}) before it connected"
                    )
                try:
                    with anyio.fail_after(10):
                        presented = await _read_secret(conn)
                except (TimeoutError, anyio.EndOfStream, anyio.IncompleteRead, ValueError):
                    await conn.aclose()
                    continue
                if hmac.compare_digest(presented.encode(), secret.encode()):
                    return conn
                await conn.aclose()


async def _read_secret(conn: anyio.abc.ByteStream) -> str:
    from anyio.streams.buffered import BufferedByteReceiveStream

    reader = BufferedByteReceiveStream(conn)
    size = int.from_bytes(await reader.receive_exactly(4), "big")
    if size > _SECRET_LIMIT:
        raise ValueError("secret too long")
    data = await reader.receive_exactly(size)
    if reader.buffer:
        raise ValueError("data after the secret before the handshake")
    return data.decode(errors="replace")


async def _first_of(accept: Any, exited: Any) -> Any:
    """The accepted connection, or None if the process exits first."""
    result: list[Any] = []
    async with anyio.create_task_group() as tg:

        async def take_accept() -> None:
            result.append(await accept)
            tg.cancel_scope.cancel()

        async def take_exit() -> None:
            await exited
            result.append(None)
            tg.cancel_scope.cancel()

        tg.start_soon(take_accept)
        tg.start_soon(take_exit)
    return result[0] if result else None
