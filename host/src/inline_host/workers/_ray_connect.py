"""Joining the Ray cluster within a deadline: a wrong ``--ray ADDRESS`` is one line, not a hang.

``ray.init`` against an address nobody answers on does not fail: it retries for minutes,
printing a warning every 5 s, in a call that cannot be interrupted. So the host first dials the
address (a TCP connect with the deadline: refused or unroutable addresses fail here, at once),
then runs ``ray.init`` in a daemon thread and waits for it no longer than the rest of the
deadline (``INLINE_RAY_CONNECT_TIMEOUT``). A join that outlives it is abandoned: the thread
cannot hold the process up (it is a daemon) and a later join waits on that same attempt
instead of starting a second ``ray.init`` beside it (Ray's driver is one per process).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ._launcher import LaunchFailed


class RayUnreachable(LaunchFailed):
    """The Ray cluster at the configured address did not answer, or refused the driver."""

    def __init__(self, address: str, reason: str) -> None:
        self.address = address
        self.reason = reason
        super().__init__(
            f"could not join the Ray cluster at {address}: {reason} "
            "(check --ray ADDRESS / INLINE_RAY_ADDRESS; `ray status` on a node shows the address)"
        )


@dataclass(slots=True)
class _Attempt:
    """One ``ray.init`` running in its thread."""

    address: str
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


#: Ray's driver is process-wide state, so the attempt to start it is too: at most one at a time.
_guard = threading.Lock()
_current: list[_Attempt] = []


class _OffMainThread(logging.Filter):
    """Drops Ray's warning that a driver started off the main thread sets no SIGTERM handler:
    that is on purpose (the host's own handlers stay in charge)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("SIGTERM handler is not set")


_QUIET = _OffMainThread()


def import_ray() -> Any:
    """The ``ray`` module, or ``LaunchFailed`` saying how to install it.

    Ray's automatic ``ray.init()`` is turned off: a Ray call made when this process is no
    driver (a Serve router's metrics thread after the host left the cluster) would start a
    local cluster of its own, a side effect the host never wants; it fails instead.
    """
    os.environ.setdefault("RAY_ENABLE_AUTO_CONNECT", "0")  # read when ray is first imported
    try:
        import ray
    except ImportError:
        raise LaunchFailed(
            "INLINE_RAY_ADDRESS is set but Ray is not installed: install inline-host[ray]"
        ) from None
    with contextlib.suppress(ImportError, AttributeError):  # imported before: turned off here
        from ray._private import auto_init_hook

        auto_init_hook.enable_auto_connect = False
    return ray


def gcs_endpoint(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``host:port``, ``[v6]:port`` or ``ray://host:port``; None for what
    names no endpoint (``auto``, a bare host)."""
    rest = address.strip().removeprefix("ray://")
    host, colon, port = rest.rpartition(":")
    host = host.strip("[]")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host, int(port)


def probe(address: str, timeout: float) -> None:
    """Dial ``address`` once within ``timeout``; ``RayUnreachable`` when nothing answers."""
    endpoint = gcs_endpoint(address)
    if endpoint is None:
        return  # nothing to dial: ray.init's own bounded wait decides
    try:
        with socket.create_connection(endpoint, timeout=max(timeout, 0.001)):
            pass
    except TimeoutError:
        raise RayUnreachable(address, f"nothing answered within {timeout:g}s") from None
    except OSError as exc:
        raise RayUnreachable(address, (exc.strerror or str(exc)).lower()) from None


def ray_init_kwargs(address: str) -> dict[str, Any]:
    """``ray.init``'s arguments for a driver of the cluster at ``address``."""
    kwargs: dict[str, Any] = {
        "address": address,
        "namespace": "inline",
        "log_to_driver": False,
        "configure_logging": False,
    }
    endpoint = gcs_endpoint(address)
    if endpoint is not None:
        with contextlib.suppress(ValueError):
            if ipaddress.ip_address(endpoint[0]).is_loopback:
                kwargs["_node_ip_address"] = endpoint[0]  # a cluster on this machine's loopback
    return kwargs


def _run(ray: Any, attempt: _Attempt) -> None:
    logging.getLogger("ray._private.worker").addFilter(_QUIET)
    try:
        if not ray.is_initialized():
            ray.init(**ray_init_kwargs(attempt.address))
    except BaseException as exc:  # reported to whoever waits; nothing else can catch it here
        attempt.error = exc
    finally:
        attempt.done.set()


def _reason(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return " ".join(lines[:4])[:400] or type(exc).__name__


def join_cluster(address: str, timeout: float) -> Any:
    """Make this process a driver of the cluster at ``address`` within ``timeout`` seconds;
    the ``ray`` module. ``RayUnreachable`` when the cluster does not answer in time."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    deadline = time.monotonic() + timeout
    probe(address, timeout)
    with _guard:
        if not _current or _current[0].done.is_set():
            _current[:] = [_Attempt(address)]
            threading.Thread(
                target=_run, args=(ray, _current[0]), name="inline-ray-join", daemon=True
            ).start()
        attempt = _current[0]
    if not attempt.done.wait(max(0.0, deadline - time.monotonic())):
        raise RayUnreachable(address, f"no answer within {timeout:g}s (INLINE_RAY_CONNECT_TIMEOUT)")
    if attempt.error is not None:
        raise RayUnreachable(address, _reason(attempt.error))
    return ray
