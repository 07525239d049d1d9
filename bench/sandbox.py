"""Worker cold start and per-call dispatch, sandboxed (bubblewrap) vs not, in one run.

Two launchers start ``benchpack`` workers from the same venv: ``LocalLauncher()`` (no sandbox)
and ``LocalLauncher(confine)`` with the host's own sandbox decision (``Sandboxing`` with
``sandbox="required"``: the bench fails rather than quietly timing an unsandboxed worker).
Every sandboxed worker is checked: its launcher says so, and from its own mount namespace the
host's packs dir (every pack's venv) cannot be seen.

- ``start_s`` / ``sandboxed_start_s``: the median of ``STARTS`` fresh starts each (launch,
  interpreter and SDK start, handshake, until the welcome), the modes alternating ABBA after an
  untimed warm start of each (the page cache warm); ``start_ratio`` (target <= 1.2).
- ``per_call_us`` / ``sandboxed_per_call_us``: the median of ``CALLS`` ``benchpack/noop`` calls
  on a warm worker each way (after ``WARMUP``), both workers up together and taking the calls
  in alternating blocks of ``BLOCK`` (this machine is noisy); ``call_ratio`` (target <= 1.05).
- Where the start time goes: ``start_overhead_s`` (sandboxed minus unsandboxed median);
  ``start_cpu_s`` / ``sandboxed_start_cpu_s``, the CPU the worker's processes ran until the
  welcome (bwrap's included; far steadier than wall time on a loaded machine); bubblewrap
  alone, ``bwrap_true_s`` (the same sandbox, running ``true``) and ``bwrap_bare_s``
  (namespaces only, ``/`` bound read-only); ``python_s`` / ``sandboxed_python_s``, the venv's
  interpreter running ``pass`` each way.

Writes bench/results/sandbox.json.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from _common import bench_settings, median, write_result

PACK = "benchpack"
STARTS = 21
CALLS = 2000
WARMUP = 200
BLOCK = 10
PROBES = 15
START_TARGET = 1.2
CALL_TARGET = 1.05


def _descendants(pid: int) -> list[int]:
    """``pid``'s descendants, nearest first (bwrap forks its own init, which runs the worker)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop(0)
        try:
            text = Path(f"/proc/{parent}/task/{parent}/children").read_text()
        except OSError:
            continue
        kids = [int(k) for k in text.split()]
        out += kids
        todo += kids
    return out


def tree_cpu_s(pid: int) -> float:
    """CPU seconds run so far by ``pid`` and its descendants, every thread (``schedstat``):
    unlike wall time, barely moved by other load on the machine."""
    total = 0
    for p in (pid, *_descendants(pid)):
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    return total / 1e9


def check_sandboxed(proc: Any, hidden: Path) -> None:
    """Fail unless ``proc``'s worker runs sandboxed: its launcher says so, and ``hidden`` (on
    the host) is absent from the worker's own view of the filesystem."""
    assert proc.describe()["sandboxed"] is True, proc.describe()
    assert hidden.is_dir(), f"{hidden} should exist on the host"
    own = os.readlink("/proc/self/ns/mnt")
    # its pid is the sandboxed worker's own (the launcher finds it below bwrap)
    for pid in [proc.pid, *_descendants(proc.pid)]:
        try:
            if os.readlink(f"/proc/{pid}/ns/mnt") == own:
                continue
            root = Path(f"/proc/{pid}/root")
            venv = (root / "inline" / "venv").is_dir()  # its view is readable from here
            seen = (root / hidden.relative_to("/")).exists()
        except OSError:
            continue
        assert venv, f"the sandboxed worker (pid {pid}) has no /inline/venv"
        assert not seen, f"the sandboxed worker (pid {pid}) sees {hidden}"
        return
    raise AssertionError(f"no process of worker {proc.pid} runs in a mount namespace of its own")


class Workers:
    """Starts ``benchpack`` workers through the two launchers, in one task group."""

    def __init__(self, settings: Any, registry: Any, python: Path, tg: anyio.abc.TaskGroup) -> None:
        from inline_host.workers import Broker, HostBulk
        from inline_host.workers._launchers import LocalLauncher
        from inline_host.workers._sandbox import Sandboxing

        self.settings = settings
        self.python = str(python)
        self.tg = tg
        self.bulk = HostBulk()
        self.broker = Broker(profile=settings.profile)
        sandboxing = Sandboxing(replace(settings, sandbox="required"), lambda: registry)
        self.confine = sandboxing.confinement
        self.launchers = {False: LocalLauncher(), True: LocalLauncher(self.confine)}
        self._generation = 0

    async def start(self, sandboxed: bool) -> tuple[Any, float, float]:
        """A fresh worker, the seconds from launch to its welcome, and the CPU seconds its
        processes ran by then."""
        from inline_host.workers import WorkerProcess

        self._generation += 1
        proc = WorkerProcess(
            PACK,
            self._generation,
            self.settings,
            lambda _proc: None,
            launcher=self.launchers[sandboxed],
            bulk=self.bulk,
            broker=self.broker,
        )
        t = time.perf_counter()
        await proc.start(self.python, self.tg)
        took = time.perf_counter() - t
        assert proc.pid is not None  # a local child: it has one
        cpu = tree_cpu_s(proc.pid)
        if sandboxed:
            check_sandboxed(proc, self.settings.packs_dir)
        else:
            assert proc.describe()["sandboxed"] is False, proc.describe()
        return proc, took, cpu


