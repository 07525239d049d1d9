"""Running the /v1 server with uvicorn."""

from __future__ import annotations

import sys
from pathlib import Path

from .._settings import Settings


def serve(settings: Settings | None = None, *, front_end_root: Path | None = None) -> int:
    """Serve until interrupted; exit status."""
    import uvicorn

    from . import InsecureBind, create_app

    settings = settings or Settings.from_env()
    try:
        app = create_app(settings, front_end_root=front_end_root)
    except InsecureBind as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"Inline serving /v1 on http://{settings.host}:{settings.port}", file=sys.stderr)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level="warning",
        ws="websockets-sansio",
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    return 0
