"""One replica of a Ray Serve deployment: a pack worker on a cluster node, called through a
``DeploymentHandle`` (the host's side is ``_serve``; this module imports Ray, so only
that one imports it, and only when a deployment runs on a cluster).

The replica runs in the host's own environment (the one Ray runs on every node). On start it
builds or reuses the pack's venv on its node from the recipe ``packs.lock`` gives (as
``PackActor`` does) and starts the worker as a local child, on a socketpair with shared memory,
so the node's own memory broker plans its device. A call is one streaming response: the
worker's progress, previews and text deltas as they come, then its outputs with every byte
inline (they travel back through Ray's object store). A cancelled response cancels the call.

Affinity is Serve's: the host names the model a call picks as its multiplexed model id, and a
call that takes handles names ``h:<replica>`` (the replica that made them, which registers that
id once it holds handles). A call with handles made elsewhere is refused (``ServeRefused``): the
host's run computes their producers again. A worker that dies makes the replica unhealthy
(``check_health``), and Serve replaces it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import msgspec
import ray
from inline_registry import EnvRecipe, materialize
from inline_sdk.protocol import (
    CHUNK_SIZE,
    CallCancelled,
    Failed,
    HandleValue,
    InlineBytes,
    MediaValue,
    Preview,
    Progress,
    RemoteError,
    Stream,
    Value,
)
from ray import serve

from .._errors import CallCancelled as CallCancelledError
from .._errors import NodeError, PackCrashed, PackStartFailed
from .._values import HostValue, owned_handles
from ._broker import Broker
from ._bulk import HostBulk
from ._launchers import LocalLauncher
from ._process import WorkerProcess
from ._ray_models import NAMESPACE, fetch_models
from ._sandbox import node_sandboxing

log = logging.getLogger("inline.serve")
#: The prefix of the multiplexed id that routes a call to the replica holding its handles.
HANDLES = "h:"
#: Model ids (and the handle id) a replica keeps registered for Serve's routing.
MODELS_PER_REPLICA = 8


class ServeCall(msgspec.Struct, frozen=True, kw_only=True):
    """One node call, as the host sends it to a replica."""

    node: str
    node_id: str
    params: dict[str, Any]
    inputs: dict[str, list[Value]]
    secrets: dict[str, str] = {}
    timeout: float = 3600.0
    #: The replica that made the call's input handles ("" when it takes none).
    handles_of: str = ""


class ServeDone(msgspec.Struct, frozen=True, tag="serve-done", tag_field="t"):
    """The call's outputs (bytes inline), and the replica and node that ran it."""

    outputs: dict[str, Value]
    replica: str
    node: str
    #: whether the replica's worker runs in a sandbox on its node
    sandboxed: bool = False


class ServeRefused(msgspec.Struct, frozen=True, tag="serve-refused", tag_field="t"):
    """The call takes handles this replica does not hold."""

    replica: str


class ServeCrashed(msgspec.Struct, frozen=True, tag="serve-crashed", tag_field="t"):
    """The replica's worker died during the call."""

    returncode: int | None
    tail: str


ServeEvent = (
    Progress | Preview | Stream | Failed | CallCancelled | ServeDone | ServeRefused | ServeCrashed
)
_encode = msgspec.msgpack.Encoder().encode
_calls = msgspec.msgpack.Decoder(ServeCall)
#: The secrets of the call running in this task (read by the worker's secrets reader).
_call_secrets: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "inline_call_secrets", default=None
)


def _secrets(params: Mapping[str, Any], node_type: str, pack: str) -> dict[str, str]:
    return _call_secrets.get() or {}  # what the host granted the call, sent with it


def _fetch(fetch: dict[str, Any], models_dir: Path, node: str) -> None:
    """Fetch the files of ``fetch`` (``_serve``'s offer) this node lacks from the host."""
    source = ray.get_actor(fetch["source"], namespace=NAMESPACE)

    def read(rel: str, offset: int, size: int) -> bytes:
        return bytes(ray.get(source.read.remote(rel, offset, size)))

    entries = [(str(rel), int(size), str(sha)) for rel, size, sha in fetch["files"]]
    fetched = fetch_models(entries, models_dir, read)
    if fetched:
        log.warning("node %s fetched %s from the host into %s", node, ", ".join(fetched),
                    models_dir)  # fmt: skip


