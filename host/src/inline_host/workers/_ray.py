"""``RayLauncher``: pack workers as Ray actors on a cluster's nodes (``INLINE_RAY_ADDRESS``).

The host stays one process (the API, the run store, the graph); only workers move. For each
worker the launcher:

1. joins the cluster once (``ray.init``, namespace ``inline``; the cluster's own auth applies),
   within ``INLINE_RAY_CONNECT_TIMEOUT`` (``_ray_connect``; the server joins before it serves);
2. reads the venv's recipe from ``packs.lock`` (``inline_registry.recipe_for``);
3. listens on the host's address as the nodes see it, with a fresh per-worker secret;
4. places a ``PackActor`` with the resources the placement asks for (``_ray_placement``);
   the actor builds or reuses the venv on its node and starts the worker, which dials back
   and presents the secret (``TcpLauncher``'s check). Bulk bytes travel inline in chunks:
   nothing is shared memory across machines.

Faults: the actor is watched through the worker's stderr pipe (a Ray call that is always in
flight). When Ray reports the actor or its node dead, the stream is closed with a last log line
naming the node and what Ray said, so only that worker's calls fail (``PackCrashed`` carries
the line); the supervisor places a fresh actor on the next call. Stopping a worker (idle,
upgrade, shutdown) releases its actor; actors are owned by the host's driver, so they also go
when the host does.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import itertools
import secrets
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import msgspec
from inline_registry import RegistryError, recipe_for

from .._settings import Settings
from ._launcher import LaunchedWorker, LaunchFailed
from ._launchers import _first_of, _read_secret
from ._ray_actor import PackActor
from ._ray_connect import join_cluster
from ._ray_placement import Demand
from ._sandbox import node_knobs

DemandFn = Callable[[str, float], Demand]
_names = itertools.count(1)


async def _get(ref: Any) -> Any:
    """Await a Ray object ref without holding a thread."""
    return await asyncio.wrap_future(ref.future())


def _ray_reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return " ".join(line.strip() for line in text[:6] if line.strip())[:600] or type(exc).__name__


class RayWorker:
    """A worker running in a Ray actor on some node."""

    shares_memory = False
    shm_dir: Path | None = None

    def __init__(
        self, ray: Any, actor: Any, stream: anyio.abc.ByteStream, where: dict[str, Any]
    ) -> None:
        self._ray = ray
        self._actor = actor
        self.stream = stream
        self.where = where
        self.pid: int | None = where.get("pid")
        #: whether its node sandboxed it (as the host's mode says, where bubblewrap works)
        self.sandboxed: bool = bool(where.get("sandboxed"))
        self.actor_error: str | None = None
        self._released = False

    def _node(self) -> str:
        return f"node {self.where.get('nodeId', '?')} ({self.where.get('nodeAddress', '?')})"

    async def _actor_died(self, exc: BaseException) -> None:
        """Record why (once) and close the stream: that ends this worker's calls only."""
        if self.actor_error is not None or self._released:
            return  # already known, or we released it ourselves
        self.actor_error = _ray_reason(exc)
        with contextlib.suppress(Exception):
            await self.stream.aclose()

    def stderr(self) -> AsyncIterator[bytes] | None:
        return self._stderr()

    async def _stderr(self) -> AsyncIterator[bytes]:
        ray = self._ray
        while True:
            try:
                chunk: bytes = await _get(self._actor.read_stderr.remote())
            except ray.exceptions.RayError as exc:
                await self._actor_died(exc)
                break
            if not chunk:
                break
            yield chunk
        if self.actor_error is not None:  # the last line of its log says what happened
            yield f"\nray: the actor on {self._node()} died: {self.actor_error}\n".encode()

    async def wait(self) -> int | None:
        ray = self._ray
        code: int | None = None
        try:
            with anyio.fail_after(10):
                code = await _get(self._actor.wait.remote())
        except ray.exceptions.RayError as exc:
            await self._actor_died(exc)
        except TimeoutError:
            self.kill()
        self.release()
        return code

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self._actor.kill.remote()
        self.release()

    def release(self) -> None:
        """Give the actor back to the cluster (its worker dies with it)."""
        if self._released:
            return
        self._released = True
        with contextlib.suppress(Exception):
            self._ray.kill(self._actor, no_restart=True)

    def describe(self) -> dict[str, Any]:
        ray_info = {k: v for k, v in self.where.items() if k not in ("pid", "sandboxed")}
        if self.actor_error is not None:
            ray_info["error"] = self.actor_error
        return {"launcher": "ray", "pid": self.pid, "ray": ray_info, "sandboxed": self.sandboxed}


