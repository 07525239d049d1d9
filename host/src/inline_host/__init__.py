"""The Inline host: pack workers, durable runs, the /v1 API and the ``inline`` command.

Built in floors, each folder importing only the faces (``__init__``) of the folders below it
(``tests/test_layers.py`` keeps it so), bottom first:

- base: ``_settings``, ``_errors``, ``_values`` (what the host holds of a worker's values);
- ``comfyui`` (the pure workflow converter) and ``assets`` (what an upload may be);
- ``guard``: the HTTP guard, the token check, limits, the data dir's lock;
- ``workers``: pack processes, the launcher seam and the one place that picks a launcher, Ray;
- ``models``: the models dir's catalogs and the fit answer;
- ``runs`` (the engine, the run service behind the store's gate, events, takes) and ``hub``
  (importers, fetching files, downloads, secrets);
- ``packs``: installing, upgrading and rolling back packs while serving;
- ``api``: every HTTP route (/v1, /openai/v1, ComfyUI import, downloads, health); it wires the
  server's objects together;
- ``cli``: every ``inline`` command; it wires a command's objects together.
"""

from ._errors import (
    BlobError,
    CallCancelled,
    CallTimedOut,
    InlineHostError,
    NodeError,
    PackCrashed,
    PackError,
    PackStartFailed,
)
from ._settings import Settings
from ._values import HostValue
from .packs import PackService
from .runs import BlobStore, Engine, PackExecutor, RunResult
from .workers import Supervisor, WorkerProcess

__all__ = (
    "BlobError",
    "BlobStore",
    "CallCancelled",
    "CallTimedOut",
    "Engine",
    "HostValue",
    "InlineHostError",
    "NodeError",
    "PackCrashed",
    "PackError",
    "PackExecutor",
    "PackService",
    "PackStartFailed",
    "RunResult",
    "Settings",
    "Supervisor",
    "WorkerProcess",
)