async def noop_us(proc: Any, start: int, count: int) -> list[float]:
    samples = []
    for i in range(start, start + count):
        t = time.perf_counter_ns()
        await proc.call("benchpack/noop", "n", {"n": i}, {}, None, 60.0)
        samples.append((time.perf_counter_ns() - t) / 1000)
    return samples


def _by_mode() -> dict[bool, list[float]]:
    return {False: [], True: []}


@dataclass(frozen=True, slots=True)
class Samples:
    """What ``measure`` saw, by mode (True: sandboxed)."""

    starts: dict[bool, list[float]] = field(default_factory=_by_mode)
    cpus: dict[bool, list[float]] = field(default_factory=_by_mode)
    calls: dict[bool, list[float]] = field(default_factory=_by_mode)


async def measure(settings: Any, registry: Any, python: Path) -> tuple[Samples, Any]:
    """The samples, and the sandboxed worker's confinement (for ``startup_parts``)."""
    got = Samples()
    starts, cpus, calls = got.starts, got.cpus, got.calls
    async with anyio.create_task_group() as tg:
        workers = Workers(settings, registry, python, tg)
        for mode in (False, True):  # untimed: the venv's files in the page cache
            proc, _, _ = await workers.start(mode)
            await proc.stop()
        for i in range(STARTS):
            order = (False, True) if i % 2 == 0 else (True, False)
            for mode in order:
                proc, took, cpu = await workers.start(mode)
                starts[mode].append(took)
                cpus[mode].append(cpu)
                await proc.stop()
        warm = {mode: (await workers.start(mode))[0] for mode in (False, True)}
        for proc in warm.values():
            await noop_us(proc, 0, WARMUP)
        for block in range(CALLS // BLOCK):
            order = (False, True) if block % 2 == 0 else (True, False)
            for mode in order:
                calls[mode] += await noop_us(warm[mode], WARMUP + block * BLOCK, BLOCK)
        for proc in warm.values():
            await proc.stop()
        confinement = workers.confine(PACK, python)
        tg.cancel_scope.cancel()
    return got, confinement


def timed_runs(commands: dict[str, tuple[list[str], dict[str, str]]]) -> dict[str, float]:
    """The median seconds of each command, run ``PROBES`` times, the commands alternating."""
    took: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(PROBES):
        for name, (command, env) in commands.items():
            t = time.perf_counter()
            subprocess.run(command, env=env, check=True, capture_output=True)
            took[name].append(time.perf_counter() - t)
    return {name: median(xs) for name, xs in took.items()}


def startup_parts(python: str, confinement: Any) -> dict[str, float]:
    """Bubblewrap alone and the bare interpreter, each way (see the module docstring)."""
    from inline_registry import apply_env, confined_command
    from inline_registry._sandbox import bwrap_path

    env = dict(os.environ)
    true_cmd, true_env = confined_command(["true"], confinement)
    py_cmd, py_env = confined_command([python, "-c", "pass"], confinement)
    bare = [bwrap_path(), "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent",
            "--new-session", "--cap-drop", "ALL", "true"]  # fmt: skip
    return timed_runs(
        {
            "bwrap_bare_s": (bare, env),
            "bwrap_true_s": (true_cmd, apply_env(env, true_env)),
            "python_s": ([python, "-c", "pass"], env),
            "sandboxed_python_s": (py_cmd, apply_env(env, py_env)),
        }
    )


def main() -> None:
    from inline_registry import load_registry, prepare_env

    settings = bench_settings()
    registry = load_registry(settings.packs_dir, settings.extra_packs)
    python = prepare_env(registry.packs[PACK].env).python  # built first: not part of a start
    t = time.perf_counter()
    got, confinement = anyio.run(measure, settings, registry, python)
    took = time.perf_counter() - t
    parts = startup_parts(str(python), confinement)
    start, sandboxed_start = median(got.starts[False]), median(got.starts[True])
    call, sandboxed_call = median(got.calls[False]), median(got.calls[True])
    print(
        "starts (s), unsandboxed:", [round(x, 3) for x in got.starts[False]],
        "sandboxed:", [round(x, 3) for x in got.starts[True]],
    )  # fmt: skip
    write_result(
        "sandbox",
        {
            "start_s": round(start, 3),
            "sandboxed_start_s": round(sandboxed_start, 3),
            "start_ratio": round(sandboxed_start / start, 2),
            "per_call_us": round(call, 1),
            "sandboxed_per_call_us": round(sandboxed_call, 1),
            "call_ratio": round(sandboxed_call / call, 3),
            "start_overhead_s": round(sandboxed_start - start, 4),
            "start_cpu_s": round(median(got.cpus[False]), 4),
            "sandboxed_start_cpu_s": round(median(got.cpus[True]), 4),
            **{name: round(value, 4) for name, value in parts.items()},
            "runs": {
                "starts": STARTS,
                "calls": CALLS,
                "warmup": WARMUP,
                "block": BLOCK,
                "probes": PROBES,
                "measure_s": round(took, 1),
            },
            "target_start_ratio": START_TARGET,
            "target_call_ratio": CALL_TARGET,
        },
    )


if __name__ == "__main__":
    main()