class RayLauncher:
    """Starts each worker in a fresh Ray actor, placed by its pack's demand."""

    name = "ray"

    def __init__(
        self,
        settings: Settings,
        demand: DemandFn,
        trust: Callable[[str], tuple[bool, bool]] = lambda _pack: (False, False),
    ) -> None:
        if not settings.ray_address:
            raise ValueError("RayLauncher needs INLINE_RAY_ADDRESS")
        self.address = settings.ray_address
        self.settings = settings
        self._demand = demand
        #: (first-party, network) of a pack: how its node sandboxes its worker
        self._trust = trust
        self._ray: Any = None
        self._joined = anyio.Lock()
        self._actor_class: Any = None
        self._host: str = settings.ray_host_address or ""

    async def join(self) -> Any:
        """Join the cluster (once); the ``ray`` module."""
        async with self._joined:
            if self._ray is None:
                # bounded (INLINE_RAY_CONNECT_TIMEOUT), and abandoned on cancel: a cluster
                # that never answers must not hold the host's shutdown
                ray = await anyio.to_thread.run_sync(
                    join_cluster,
                    self.address,
                    self.settings.ray_connect_timeout,
                    abandon_on_cancel=True,
                )
                if not self._host:
                    self._host = ray.util.get_node_ip_address()
                self._actor_class = ray.remote(max_concurrency=4, max_restarts=0)(PackActor)
                self._ray = ray
        return self._ray

    async def launch(
        self, pack: str, python: Path, timeout: float, *, gpu: int | None = None
    ) -> LaunchedWorker:
        ray = await self.join()  # (``gpu`` unused: Ray gives each actor its GPUs)
        try:
            recipe = await anyio.to_thread.run_sync(recipe_for, python)
        except (RegistryError, OSError) as exc:
            raise LaunchFailed(f"cannot describe its venv to a cluster node: {exc}") from exc
        gpus = float(ray.cluster_resources().get("GPU", 0))
        demand = self._demand(pack, gpus)
        secret = secrets.token_hex(32)
        listeners = await anyio.create_tcp_listener(local_host=self._host, local_port=0)
        listener = listeners.listeners[0]
        actor: Any = None
        try:
            port = listener.extra(anyio.abc.SocketAttribute.local_port)
            actor = self._actor_class.options(
                name=f"inline-{pack}-{next(_names)}-{secrets.token_hex(3)}",
                **demand.options(),
            ).remote()
            started = actor.start.remote(
                msgspec.msgpack.encode(recipe),
                str(self.settings.ray_packs_dir or self.settings.packs_dir),
                f"{self._host}:{port}",
                secret,
                node_knobs(self.settings, self._trust(pack)),
            )
            where, stream = await self._connect(
                ray, actor, started, listener, secret, demand, timeout
            )
        except BaseException:
            if actor is not None:
                with contextlib.suppress(Exception):
                    ray.kill(actor, no_restart=True)
            raise
        finally:
            await listeners.aclose()
        where = {**where, "demand": demand.describe(), "address": self.address}
        return RayWorker(ray, actor, stream, where)

    async def _connect(
        self,
        ray: Any,
        actor: Any,
        started: Any,
        listener: Any,
        secret: str,
        demand: Demand,
        timeout: float,
    ) -> tuple[dict[str, Any], anyio.abc.ByteStream]:
        """The actor's report and the worker's authenticated stream, within ``timeout``."""
        where: dict[str, Any] = {}
        stream: anyio.abc.ByteStream | None = None
        try:
            with anyio.fail_after(timeout):
                try:
                    where = await _get(started)
                except ray.exceptions.RayError as exc:
                    raise LaunchFailed(f"its Ray actor failed: {_ray_reason(exc)}") from None
                stream = await _first_of(self._accept(listener, secret), self._exited(ray, actor))
                if stream is None:
                    raise LaunchFailed(
                        f"its worker on node {where.get('nodeAddress')} exited before it "
                        "connected (its log says why)"
                    )
        except TimeoutError:
            if not where:
                raise LaunchFailed(
                    f"no Ray node took its actor within {timeout:g}s (it asks for "
                    f"{demand.describe()}; see `ray status`), or its venv was still building"
                ) from None
            raise LaunchFailed(
                f"its worker on node {where.get('nodeAddress')} did not connect back to "
                f"{self._host} within {timeout:g}s"
            ) from None
        return where, stream

    async def _exited(self, ray: Any, actor: Any) -> None:
        with contextlib.suppress(ray.exceptions.RayError):
            await _get(actor.wait.remote())

    async def _accept(self, listener: Any, secret: str) -> anyio.abc.ByteStream:
        """The first connection that presents ``secret``; others are dropped."""
        while True:
            conn = await listener.accept()
            try:
                with anyio.fail_after(10):
                    presented = await _read_secret(conn)
            except (TimeoutError, anyio.EndOfStream, anyio.IncompleteRead, ValueError):
                await conn.aclose()
                continue
            if hmac.compare_digest(presented.encode(), secret.encode()):
                return conn
            await conn.aclose()
