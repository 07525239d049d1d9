"""Running the /v1 server with uvicorn."""

from __future__ import annotations

import errno
import socket
import sys
from pathlib import Path

from .._settings import Settings


def serve(settings: Settings | None = None, *, front_end_root: Path | None = None) -> int:
    """Serve until interrupted; exit status (2: the address cannot be bound, or bad flags)."""
    import uvicorn

    from . import InsecureBind, create_app

    settings = settings or Settings.from_env()
    if front_end_root is not None and not (front_end_root / "index.html").is_file():
        what = "has no index.html" if front_end_root.is_dir() else "is not a folder"
        print(f"error: --front-end-root {front_end_root} {what}", file=sys.stderr)
        return 2
    try:
        app = create_app(settings, front_end_root=front_end_root)
    except InsecureBind as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        sock = bind(settings.host, settings.port)
    except OSError as exc:
        print(f"error: {bind_problem(settings.host, settings.port, exc)}", file=sys.stderr)
        return 2
    print(f"Inline serving /v1 on http://{settings.host}:{settings.port}", file=sys.stderr)
    config = uvicorn.Config(
        app,
        log_level="warning",
        ws="websockets-sansio",
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (bound here, so a taken port is known before
    anything claims to serve); uvicorn serves on it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
        sock.set_inheritable(True)
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
