"""One running worker of one pack, multiplexing concurrent calls over its byte stream.

Every transport failure becomes one typed error (``PackCrashed``) naming the pack, the exit code
or signal and the last stderr lines. The stream comes from a ``WorkerLauncher``; what the two
sides may send each other comes from the capabilities both announced in the handshake. Values
cross it through ``_wire``; a handle another worker made is refused before anything is sent
(``HandlesGone``). Frames go and come through ``_channel`` (its reader hands each message to
``_dispatch`` as it arrives); each call waits on its own ``Mailbox``, and one ``Watchdog`` per
worker keeps every call's deadline (``_pending``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import msgspec
from inline_registry import SdkMismatch, check_welcome, make_hello
from inline_sdk.protocol import (
    CAP_BROKER,
    CAP_CHUNKS,
    CAP_SHARED_MEMORY,
    CAP_STATS,
    CAP_STREAM,
    CAP_WARM,
    BulkChunk,
    Call,
    CallCancelled,
    Cancel,
    Done,
    Evict,
    Failed,
    FrameCodec,
    FromWorker,
    Holding,
    PlaceAsk,
    Preview,
    Progress,
    Refused,
    Release,
    Shutdown,
    Stats,
    Stream,
    Welcome,
    unlink_segments,
)

from .._errors import CallCancelled as CallCancelledError
from .._errors import (
    CallTimedOut,
    HandlesGone,
    NodeError,
    PackCrashed,
    PackStartFailed,
    describe_exit,
)
from .._settings import Settings
from .._values import (
    EventCallback,
    HostValue,
    foreign_handles,
    owned_handles,
    worker_capabilities,
)
from ..guard import OutputTooLarge, check_outputs
from ._broker import Broker
from ._bulk import HostBulk
from ._channel import Channel, open_channel
from ._launcher import LaunchedWorker, LaunchFailed, Liveness, WorkerLauncher, liveness
from ._pending import TIMED_OUT, Mailbox, Watchdog
from ._sandbox import asset_ids, assets_view, share_assets
from ._wire import WireValues

STDERR_LINES = 40
#: The secrets one call gets, from its params and node type (the hub's store, handed in).
#: The secrets a call gets: (its params, its node type, its pack) -> name -> value.
SecretsReader = Callable[[Mapping[str, Any], str, str], dict[str, str]]
#: What this host understands; ``shared-memory`` only where the launcher provides it.
HOST_CAPABILITIES = (CAP_STREAM, CAP_BROKER, CAP_CHUNKS, CAP_STATS, CAP_WARM)


class WorkerProcess:
    """One running worker of one pack."""

    def __init__(
        self,
        pack: str,
        generation: int,
        settings: Settings,
        on_exit: Callable[[WorkerProcess], None],
        *,
        launcher: WorkerLauncher,
        bulk: HostBulk,
        broker: Broker | None = None,
        secrets: SecretsReader | None = None,
        gpu: int | None = None,
    ) -> None:
        self.pack = pack
        #: The one GPU it sees (NVML index) where its pool pinned it; None: every GPU.
        self.gpu = gpu
        self._secrets = secrets
        self.generation = generation
        self.settings = settings
        self.broker = broker
        self.bulk = bulk
        self.launcher = launcher
        self.shm_prefix = f"inline-{os.getpid()}-{pack}-{generation}"
        self.codec: FrameCodec[Any] = FrameCodec(FromWorker)
        #: The calls in flight, by id: what the reader hands each of them.
        self.pending: dict[int, Mailbox] = {}
        self.running: dict[int, str] = {}
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_LINES)
        self.alive = False
        self.pid: int | None = None
        self.welcome: Welcome | None = None
        self.capabilities: frozenset[str] = frozenset()
        #: The worker's runtime figures (``Stats``: batching, parallel split, compile).
        self.runtime: dict[str, Any] = {}
        self.returncode: int | None = None
        self.python = ""
        self.last_active = time.monotonic()
        self._on_exit = on_exit
        self._gone = False
        self._tg: anyio.abc.TaskGroup | None = None
        self._ids = itertools.count(1)
        self._worker: LaunchedWorker | None = None
        self._channel: Channel | None = None
        self._liveness: Liveness | None = None
        self._watchdog = Watchdog(self.pending)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._first: Mailbox | None = None
        self._exited = anyio.Event()
        self._stderr_done = anyio.Event()
        self.values = WireValues(pack, generation, bulk, settings.max_output_bytes, self._send)

    @property
    def sandboxed(self) -> bool:
        """Whether its worker runs in a sandbox."""
        return self._worker is not None and self._worker.sandboxed

    async def warm(self, node_type: str, params: dict[str, Any], timeout: float) -> bool:
        """Run ``node_type``'s warm hook with ``params`` (load what they pick, run nothing);
        False, doing nothing, for a worker whose SDK has no warm hooks (before 1.7). Raises
        as ``call`` does (a NodeError for a model that cannot load)."""
        if CAP_WARM not in self.capabilities:
            return False
        await self.call(node_type, "warm", params, {}, None, timeout, warm=True)
        return True

    def _sees(self, hv: HostValue) -> bool:
        """Whether the worker reads ``hv``'s shared memory where it lies: any segment when it
        shares the machine's ``/dev/shm``, only its own when it has a folder of its own (a
        sandboxed worker; the others' bytes reach it in chunks)."""
        if CAP_SHARED_MEMORY not in self.capabilities:
            return False
        if self._worker is None or self._worker.shm_dir is None:
            return True
        return hv.pack == self.pack and hv.generation == self.generation

    def _call_secrets(self, params: Mapping[str, Any], node_type: str) -> dict[str, str]:
        """The secrets one call gets (``SecretNotGranted`` refuses it)."""
        return self._secrets(params, node_type, self.pack) if self._secrets is not None else {}

    # life cycle ----------------------------------------------------------------------------
    async def start(self, python: str, tg: anyio.abc.TaskGroup) -> Welcome:
        """Launch the worker, take its handshake (with a deadline), start its reader tasks."""
        self.python = python
        self._tg = tg
        s = self.settings
        try:
            worker = await self.launcher.launch(
                self.pack, Path(python), s.start_timeout, gpu=self.gpu
            )
        except (LaunchFailed, TimeoutError, OSError) as exc:
            raise PackStartFailed(self.pack, f"could not start its worker: {exc}") from None
        self._worker = worker
        self.pid = worker.pid
        if worker.shm_dir is not None:
            self.bulk.mount(self.shm_prefix + "-", worker.shm_dir)
        try:  # the host runs on asyncio: a call's wait is then one loop future
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        first = self._first = Mailbox(self._loop)
        self._liveness = liveness(worker)
        self._channel = open_channel(worker.stream, self.codec, self._dispatch)
        self.alive = True
        tg.start_soon(self._read_stderr)
        tg.start_soon(self._read_frames)
        tg.start_soon(self._watchdog.run)
        offered = {*HOST_CAPABILITIES, *([CAP_SHARED_MEMORY] if worker.shares_memory else [])}
        if self.broker is None:
            offered.discard(CAP_BROKER)
        hello = make_hello(
            self.pack,
            shm_prefix=self.shm_prefix,
            models_dir=s.models_dir,
            assets_dir=assets_view(s, self.pack) if worker.sandboxed else s.blobs_dir / "sha256",
            input_roots=list(s.input_roots),
        )
        hello = msgspec.structs.replace(
            hello, broker=CAP_BROKER in offered, capabilities=sorted(offered)
        )
        await self._send(hello)
        msg: Any = None
        with anyio.move_on_after(s.start_timeout):
            msg = await first.get()
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
        self.capabilities = frozenset(offered) & worker_capabilities(msg)
        if self.broker is not None:
            evict = self.evict if CAP_BROKER in self.capabilities else None
            self.broker.attach(self.shm_prefix, self.pack, self.pid, evict, self.gpu)
        return msg

    def usable(self) -> bool:
        """Whether a call may be handed to this worker: it runs, and neither its process's exit
        nor the end of its connection is seen yet (by a look, before the reader gets there)."""
        if self.alive and self._liveness is not None and self._liveness.ended():
            self._mark_gone()
        return self.alive

    def _mark_gone(self) -> None:
        """Seen dead: no call is handed to it any more, and what it held is forgotten now (the
        reader's clean-up follows)."""
        self.alive = False
        if not self._gone:
            self._gone = True
            self._on_exit(self)

    def describe(self) -> dict[str, Any]:
        """Where this worker runs and what it speaks (for ``/v1/health``)."""
        where = self._worker.describe() if self._worker is not None else {}
        pinned = {"gpu": self.gpu} if self.gpu is not None else {}
        return {**where, **pinned, "capabilities": sorted(self.capabilities),
                "runtime": self.runtime}  # fmt: skip

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
        assert self._worker is not None
        source = self._worker.stderr()
        if source is None:
            self._stderr_done.set()
            return
        log_dir = self.settings.logs_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        echo = self.settings.worker_echo
        partial = b""
        with open(log_dir / f"{self.pack}.log", "ab") as log:
            try:
                async for chunk in source:
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
        """Until the stream ends (the channel dispatches each message as it comes), then the
        worker's death is processed."""
        assert self._channel is not None
        try:
            await self._channel.run()
        finally:
            with anyio.CancelScope(shield=True):
                await self._died()

    def _dispatch(self, msg: Any) -> None:
        if isinstance(msg, BulkChunk):
            self.values.receive(msg)
            return
        if isinstance(msg, Welcome | Refused):
            if self._first is not None:
                self._first.put(msg)
                self._first = None
            return
        if isinstance(msg, Stats):
            self.runtime = dict(msg.sections)
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
        target.put(msg)

    async def _died(self) -> None:
        self._mark_gone()
        self._watchdog.stop()
        if self.broker is not None:
            self.broker.detach(self.shm_prefix)
        if self._worker is not None:
            self.returncode = await self._worker.wait()
            self._worker.kill()  # its process group: children it left behind go with it
        # let the stderr reader drain what the process printed last
        with anyio.move_on_after(2):
            await self._stderr_done.wait()
        for cid, target in list(self.pending.items()):
            during = self.running.get(cid, "")
            err = PackCrashed(
                self.pack, self.returncode, self.tail(), f"'{during}'" if during else ""
            )
            target.put(err)
        if self._first is not None:
            self._first.put(PackCrashed(self.pack, self.returncode, self.tail()))
            self._first = None
        if self._worker is not None:
            await self._worker.stream.aclose()
        # the dead worker's shared memory: unmapped here, and its names removed
        self.bulk.forget(self.shm_prefix + "-")
        if self._worker is not None and self._worker.shm_dir is not None:
            self.bulk.unmount(self.shm_prefix + "-")
            shutil.rmtree(self._worker.shm_dir, ignore_errors=True)
        else:
            unlink_segments(self.shm_prefix + "-")
        self.values.clear()
        self._exited.set()

    async def _send(self, msg: object) -> None:
        assert self._channel is not None
        await self._channel.send(self.codec.encode(msg))

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
        """Kill the worker (its whole process group) and wait until its death is processed."""
        if self._worker is not None:
            self._worker.kill()
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
        inputs: dict[str, list[HostValue]],
        on_event: EventCallback | None,
        timeout: float,
        *,
        warm: bool = False,
    ) -> dict[str, HostValue]:
        """Run one node here (with ``warm``, its warm hook: see ``warms``); raises NodeError,
        PackCrashed, CallTimedOut, HandlesGone (input handles another worker made: never sent)
        or cancellation."""
        foreign = foreign_handles(inputs, self.pack, self.generation)
        if foreign:
            raise HandlesGone(self.pack, self.generation, foreign)
        cid = next(self._ids)
        box = Mailbox(self._loop)
        self.last_active = time.monotonic()
        self.pending[cid] = box
        self.running[cid] = node_type
        if not self.alive:
            self.pending.pop(cid, None)
            self.running.pop(cid, None)
            raise PackCrashed(self.pack, self.returncode, self.tail(), f"'{node_type}'")
        try:
            if self.sandboxed and (ids := asset_ids(params)):
                await anyio.to_thread.run_sync(share_assets, self.settings, self.pack, ids)
            wire = {
                port: [await self.values.to_wire(hv, shared=self._sees(hv)) for hv in hvs]
                for port, hvs in inputs.items()
            }
            await self._send(
                Call(
                    id=cid,
                    node=node_type,
                    node_id=node_id,
                    params=params,
                    inputs=wire,
                    secrets=self._secrets(params, node_type, self.pack)
                    if self._secrets is not None
                    else {},
                    warm=warm,
                )
            )
            self._watchdog.arm(box, timeout)
            return await self._await_result(node_type, node_id, box, on_event)
        except TimeoutError:
            # the call is timed out, not its worker: only a call that ignores its cancel past
            # the grace takes the worker (and the worker's other calls) down with it
            with anyio.CancelScope(shield=True):
                settled, _ = await self._cancel(cid, box)
                if not settled:
                    await self.kill()
            raise CallTimedOut(self.pack, node_type, timeout, stopped=not settled) from None
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                settled, failed = await self._cancel(cid, box)
                if not settled:
                    # it ignored the cancel past the grace: stop it, as on a timeout, so
                    # abandoned calls never pile up in it (the next call gets a fresh one)
                    await self.kill()
            if failed is not None:  # it failed before the cancel came: that is its end
                raise NodeError(self.pack, node_type, node_id, failed.error) from None
            raise
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise PackCrashed(self.pack, self.returncode, self.tail(), f"'{node_type}'") from exc
        finally:
            self.pending.pop(cid, None)
            self.running.pop(cid, None)
            self.last_active = time.monotonic()

    async def _await_result(
        self,
        node_type: str,
        node_id: str,
        box: Mailbox,
        on_event: EventCallback | None,
    ) -> dict[str, HostValue]:
        """The call's events (to ``on_event``), until its end; ``TimeoutError`` past its
        deadline (the watchdog's word)."""
        while True:
            msg = await box.get()
            if msg is TIMED_OUT:
                raise TimeoutError
            match msg:
                case Progress() | Preview() | Stream():
                    if on_event is not None:
                        on_event(msg)
                case Done(outputs=outputs):
                    try:
                        check_outputs(node_id, node_type, outputs, self.settings.max_output_bytes)
                    except OutputTooLarge:
                        self.values.drop(outputs.values())
                        await self.release(owned_handles(outputs.values()))
                        raise
                    return {k: self.values.from_wire(v) for k, v in outputs.items()}
                case Failed(error=error):
                    raise NodeError(self.pack, node_type, node_id, error)
                case CallCancelled():
                    raise CallCancelledError(f"'{node_type}' was cancelled")
                case PackCrashed():
                    raise msg

    async def _cancel(self, cid: int, box: Mailbox) -> tuple[bool, Failed | None]:
        """Ask the call to stop: whether it settled within the grace period, and its failure
        when the node had failed on its own before the cancel reached it (its answer was in,
        or on its way: a sibling's failure that cancels this call must not hide it)."""
        if not self.alive:
            return True, None
        try:
            await self._send(Cancel(id=cid))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return True, None
        with anyio.move_on_after(self.settings.cancel_grace):
            while True:
                msg = await box.get()
                if isinstance(msg, Done | Failed | CallCancelled | PackCrashed):
                    if isinstance(msg, Done):
                        await self.release(owned_handles(msg.outputs.values()))
                    return True, msg if isinstance(msg, Failed) else None
        return False, None
