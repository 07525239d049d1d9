"""One image across several devices: a torchrun worker group driven from the pack worker.

The group is started once (``torch.distributed.run``, one rank per device of the broker's plan),
reused for every call and shut down with the worker (``close``, or when the worker goes away: rank
0 sees its connection end and the group exits). Rank 0 talks to this process over an
authenticated loopback connection: a call's request (with its LoRA stack) goes to every rank,
rank 0 sends back each step's latents (progress, previews), and a cancel reaches every rank at
the next step. The ranks split the sequence (``_ulysses``: each computes 1/N of the tokens of
every block; xfuser's wrapper instead on CUDA where it is installed), and after each call they
check they agree and report the tokens each rank's attention saw (``split`` in the stats). A
rank that dies fails only the call in flight, with the reason; the next call starts a fresh group.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import pickle
import secrets
import signal
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection, Listener
from typing import Any

from inline_sdk import Cancelled, WorkerStats

from ._denoise import DenoiseRequest
from ._ulysses import check_devices, parse_degrees

log = logging.getLogger("inline.runtime.parallel")
START_TIMEOUT = 300.0
POLL_S = 0.05


class GroupFailed(RuntimeError):
    """The worker group lost a rank (or never started): the call in flight fails with why."""


def degrees(plan: str) -> dict[str, int]:
    """``ulysses=2,ring=2`` as ``{"ulysses": 2, "ring": 2}``."""
    return parse_degrees(plan)


def send(conn: Connection, msg: tuple[Any, ...]) -> None:
    """A message over the group's authenticated connection, tensors by value (plain pickle:
    multiprocessing's own pickler would share them through file descriptors)."""
    conn.send_bytes(pickle.dumps(msg))


def recv(conn: Connection) -> tuple[Any, ...]:
    return pickle.loads(conn.recv_bytes())


class WorkerGroup:
    """The running torchrun group and rank 0's connection."""

    def __init__(
        self, model_file: str, plan: str, devices: list[str], attention: str = "sdpa"
    ) -> None:
        self.world = len(devices)
        key = secrets.token_bytes(32)
        self._listener = Listener(("127.0.0.1", 0), authkey=key)
        host, port = self._listener.address
        env = {
            **os.environ,
            "INLINE_GROUP_ADDRESS": f"{host}:{port}",
            "INLINE_GROUP_KEY": key.hex(),
            "INLINE_GROUP_MODEL": model_file,
            "INLINE_GROUP_PLAN": plan,
            "INLINE_GROUP_DEVICES": ",".join(devices),
            "INLINE_GROUP_ATTENTION": attention,
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        }
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc-per-node={self.world}",
            "--nnodes=1",
            # a rendezvous store on a port the system picks as it binds (a port found free
            # and bound later can be taken between), on loopback, as the ranks' store too
            "--rdzv-backend=c10d",
            "--rdzv-endpoint=127.0.0.1:0",
            f"--rdzv-id={secrets.token_hex(8)}",
            "--local-addr=127.0.0.1",
            "-m",
            "inline_primitives.runtime._rank",
        ]
        self.proc = subprocess.Popen(cmd, env=env, stdout=sys.stderr, start_new_session=True)
        self.conn = self._accept()
        hello = recv(self.conn)
        if hello[0] != "ready":
            self.kill()  # every rank ends on its own; this makes sure before the call fails
            raise GroupFailed(f"the worker group did not start: {hello[1]}")
        self.info: dict[str, Any] = hello[1]

    def _accept(self) -> Connection:
        """Rank 0's connection, once its model is loaded; a group whose torchrun ended first
        (a rank failed to start or load) fails at once, not at the timeout."""
        box: list[Any] = []
        thread = threading.Thread(target=lambda: box.append(self._accept_once()), daemon=True)
        thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while thread.is_alive() and self.proc.poll() is None and time.monotonic() < deadline:
            thread.join(POLL_S)
        if box and not isinstance(box[0], BaseException):
            return box[0]
        code = self.proc.poll()
        self.kill()
        if box:
            why = str(box[0])
        elif code is not None:
            why = f"torchrun exited with code {code} (the worker's log says why)"
        else:
            why = f"no rank 0 within {START_TIMEOUT:.0f} s"
        raise GroupFailed(f"the worker group did not start: {why}")

    def _accept_once(self) -> Any:
        try:
            return self._listener.accept()
        except BaseException as exc:  # handed to the caller
            return exc

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def died(self) -> str:
        code = self.proc.poll()
        return "a rank of the worker group died" + (
            "" if code is None else f" (torchrun exit code {code})"
        )

    def close(self, timeout: float = 30.0) -> None:
        """Ask every rank to finish, then make sure the group is gone."""
        with contextlib.suppress(OSError, ValueError):
            send(self.conn, ("shutdown",))
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        self._listener.close()

    def kill(self) -> None:
        """torchrun and every rank (each rank runs in a session of its own)."""
        for pid in [self.proc.pid, *getattr(self, "info", {}).get("pids", [])]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        self.proc.wait()
        self._listener.close()


