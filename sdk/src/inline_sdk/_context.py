"""The ``Context`` a node receives: progress, previews, cancellation, logging, models and inputs."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ._errors import Cancelled
from ._media import AssetIdRef, AssetRef, Image, PathRef
from ._memory import Memory
from ._protocol import asset_file
from ._state import WorkerCache, WorkerStats


class InputRefused(Exception):
    """Raised when an input reference cannot be honoured (unknown asset, path outside the roots)."""


class SecretMissing(Exception):
    """Raised when a node asks for a secret the host does not hold (``inline secrets set``)."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"The secret '{name}' is not set: store it with 'inline secrets set {name}' "
            "(or name another secret in the node's params)"
        )
        self.name = name


class Context:
    """What a node may ask of the engine while it runs.

    Nodes never choose a device or reach the network through the context; they report progress,
    offer previews, check for cancellation, log, and find models and inputs.
    """

    def __init__(
        self,
        *,
        node_type: str,
        node_id: str,
        models_dir: Path,
        assets_dir: Path,
        input_roots: Sequence[Path],
        cwd: Path,
        emit_progress: Callable[[str, float, str, int | None, int | None], None],
        emit_preview: Callable[[Image], None],
        cancel_event: threading.Event,
        emit_stream: Callable[[str, str], None] | None = None,
        logger: logging.Logger,
        memory: Memory | None = None,
        secrets: Mapping[str, str] | None = None,
        cache: WorkerCache | None = None,
        stats: WorkerStats | None = None,
    ) -> None:
        self.node_type = node_type
        self.node_id = node_id
        self.models_dir = models_dir
        self.log = logger
        #: The worker's memory broker client: libraries ask it where a model goes before loading.
        self.memory = memory if memory is not None else Memory(None)
        #: What this worker keeps between calls (models, batchers): one cache per worker process.
        self.cache = cache if cache is not None else WorkerCache()
        #: Runtime figures the host shows in ``/v1/health`` (``stats.update(section, values)``).
        self.stats = stats if stats is not None else WorkerStats()
        self._assets_dir = assets_dir
        self._input_roots = tuple(input_roots)
        self._cwd = cwd
        self._emit_progress = emit_progress
        self._emit_preview = emit_preview
        self._emit_stream = emit_stream
        self._cancel = cancel_event
        self._secrets = dict(secrets or {})

    # secrets ------------------------------------------------------------------------------
    def secret(self, name: str) -> str:
        """The value of the secret ``name``, which this call's params named (``api_key_secret``).

        The host hands a call only the secrets its params name; anything else raises
        ``SecretMissing``, as does a secret the host does not hold. Never log the value.
        """
        value = self._secrets.get(name)
        if not value:
            raise SecretMissing(name)
        return value

    # progress -----------------------------------------------------------------------------
    def progress(
        self, done: int, total: int, *, phase: str = "sample", status: str | None = None
    ) -> None:
        """Report ``done`` of ``total`` steps of the current phase; also a cancellation point."""
        self.check_cancelled()
        fraction = 0.0 if total <= 0 else min(1.0, max(0.0, done / total))
        text = f"Step {done}/{total}" if status is None else status
        self._emit_progress(phase, fraction, text, done, total)

    def phase(self, phase: str, status: str = "", fraction: float = 0.0) -> None:
        """Enter a phase (``loading``, ``encode``, ``decode``, ``save``...) with a status line."""
        self.check_cancelled()
        self._emit_progress(phase, fraction, status, None, None)

    def preview(self, image: Image | bytes) -> None:
        """Offer a small preview image (PNG bytes) of the work in progress."""
        self._emit_preview(image if isinstance(image, Image) else Image(image))

    def stream(self, port: str, text: str) -> None:
        """Stream ``text`` as the next piece of the ``text`` output ``port`` (tokens as they come).

        Clients see each piece as a ``delta`` event at once, never throttled or dropped. The
        node still returns the whole text as the output's value: what was streamed is a preview of
        it. Also a cancellation point. On a host without streaming this does nothing.
        """
        self.check_cancelled()
        if self._emit_stream is not None:
            self._emit_stream(port, text)

    # cancellation -------------------------------------------------------------------------
    @property
    def cancelled(self) -> bool:
        """Whether the host asked to cancel this call."""
        return self._cancel.is_set()

    def check_cancelled(self) -> None:
        """Raise ``Cancelled`` if the host asked to cancel this call."""
        if self._cancel.is_set():
            raise Cancelled()

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Block until cancelled or ``timeout`` seconds pass; True if cancelled."""
        return self._cancel.wait(timeout)

    # inputs -------------------------------------------------------------------------------
    def resolve_input(self, ref: AssetRef) -> Path:
        """The file an input reference names, refusing paths outside the allowed input roots."""
        if isinstance(ref, AssetIdRef):
            path = asset_file(self._assets_dir, ref.id)
            if path is None:
                raise InputRefused(f"'{ref.id}' is not an asset id (expected sha256-<64 hex>)")
            if not path.is_file():
                raise InputRefused(f"No asset '{ref.id}': upload it first (inline assets add)")
            return path
        assert isinstance(ref, PathRef)
        raw = Path(ref.path)
        path = Path(os.path.realpath(raw if raw.is_absolute() else self._cwd / raw))
        if not any(path.is_relative_to(root) for root in self._input_roots):
            roots = ", ".join(str(r) for r in self._input_roots) or "(none)"
            raise InputRefused(
                f"Path '{ref.path}' is outside the allowed input roots ({roots}); "
                "add its folder to INLINE_INPUT_ROOTS or upload it with 'inline assets add'"
            )
        if not path.is_file():
            raise InputRefused(f"Input file '{ref.path}' does not exist or is not a file")
        return path

    def read_input(self, ref: AssetRef) -> bytes:
        """The bytes of the file an input reference names (see ``resolve_input``)."""
        path = self.resolve_input(ref)
        try:
            return path.read_bytes()
        except OSError as exc:
            raise InputRefused(f"Cannot read input '{path}': {exc.strerror}") from exc