class PackReplica:
    """A pack worker behind Serve (``serve.deployment`` wraps it in ``_serve``)."""

    async def __init__(  # type: ignore[misc]  # Ray actors take an async constructor
        self, recipe: bytes, packs_dir: str, knobs: dict[str, Any]
    ) -> None:
        self.tag: str = serve.get_replica_context().replica_tag
        self.node: str = ray.util.get_node_ip_address()
        env_recipe = msgspec.msgpack.decode(recipe, type=EnvRecipe)
        self.pack = env_recipe.pack
        python, _venv = await asyncio.to_thread(
            materialize, env_recipe, Path(packs_dir), node=f"node {self.node}"
        )
        sandboxing = node_sandboxing(knobs, self.pack)
        settings = sandboxing.settings
        fetch = knobs.get("fetch")
        if fetch:  # the deployment's model, where this node lacks it
            await asyncio.to_thread(_fetch, fetch, settings.models_dir, self.node)
        self.bulk = HostBulk()
        self.proc = WorkerProcess(
            self.pack,
            1,
            settings,
            lambda _proc: None,
            launcher=LocalLauncher(sandboxing.confinement),
            bulk=self.bulk,
            broker=Broker(profile=settings.profile),
            secrets=_secrets,
        )
        self._stop = asyncio.Event()
        started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._runner = asyncio.create_task(self._run(str(python), started))
        await started  # raises what the start raised: Serve retries the replica
        warm = knobs.get("warm")
        if warm:  # the deployment's model, loaded before Serve counts the replica started
            await self.proc.warm(warm["node"], warm["params"], float(knobs["warm_timeout"]))

    async def _run(self, python: str, started: asyncio.Future[None]) -> None:
        try:
            async with anyio.create_task_group() as tg:
                try:
                    await self.proc.start(python, tg)
                except BaseException as exc:
                    started.set_exception(exc)
                    raise
                started.set_result(None)
                await self._stop.wait()
                await self.proc.stop()
                tg.cancel_scope.cancel()
        except PackStartFailed:
            pass  # said to the constructor

    async def check_health(self) -> None:
        """Serve's health check: a replica whose worker died is replaced."""
        if not self.proc.alive:
            raise RuntimeError(
                f"the worker of pack {self.pack} on {self.node} exited "
                f"({self.proc.returncode}): {self.proc.tail()[-400:]}"
            )

    async def __del__(self) -> None:
        if not hasattr(self, "_runner"):
            return  # its start failed before the worker started (a model it could not fetch)
        self._stop.set()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(self._runner, 10)

    @serve.multiplexed(max_num_models_per_replica=MODELS_PER_REPLICA)
    async def _hold(self, model_id: str) -> str:
        """Serve's multiplexed loader: the worker loads models itself, on the call; this only
        tells Serve's router which replica has which (its LRU forgets the oldest)."""
        return model_id

    async def describe(self) -> dict[str, Any]:
        """Where this replica runs (for one replica Serve picks)."""
        return {"replica": self.tag, "node": self.node, "pid": self.proc.pid,
                "sandboxed": self.proc.sandboxed}  # fmt: skip

    async def release(self, replica: str, ids: list[int]) -> None:
        """Free handles this replica made (a release routed elsewhere is dropped)."""
        if replica == self.tag and ids:
            await self.proc.release(ids)

    async def call(self, request: bytes) -> AsyncIterator[bytes]:
        """Run one node call; its events, then its outputs (encoded ``ServeEvent`` items)."""
        req = _calls.decode(request)
        if req.handles_of and req.handles_of != self.tag:
            yield _encode(ServeRefused(replica=self.tag))
            return
        model = serve.get_multiplexed_model_id()
        if model:
            await self._hold(model)  # pyright: ignore[reportCallIssue] (serve.multiplexed)
        inputs, held = self._inputs(req.inputs)
        events: asyncio.Queue[Progress | Preview | Stream] = asyncio.Queue()
        _call_secrets.set(req.secrets)
        task = asyncio.create_task(
            self.proc.call(
                req.node, req.node_id, req.params, inputs, events.put_nowait, req.timeout
            )
        )
        try:
            while not task.done() or not events.empty():
                getter = asyncio.ensure_future(events.get())
                await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    yield _encode(getter.result())
                else:
                    getter.cancel()
            yield await self._ending(task)
        finally:
            if not task.done():  # the response was cancelled: so is the call
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            for value in held:
                self.bulk.free(value)

    def _inputs(
        self, wire: dict[str, list[Value]]
    ) -> tuple[dict[str, list[HostValue]], list[MediaValue]]:
        """The call's inputs as this replica holds them: large bytes in its shared memory."""
        held: list[MediaValue] = []
        out: dict[str, list[HostValue]] = {}
        for port, values in wire.items():
            items: list[HostValue] = []
            for v in values:
                if (
                    isinstance(v, MediaValue)
                    and isinstance(v.data, InlineBytes)
                    and len(v.data.data) > CHUNK_SIZE
                ):
                    v = self.bulk.hold(v.kind, v.ext, v.data.data, v.params)
                    held.append(v)
                    items.append(HostValue(v, "host", 0))
                else:
                    items.append(HostValue(v, self.pack, 1))
            out[port] = items
        return out, held

    async def _ending(self, task: asyncio.Task[dict[str, HostValue]]) -> bytes:
        """The call's last event: its outputs (bytes inline), or how it failed."""
        try:
            outputs = task.result()
        except NodeError as exc:
            error = RemoteError(
                type=exc.remote_type, message=exc.remote_message, traceback=exc.traceback
            )
            return _encode(Failed(id=0, error=error))
        except CallCancelledError:
            return _encode(CallCancelled(id=0))
        except PackCrashed as exc:
            return _encode(ServeCrashed(returncode=exc.returncode, tail=self.proc.tail()))
        values: dict[str, Value] = {}
        regions: list[int] = []
        for port, hv in outputs.items():
            v = hv.value
            if isinstance(v, MediaValue) and not isinstance(v.data, InlineBytes):
                data = self.bulk.read(v)
                regions += owned_handles([v])
                v = MediaValue(kind=v.kind, ext=v.ext, data=InlineBytes(data), params=v.params)
            values[port] = v
        if regions:
            await self.proc.release(regions)
        if any(isinstance(v, HandleValue) for v in values.values()):
            # calls that take them come here
            await self._hold(HANDLES + self.tag)  # pyright: ignore[reportCallIssue]
        return _encode(
            ServeDone(
                outputs=values, replica=self.tag, node=self.node, sandboxed=self.proc.sandboxed
            )
        )