class ParallelDenoiser:
    """Runs requests on the worker group, one at a time."""

    def __init__(
        self,
        model_file: str,
        plan: str,
        devices: list[str],
        stats: WorkerStats | None = None,
        attention: str = "sdpa",
    ) -> None:
        if math.prod(degrees(plan).values()) != len(devices):
            raise ValueError(f"the plan {plan} needs {math.prod(degrees(plan).values())} devices")
        check_devices(plan, "cuda" if all(d.startswith("cuda") for d in devices) else "cpu")
        self.model_file, self.plan, self.devices = model_file, plan, devices
        self.attention = attention
        self._stats = stats
        self._group: WorkerGroup | None = None
        self._lock = threading.Lock()
        self.calls = 0
        self.restarts = 0
        #: the last call's report: ``split``, ``ranksAgree``, ``tokens`` (per rank and stage,
        #: [tokens its attention saw, tokens of the whole sequence])
        self.last: dict[str, Any] = {}

    def _report(self, **extra: Any) -> None:
        if self._stats is not None:
            group = self._group
            self._stats.update(
                "parallel",
                {
                    "plan": self.plan,
                    "devices": list(self.devices),
                    "world": len(self.devices),
                    "split": bool(self.last.get("split", group and group.info.get("split"))),
                    "splitBy": group.info.get("splitBy") if group else None,
                    "backend": group.info.get("backend") if group else None,
                    "running": bool(group and group.alive),
                    "calls": self.calls,
                    "restarts": self.restarts,
                    **extra,
                },
            )

    def group(self) -> WorkerGroup:
        """The live group (started on first use, and again after a rank died)."""
        if self._group is not None and not self._group.alive:
            self._group.kill()
            self._group = None
            self.restarts += 1
        if self._group is None:
            self._group = WorkerGroup(self.model_file, self.plan, self.devices, self.attention)
            log.info("worker group up: %s on %s (%s)", self.plan, self.devices, self._group.info)
            self._report()
        return self._group

    def denoise(self, request: DenoiseRequest) -> Any:
        with self._lock:
            group = self.group()
            self.calls += 1
            payload = {
                "positive": [e.cpu() for e in request.positive.embeds],
                "negative": None
                if request.negative is None
                else [e.cpu() for e in request.negative.embeds],
                "latent": request.latent.cpu(),
                "steps": request.steps,
                "guidance": request.guidance,
                "sampler": request.sampler,
                "scheduler": request.scheduler,
                "seed": request.seed,
                "denoise": request.denoise,
                "shift": request.shift,
                "loras": None if request.loras is None else request.loras.stack_data(),
            }
            try:
                send(group.conn, ("call", payload))
                return self._follow(group, request)
            except (EOFError, OSError) as exc:
                group.kill()
                self._report(lastError=group.died())
                raise GroupFailed(f"{group.died()}: {exc or type(exc).__name__}") from exc

    def _follow(self, group: WorkerGroup, request: DenoiseRequest) -> Any:
        cancel_sent = False
        while True:
            if not cancel_sent and request.cancelled():
                send(group.conn, ("cancel",))
                cancel_sent = True
            if not group.conn.poll(POLL_S):
                if not group.alive:
                    raise EOFError("the group exited")
                continue
            msg = recv(group.conn)
            if msg[0] == "step":
                if request.on_step is not None and not cancel_sent:
                    try:
                        request.on_step(msg[1], msg[2], msg[3])
                    except Cancelled:
                        send(group.conn, ("cancel",))
                        cancel_sent = True
            elif msg[0] == "done":
                self.last = msg[2]
                self._report(ranksAgree=msg[2]["ranksAgree"], tokens=msg[2]["tokens"])
                return msg[1]
            elif msg[0] == "cancelled":
                raise Cancelled()
            elif msg[0] == "error":
                raise RuntimeError(f"the worker group failed: {msg[1]}")

    def close(self) -> None:
        """Shut the group down (the worker is stopping)."""
        with self._lock:
            if self._group is not None:
                self._group.close()
                self._group = None
            self._report()
