"""Running the /v1 server with uvicorn.

Before anything is resumed or served, the server takes its data dir's lock (one host per data
dir: ``guard._datadir``) and, with ``INLINE_RAY_ADDRESS``, joins the Ray cluster within
``INLINE_RAY_CONNECT_TIMEOUT``; either failing is one line and exit 2. Connections are served by
``guard.GuardedH11``: deadlines for headers and bodies, and a cap per client address.
"""

from __future__ import annotations

import errno
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .._settings import Settings
from ..guard import DataDirBusy, DataDirLock, SlowLimits, guarded_h11, lock_data_dir

if TYPE_CHECKING:
    from litestar import Litestar


def serve(settings: Settings | None = None, *, front_end_root: Path | None = None) -> int:
    """Serve until interrupted; exit status (2: the address cannot be bound, the data dir is
    another host's, the Ray cluster does not answer, INLINE_PARALLEL does not match the GPUs,
    or bad flags)."""
    from . import InsecureBind, create_app

    settings = settings or Settings.from_env()
    if front_end_root is not None and not (front_end_root / "index.html").is_file():
        what = "has no index.html" if front_end_root.is_dir() else "is not a folder"
        print(f"error: --front-end-root {front_end_root} {what}", file=sys.stderr)
        return 2
    problem = parallel_problem(settings)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        app = create_app(settings, front_end_root=front_end_root)
    except InsecureBind as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        lock = lock_data_dir(settings.data_dir, settings.port)
    except DataDirBusy as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        problem = exc.strerror or str(exc)
        print(f"error: cannot lock the data dir {settings.data_dir}: {problem}", file=sys.stderr)
        return 2
    with lock:
        return _serve_locked(app, settings, lock)


def _serve_locked(app: Litestar, settings: Settings, lock: DataDirLock) -> int:
    """Join Ray (if asked), bind and serve, holding the data dir's lock."""
    import uvicorn

    problem = join_ray(settings)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        sock = bind(settings.host, settings.port)
    except OverflowError:
        print(f"error: INLINE_PORT {settings.port} is not a port: pick 1-65535", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {bind_problem(settings.host, settings.port, exc)}", file=sys.stderr)
        return 2
    port = int(sock.getsockname()[1])
    if port != settings.port:
        lock.record(port)  # INLINE_PORT=0: name the port the kernel picked
    print(f"Inline serving /v1 on http://{settings.host}:{port}", file=sys.stderr)
    config = uvicorn.Config(
        app,
        log_level="warning",
        http=guarded_h11(
            SlowLimits(
                header_timeout=settings.header_timeout,
                body_timeout=settings.body_timeout,
                per_client=settings.max_connections_per_client,
            )
        ),
        ws="websockets-sansio",
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def parallel_problem(settings: Settings) -> str | None:
    """``INLINE_PARALLEL`` degrees this machine's GPUs do not match (one line), else None."""
    if not settings.parallel:
        return None
    from ..workers import parallel_problem as problem_of
    from ..workers import probe

    return problem_of(settings.parallel, probe(), settings.parallel_device)


def join_ray(settings: Settings) -> str | None:
    """With ``INLINE_RAY_ADDRESS``, make this process a driver of that cluster now, within
    ``settings.ray_connect_timeout``: None, or one line saying why it could not."""
    if not settings.ray_address:
        return None
    from ..workers import LaunchFailed, join_cluster  # Ray is imported on joining only

    try:
        join_cluster(settings.ray_address, settings.ray_connect_timeout)
    except LaunchFailed as exc:
        return str(exc)
    except KeyboardInterrupt:
        return f"interrupted while joining the Ray cluster at {settings.ray_address}"
    return None


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (bound here, so a taken port is known before
    anything claims to serve); uvicorn serves on it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def bind_problem(host: str, port: int, exc: OSError) -> str:
    """One line saying why ``host:port`` cannot be served, and what to do."""
    if exc.errno == errno.EADDRINUSE:
        return (
            f"port {port} on {host} is already in use (another Inline running?): "
            "pick another with --port N (or INLINE_PORT)"
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"port {port} on {host} needs privileges: pick one above 1024 with --port N"
    return f"cannot listen on {host}:{port}: {exc.strerror or exc}"
