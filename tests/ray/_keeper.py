"""Keeps a test Ray cluster: starts its nodes, and on EOF of stdin stops every process they
started (and nothing else).

It makes itself a child subreaper (``PR_SET_CHILD_SUBREAPER``), so the daemons ``ray start``
leaves behind are re-parented to it: its descendants are exactly the cluster's processes, and
stopping them is stopping the PIDs this run started. Usage::

    python _keeper.py '<json: list of ray start argument lists>'

The first list starts the head (``--head``), or joins a running cluster (``--address ADDR``).

It prints ``ADDRESS <head address>`` once the head is up, then ``READY`` once every node is.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil

_PR_SET_CHILD_SUBREAPER = 36
ATTEMPTS = 3
_ADDRESS = re.compile(r"ray start --address='([0-9.]+:[0-9]+)'")


def _reap_forever() -> None:
    """Collect the exit status of re-parented daemons as they end (no zombies)."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            threading.Event().wait(0.5)  # bounded idle: nothing to reap right now


def _stop_all() -> None:
    me = psutil.Process()
    victims = me.children(recursive=True)
    for p in victims:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()
    _, alive = psutil.wait_procs(victims, timeout=15)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive, timeout=10)


def start_nodes(ray: str, nodes: list[list[str]]) -> str:
    """Start every node; the head's address, or ``FAILED ...`` (what ``ray start`` said)."""
    address = ""
    for i, args in enumerate(nodes):
        if "--address" in args:  # a node joining a running cluster: it names the head
            address = args[args.index("--address") + 1]
        elif address:
            args = ["--address", address, *args]
        out = subprocess.run(
            [ray, "start", *args],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=300,
        )
        said = out.stdout + out.stderr
        if out.returncode != 0:
            return f"FAILED node {i}: " + said[-3000:].replace("\n", "\\n")
        if i == 0 and "--head" in args:
            m = _ADDRESS.search(said)
            if m is None:
                return "FAILED no head address in ray start's output"
            address = m.group(1)
    return address


def main() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1) != 0:
        print("FAILED cannot become a child subreaper", flush=True)
        return 1
    signal.signal(signal.SIGTERM, lambda *_: (_stop_all(), os._exit(0)))
    nodes: list[list[str]] = json.loads(sys.argv[1])
    ray = str(Path(sys.executable).with_name("ray"))
    result = ""
    try:
        # Ray gives a starting node a fixed 30 s to register; on a loaded machine it can miss
        # that, so the whole cluster is started again (a bounded number of times)
        for attempt in range(ATTEMPTS):
            result = start_nodes(ray, nodes)
            if not result.startswith("FAILED"):
                break
            print(f"attempt {attempt + 1}: {result[:2000]}", file=sys.stderr, flush=True)
            _stop_all()
    except BaseException:
        _stop_all()
        raise
    if result.startswith("FAILED"):
        print(result, flush=True)
        return 1
    print(f"ADDRESS {result}", flush=True)
    threading.Thread(target=_reap_forever, daemon=True).start()
    print("READY", flush=True)
    sys.stdin.read()  # until the test closes our stdin (or dies)
    _stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
