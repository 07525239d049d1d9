"""A Context for library calls outside a worker (no host: no broker, nothing reported), shared
by the probes that run as scripts in a pack venv (``from _probe_ctx import probe_context``)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any


def probe_context() -> Any:
    from inline_sdk import Context

    return Context(
        node_type="probe",
        node_id="probe",
        models_dir=Path("."),
        assets_dir=Path("."),
        input_roots=[],
        cwd=Path("."),
        emit_progress=lambda *a: None,
        emit_preview=lambda image: None,
        cancel_event=threading.Event(),
        logger=logging.getLogger("probe"),
    )
