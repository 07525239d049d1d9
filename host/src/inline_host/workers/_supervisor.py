"""The supervisor: one worker process per pack, started on first use, restarted after a death.

Every transport failure becomes one typed error (``PackCrashed``) naming the pack, the exit code
or signal and the last stderr lines. A worker that hangs costs its own calls (per-call timeout,
then the worker is stopped); the host carries on. A worker with no call for
``settings.worker_idle`` seconds is stopped (the next call starts a fresh one). When the
registry changes (a pack upgraded, rolled back or removed), the pack's old worker finishes the
calls it is running and stops; new calls go to a worker of the new version.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import socket
import subprocess
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import msgspec
from anyio.streams.buffered import BufferedByteReceiveStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from inline_registry import (
    MergedRegistry,
    SdkMismatch,
    check_welcome,
    make_hello,
    worker_command,
    worker_env,
)
from inline_sdk import ProtocolError
from inline_sdk.protocol import (
    HEADER,
    Call,
    CallCancelled,
    Cancel,
    Done,
    Evict,
    Failed,
    FrameCodec,
    FromWorker,
    HandleValue,
    Holding,
    MediaValue,
    PlaceAsk,
    Preview,
    Progress,
    Refused,
    Release,
    ShmRef,
    Shutdown,
    Value,
    Welcome,
    unlink_segments,
)

from .._errors import CallCancelled as CallCancelledError
from .._errors import CallTimedOut, NodeError, PackCrashed, PackStartFailed, describe_exit
from .._settings import Settings
from ._broker import Broker

STDERR_LINES = 40


@dataclass(frozen=True, slots=True)
class HostValue:
    """A value as the host holds it: the wire value and the worker generation that made it."""

    value: Value
    pack: str
    generation: int

    @property
    def portable(self) -> bool:
        """Whether any worker can use it (not tied to one worker's handle table)."""
        return not isinstance(self.value, HandleValue)


ProgressCallback = Callable[[Progress | Preview], None]


class WorkerProcess:
    """One running worker of one pack, multiplexing concurrent calls over its socket."""

    def __init__(
        self,
        pack: str,
        generation: int,
        settings: Settings,
        on_exit: Callable[[WorkerProcess], None],
        broker: Broker | None = None,
    ) -> None:
        self.pack = pack
        self.broker = broker
        self._tg: anyio.abc.TaskGroup | None = None
        self.generation = generation
        self.settings = settings
        self.shm_prefix = f"inline-{os.getpid()}-{pack}-{generation}"
        self.codec: FrameCodec[Any] = FrameCodec(FromWorker)
        self.pending: dict[int, MemoryObjectSendStream[Any]] = {}
        self.running: dict[int, str] = {}
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_LINES)
        self.alive = False
        self.pid: int | None = None
        self.welcome: Welcome | None = None
        self._on_exit = on_exit
        self._ids = itertools.count(1)
        self._send_lock = anyio.Lock()
        self._proc: anyio.abc.Process | None = None
        self._stream: anyio.abc.SocketStream | None = None
        self._first: MemoryObjectSendStream[Any] | None = None
        self._exited = anyio.Event()
        self._stderr_done = anyio.Event()
        self.returncode: int | None = None
        self.python = ""
        self.last_active = time.monotonic()

    # life cycle ----------------------------------------------------------------------------
    async def start(self, python: str, tg: anyio.abc.TaskGroup) -> Welcome:
        """Spawn the process, take its handshake (with a deadline), start its reader tasks."""
        self.python = python
        self._tg = tg
        host_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._proc = await anyio.open_process(
                worker_command(python, self.pack, child_end.fileno()),  # type: ignore[arg-type]
                pass_fds=(child_end.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=worker_env(),
            )
        finally:
            child_end.close()
        self.pid = self._proc.pid
        self._stream = await anyio.abc.SocketStream.from_socket(host_end)
        first_send, first_recv = anyio.create_memory_object_stream[Any](1)
        self._first = first_send
        self.alive = True
        tg.start_soon(self._read_stderr)
        tg.start_soon(self._read_frames)
        s = self.settings
        hello = make_hello(
            self.pack,
            shm_prefix=self.shm_prefix,
            models_dir=s.models_dir,
            assets_dir=s.blobs_dir / "sha256",
            input_roots=list(s.input_roots),
        )
        if self.broker is not None:
            hello = msgspec.structs.replace(hello, broker=True)
        await self._send(hello)
        msg: Any = None
        with anyio.move_on_after(s.start_timeout):
            msg = await first_recv.receive()
        if msg is None:
            await self.kill()
            raise PackStartFailed(
                self.pack, f"no handshake within {s.start_timeout:g}s", self.tail()
            )
        if isinstance(msg, PackCrashed):
            raise PackStartFailed(
                self.pack, f"its worker {describe_exit(msg.returncode)}", self.tail()
            )
        if isinstance(msg, Refused):
            await self.kill()
            raise PackStartFailed(self.pack, msg.error.message, msg.error.traceback)
        if not isinstance(msg, Welcome):
            await self.kill()
            raise PackStartFailed(self.pack, f"unexpected {type(msg).__name__} before welcome")
        try:
            check_welcome(self.pack, msg)
        except SdkMismatch as exc:
            await self.kill()
            raise PackStartFailed(self.pack, str(exc)) from exc
        self.welcome = msg
        if self.broker is not None:
            # SDK 1.3 added eviction; an older worker would not understand ``Evict``
            self.broker.attach(
                self.shm_prefix, self.pack, self.pid, self.evict if _evicts(msg) else None
            )
        return msg

    async def evict(self, slots: list[str]) -> None:
        """Ask the worker to free the models in ``slots`` (the broker makes room)."""
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await self._send(Evict(slots=slots))

    async def _answer_place(self, ask: PlaceAsk) -> None:
        assert self.broker is not None
        answer = await self.broker.place(self.shm_prefix, ask)
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await self._send(answer)

    def tail(self) -> str:
        """The worker's last stderr lines."""
        return "\n".join(self.stderr_tail)

    async def _read_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        log_dir = self.settings.logs_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        echo = os.environ.get("INLINE_WORKER_ECHO") == "1"
        partial = b""
        with open(log_dir / f"{self.pack}.log", "ab") as log:
            try:
                async for chunk in self._proc.stderr:
                    log.write(chunk)
                    log.flush()
                    if echo:
                        os.write(2, chunk)
                    partial += chunk
                    *lines, partial = partial.split(b"\n")
                    self.stderr_tail.extend(line.decode(errors="replace") for line in lines)
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass
        if partial:
            self.stderr_tail.append(partial.decode(errors="replace"))
        self._stderr_done.set()

    async def _read_frames(self) -> None:
        assert self._stream is not None
        reader = BufferedByteReceiveStream(self._stream)
        try:
            while True:
                header = await reader.receive_exactly(HEADER)
                size = self.codec.check_header(header)
                msg = self.codec.decode(await reader.receive_exactly(size))
                self._dispatch(msg)
        except (
            anyio.EndOfStream,
            anyio.IncompleteRead,
            anyio.ClosedResourceError,
            anyio.BrokenResourceError,
            OSError,
            ProtocolError,
        ):
            pass
        finally:
            with anyio.CancelScope(shield=True):
                await self._died()

    def _dispatch(self, msg: Any) -> None:
        if isinstance(msg, Welcome | Refused):
            if self._first is not None:
                self._first.send_nowait(msg)
                self._first = None
            return
        if isinstance(msg, PlaceAsk | Holding):  # the memory broker's side channel
            if self.broker is not None and isinstance(msg, Holding):
                self.broker.report(self.shm_prefix, msg)
            elif self.broker is not None and self._tg is not None and isinstance(msg, PlaceAsk):
                self._tg.start_soon(self._answer_place, msg)
            return
        cid = getattr(msg, "id", None)
        if not isinstance(cid, int) or (target := self.pending.get(cid)) is None:
            return  # a late message of a call that already ended
        try:
            target.send_nowait(msg)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            self.pending.pop(cid, None)

    async def _died(self) -> None:
        self.alive = False
        if self.broker is not None:
            self.broker.detach(self.shm_prefix)
        if self._proc is not None:
            with anyio.move_on_after(5):
                await self._proc.wait()
            if self._proc.returncode is None:
                self._proc.kill()
                await self._proc.wait()
            self.returncode = self._proc.returncode
        # let the stderr reader drain what the process printed last
        with anyio.move_on_after(2):
            await self._stderr_done.wait()
        for cid, target in list(self.pending.items()):
            during = self.running.get(cid, "")
            err = PackCrashed(
                self.pack, self.returncode, self.tail(), f"'{during}'" if during else ""
            )
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                target.send_nowait(err)
        if self._first is not None:
            self._first.send_nowait(PackCrashed(self.pack, self.returncode, self.tail()))
            self._first = None
        if self._stream is not None:
            await self._stream.aclose()
        unlink_segments(self.shm_prefix + "-")
        self._exited.set()
        self._on_exit(self)

    async def _send(self, msg: object) -> None:
        assert self._stream is not None
        frame = self.codec.encode(msg)
        async with self._send_lock:
            await self._stream.send(bytes(frame))

    async def stop(self) -> None:
        """Ask the worker to exit; kill it if it does not within a few seconds."""
        if not self.alive:
            return
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await self._send(Shutdown())
        with anyio.move_on_after(5):
            await self._exited.wait()
        if not self._exited.is_set():
            await self.kill()

    async def kill(self) -> None:
        """SIGKILL the worker and wait until its death has been processed."""
        if self._proc is not None and self._proc.returncode is None:
            self._proc.kill()
        if self.alive:
            with anyio.move_on_after(10):
                await self._exited.wait()

    # calls ------------------------------------------------------------------------------------
    async def release(self, handles: list[int]) -> None:
        """Tell the worker to drop handles (best effort: a dead worker has dropped them)."""
        if not self.alive or not handles:
            return
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await self._send(Release(handles=handles))

    async def call(
        self,
        node_type: str,
        node_id: str,
        params: dict[str, Any],
        inputs: dict[str, list[Value]],
        on_event: ProgressCallback | None,
        timeout: float,
    ) -> dict[str, HostValue]:
        """Run one node here; raises NodeError, PackCrashed, CallTimedOut or cancellation."""
        cid = next(self._ids)
        send, recv = anyio.create_memory_object_stream[Any](math.inf)
        self.last_active = time.monotonic()
        self.pending[cid] = send
        self.running[cid] = node_type
        if not self.alive:
            self.pending.pop(cid, None)
            raise PackCrashed(self.pack, self.returncode, self.tail(), f"'{node_type}'")
        try:
            await self._send(
                Call(id=cid, node=node_type, node_id=node_id, params=params, inputs=inputs)
            )
            with anyio.fail_after(timeout):
                return await self._await_result(cid, node_type, node_id, recv, on_event)
        except TimeoutError:
            with anyio.CancelScope(shield=True):
                if not await self._cancel(cid, recv):
                    await self.kill()
            raise CallTimedOut(self.pack, node_type, timeout) from None
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await self._cancel(cid, recv)
            raise
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise PackCrashed(self.pack, self.returncode, self.tail(), f"'{node_type}'") from exc
        finally:
            self.pending.pop(cid, None)
            self.running.pop(cid, None)
            self.last_active = time.monotonic()

    async def _await_result(
        self,
        cid: int,
        node_type: str,
        node_id: str,
        recv: MemoryObjectReceiveStream[Any],
        on_event: ProgressCallback | None,
    ) -> dict[str, HostValue]:
        async for msg in recv:
            match msg:
                case Progress() | Preview():
                    if on_event is not None:
                        on_event(msg)
                case Done(outputs=outputs):
                    return {k: HostValue(v, self.pack, self.generation) for k, v in outputs.items()}
                case Failed(error=error):
                    raise NodeError(self.pack, node_type, node_id, error)
                case CallCancelled():
                    raise CallCancelledError(f"'{node_type}' was cancelled")
                case PackCrashed():
                    raise msg
        raise PackCrashed(self.pack, self.returncode, self.tail(), f"'{node_type}'")

    async def _cancel(self, cid: int, recv: MemoryObjectReceiveStream[Any]) -> bool:
        """Ask the call to stop; True if it settled within the grace period."""
        if not self.alive:
            return True
        try:
            await self._send(Cancel(id=cid))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return True
        with anyio.move_on_after(self.settings.cancel_grace):
            async for msg in recv:
                if isinstance(msg, Done | Failed | CallCancelled | PackCrashed):
                    if isinstance(msg, Done):
                        await self.release(_owned_handles(msg.outputs.values()))
                    return True
        return False


def _evicts(welcome: Welcome) -> bool:
    major, _, rest = welcome.sdk_version.partition(".")
    try:
        return (int(major), int(rest.partition(".")[0])) >= (1, 3)
    except ValueError:
        return False


def _owned_handles(values: Any) -> list[int]:
    ids: list[int] = []
    for v in values:
        if isinstance(v, HandleValue):
            ids.append(v.id)
        elif isinstance(v, MediaValue) and isinstance(v.data, ShmRef) and v.region is not None:
            ids.append(v.region)
    return ids


class Supervisor:
    """Owns the workers of every pack; its tasks live in the task group it is given."""

    def __init__(
        self,
        registry: MergedRegistry,
        settings: Settings,
        tg: anyio.abc.TaskGroup,
        on_worker_exit: Callable[[str, int], None] | None = None,
        broker: Broker | None = None,
    ) -> None:
        self.registry = registry
        self.settings = settings
        self._tg = tg
        #: Shares memory between the workers (inventory probed now, budget from the env).
        self.broker = broker if broker is not None else Broker()
        self._workers: dict[str, WorkerProcess] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._generations: dict[str, int] = {}
        self._on_worker_exit = on_worker_exit
        self._retiring: set[WorkerProcess] = set()
        self._reaping = False

    def workers(self) -> dict[str, WorkerProcess]:
        """Live workers by pack."""
        return {p: w for p, w in self._workers.items() if w.alive}

    async def worker(self, pack: str) -> WorkerProcess:
        """The pack's live worker, started (or restarted) on demand."""
        current = self._workers.get(pack)
        if current is not None and current.alive:
            return current
        lock = self._locks.setdefault(pack, anyio.Lock())
        async with lock:
            current = self._workers.get(pack)
            if current is not None and current.alive:
                return current
            if not self._reaping and self.settings.worker_idle > 0:
                self._reaping = True
                self._tg.start_soon(self._reap)
            info = self.registry.packs.get(pack)
            if info is None:
                raise PackStartFailed(pack, "no such pack is registered")
            gen = self._generations.get(pack, 0) + 1
            self._generations[pack] = gen
            proc = WorkerProcess(pack, gen, self.settings, self._exited, self.broker)
            await proc.start(str(info.env.python), self._tg)
            self._workers[pack] = proc
            return proc

    def set_registry(self, registry: MergedRegistry) -> None:
        """Serve ``registry`` from now on. A pack whose venv changed (upgrade, rollback) or that
        is gone gets a new worker on its next call; its old worker finishes the calls it is
        running (they complete on the old version), then stops."""
        self.registry = registry
        for pack, proc in list(self._workers.items()):
            info = registry.packs.get(pack)
            if info is None or str(info.env.python) != proc.python:
                del self._workers[pack]
                self._retiring.add(proc)
                self._tg.start_soon(self._retire, proc)

    async def _retire(self, proc: WorkerProcess) -> None:
        try:
            while proc.alive and proc.pending:
                await anyio.sleep(0.05)
            await proc.stop()
        finally:
            self._retiring.discard(proc)

    async def _reap(self) -> None:
        """Stop workers that had no call for ``settings.worker_idle`` seconds."""
        idle = self.settings.worker_idle
        while True:
            await anyio.sleep(max(0.05, min(idle / 4, 5.0)))
            now = time.monotonic()
            for pack, proc in list(self._workers.items()):
                if proc.alive and not proc.pending and now - proc.last_active >= idle:
                    del self._workers[pack]  # the next call starts a fresh worker
                    await proc.stop()

    def _exited(self, proc: WorkerProcess) -> None:
        if self._on_worker_exit is not None:
            self._on_worker_exit(proc.pack, proc.generation)

    async def call(
        self,
        pack: str,
        node_type: str,
        node_id: str,
        params: dict[str, Any],
        inputs: dict[str, list[Value]],
        on_event: ProgressCallback | None = None,
        timeout: float | None = None,
    ) -> dict[str, HostValue]:
        """Run a node in its pack's worker."""
        proc = await self.worker(pack)
        return await proc.call(
            node_type,
            node_id,
            params,
            inputs,
            on_event,
            self.settings.call_timeout if timeout is None else timeout,
        )

    async def release(self, values: list[HostValue]) -> None:
        """Release the worker-side resources behind ``values`` (handles, shm regions)."""
        by_worker: dict[tuple[str, int], list[int]] = {}
        for hv in values:
            ids = _owned_handles([hv.value])
            if ids:
                by_worker.setdefault((hv.pack, hv.generation), []).extend(ids)
        for (pack, gen), ids in by_worker.items():
            proc = self._workers.get(pack)
            if proc is not None and proc.generation == gen:
                await proc.release(ids)

    async def aclose(self) -> None:
        """Stop every worker."""
        with anyio.CancelScope(shield=True):
            for proc in [*self._workers.values(), *self._retiring]:
                await proc.stop()
