"""Host settings, from ``INLINE_*`` environment variables with embedded defaults.

This is the one place the host reads ``INLINE_*`` variables; everything else takes ``Settings``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def _float(env: Mapping[str, str], name: str, default: float, unit: str = "seconds") -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number of {unit}, got {raw!r}") from None


def _positive(env: Mapping[str, str], name: str, default: float) -> float:
    value = _float(env, name, default)
    if not value > 0:
        raise ValueError(f"{name} must be a number of seconds above 0, got {env.get(name)!r}")
    return value


def _int(env: Mapping[str, str], name: str, default: int, least: int = 1) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {raw!r}") from None
    if value < least:
        raise ValueError(f"{name} must be at least {least}, got {value}")
    return value


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    value = (env.get(name) or "").strip().lower() or default
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {env.get(name)!r}")
    return value


def _list(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    return tuple(g.strip() for g in env.get(name, "").split(",") if g.strip())


def _gb(env: Mapping[str, str], name: str) -> float | None:
    raw = env.get(name)
    return None if not raw else _float(env, name, 0.0, "GB")


def _ray_resources(raw: str) -> dict[str, dict[str, float]]:
    """``pack=resource:amount`` entries, comma-separated (a pack may repeat, one per resource)."""
    out: dict[str, dict[str, float]] = {}
    for entry in (e.strip() for e in raw.split(",")):
        if not entry:
            continue
        pack, eq, rest = entry.partition("=")
        name, colon, amount = rest.rpartition(":")
        if not colon:
            name = rest
        try:
            value = float(amount) if colon else 1.0
        except ValueError:
            value = -1.0
        if not eq or not pack.strip() or not name.strip() or value <= 0:
            raise ValueError(
                "INLINE_RAY_RESOURCES entries are pack=resource:amount (amount > 0), "
                f"comma-separated; got {entry!r}"
            )
        out.setdefault(pack.strip(), {})[name.strip()] = value
    return out


@dataclass(frozen=True, slots=True)
class Settings:
    """Where the host keeps its data and how long it waits for workers."""

    data_dir: Path
    models_dir: Path
    input_roots: tuple[Path, ...]
    call_timeout: float = 3600.0
    start_timeout: float = 120.0
    cancel_grace: float = 10.0
    #: Seconds the other calls in flight get to end on their own once a node of their run failed
    #: (so every independent failure is reported), before they are cancelled.
    sibling_grace: float = 2.0
    #: Seconds a worker may sit without a call before it is stopped (0: never).
    worker_idle: float = 600.0
    cache_entries: int = 256
    extra_packs: tuple[Path, ...] = field(default=())
    extra_models_dirs: tuple[Path, ...] = field(default=())
    #: ``INLINE_SANDBOX``: ``auto`` (sandbox every worker where bubblewrap works), ``off``,
    #: ``required`` (refuse a worker that cannot be sandboxed).
    sandbox: str = "auto"
    #: ``INLINE_SANDBOX_READ``: more folders a sandboxed worker may read (``:``-separated).
    sandbox_read: tuple[Path, ...] = field(default=())
    cwd: Path = field(default_factory=Path.cwd)
    host: str = "127.0.0.1"
    port: int = 8848
    token: str | None = None
    max_upload_bytes: int = 1 << 30
    #: Runs executing at once (``INLINE_MAX_RUNS``); more wait in the queue.
    max_runs: int = 8
    #: Where workers run: ``local`` (socketpair) or ``tcp`` (loopback TCP, no shared memory).
    launcher: str = "local"
    #: Echo workers' stderr to the host's (``INLINE_WORKER_ECHO=1``).
    worker_echo: bool = False
    #: Memory policy profile (``INLINE_PROFILE``); None picks by the hardware.
    profile: str | None = None
    vram_budget_gb: float | None = None
    ram_budget_gb: float | None = None
    #: Globs every Hugging Face import skips besides the task's defaults (``INLINE_HF_IGNORE``).
    hf_ignore: tuple[str, ...] = ()
    #: Hosted text model ids to list (``INLINE_HOSTED_MODELS``); empty: the defaults.
    hosted_models: tuple[str, ...] = ()
    #: Show remote tracebacks for users' mistakes too (``INLINE_DEBUG=1``; ``inline --debug``).
    debug: bool = False
    #: Extra names ``Host`` may carry (``INLINE_ALLOWED_HOSTS``, comma-separated; ``*``: any).
    allowed_hosts: tuple[str, ...] = field(default=())
    #: The largest output a node may return (``INLINE_MAX_OUTPUT_MB``).
    max_output_bytes: int = 2048 << 20
    #: Runs that may wait in the queue (``INLINE_MAX_QUEUED``); past it, submits get 429.
    max_queued: int = 1000
    #: The multi-GPU split (``INLINE_PARALLEL``: auto, off, ``ulysses=2,ring=2``...).
    parallel: str | None = None
    #: Where explicit ``INLINE_PARALLEL`` degrees run (``INLINE_PARALLEL_DEVICE``): unset, the
    #: GPUs (as many as the degrees ask for, else refused at start); ``cpu``: CPU ranks (gloo).
    parallel_device: str | None = None
    #: A Ray cluster to run pack workers on (``INLINE_RAY_ADDRESS``); None: this machine.
    ray_address: str | None = None
    #: Custom Ray resources per pack (``INLINE_RAY_RESOURCES=zimage=gpu_node:1,...``).
    ray_resources: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    #: The address cluster nodes dial the host on (``INLINE_RAY_HOST_ADDRESS``; default: the
    #: host's Ray node address).
    ray_host_address: str | None = None
    #: Where actors build pack venvs on their node (``INLINE_RAY_PACKS_DIR``; default: the
    #: host's packs dir, the same path on every node).
    ray_packs_dir: Path | None = None
    #: Where cluster workers read models on their node (``INLINE_RAY_MODELS_DIR``); None: the
    #: host's models dirs, at the same paths. A deployment's model a node lacks is fetched there
    #: from the host.
    ray_models_dir: Path | None = None
    #: Seconds the host waits for the Ray cluster to answer at start
    #: (``INLINE_RAY_CONNECT_TIMEOUT``); past it the host exits 2 without serving.
    ray_connect_timeout: float = 30.0
    #: Seconds a request's headers may take to arrive (``INLINE_HEADER_TIMEOUT``); then 408.
    header_timeout: float = 10.0
    #: Seconds a request body may go without a byte (``INLINE_BODY_TIMEOUT``); then 408.
    body_timeout: float = 30.0
    #: Connections one client address may hold open (``INLINE_MAX_CONNECTIONS_PER_CLIENT``).
    max_connections_per_client: int = 64
    #: Downloads running at once (``INLINE_MAX_DOWNLOADS``); more wait, ``queued``.
    max_downloads: int = 2
    #: Seconds a Hub request may go without a byte (``INLINE_HUB_TIMEOUT``); a metadata file
    #: (``config.json``, a safetensors header) must arrive whole within it.
    hub_timeout: float = 60.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Settings from ``INLINE_*`` variables (embedded defaults: ./.inline, ./models)."""
        env = os.environ if env is None else env
        cwd = Path.cwd()
        data_dir = Path(env.get("INLINE_DATA_DIR") or cwd / ".inline").absolute()
        models_dir = Path(env.get("INLINE_MODELS_DIR") or cwd / "models").absolute()
        roots_raw = env.get("INLINE_INPUT_ROOTS")
        if roots_raw:
            roots = tuple(Path(p).absolute() for p in roots_raw.split(os.pathsep) if p)
        else:
            roots = (cwd, data_dir / "inputs", Path.home())
        extra_models = tuple(
            Path(p).absolute()
            for p in env.get("INLINE_EXTRA_MODELS_DIRS", "").split(os.pathsep)
            if p
        )
        try:
            port = int(env.get("INLINE_PORT") or 8848)
        except ValueError:
            port = 8848  # the contract: a non-numeric port falls back to 8848
        return cls(
            cwd=cwd,
            host=env.get("INLINE_HOST") or "127.0.0.1",
            port=port,
            token=env.get("INLINE_TOKEN") or None,
            max_upload_bytes=int(_float(env, "INLINE_MAX_UPLOAD_MB", 1024) * 1024 * 1024),
            extra_models_dirs=extra_models,
            data_dir=data_dir,
            models_dir=models_dir,
            input_roots=tuple(Path(os.path.realpath(r)) for r in roots),
            call_timeout=_float(env, "INLINE_CALL_TIMEOUT", 3600.0),
            start_timeout=_float(env, "INLINE_WORKER_START_TIMEOUT", 120.0),
            cancel_grace=_float(env, "INLINE_CANCEL_GRACE", 10.0),
            sibling_grace=_float(env, "INLINE_SIBLING_GRACE", 2.0),
            worker_idle=_float(env, "INLINE_WORKER_IDLE", 600.0),
            max_runs=_int(env, "INLINE_MAX_RUNS", 8),
            launcher=env.get("INLINE_LAUNCHER") or "local",
            worker_echo=env.get("INLINE_WORKER_ECHO") == "1",
            profile=env.get("INLINE_PROFILE") or None,
            vram_budget_gb=_gb(env, "INLINE_VRAM_BUDGET_GB"),
            ram_budget_gb=_gb(env, "INLINE_RAM_BUDGET_GB"),
            hf_ignore=_list(env, "INLINE_HF_IGNORE"),
            hosted_models=_list(env, "INLINE_HOSTED_MODELS"),
            debug=env.get("INLINE_DEBUG") == "1",
            allowed_hosts=tuple(
                h.strip() for h in env.get("INLINE_ALLOWED_HOSTS", "").split(",") if h.strip()
            ),
            max_output_bytes=int(_float(env, "INLINE_MAX_OUTPUT_MB", 2048, "MB") * 1024 * 1024),
            max_queued=_int(env, "INLINE_MAX_QUEUED", 1000),
            parallel=env.get("INLINE_PARALLEL") or None,
            parallel_device=env.get("INLINE_PARALLEL_DEVICE") or None,
            ray_address=env.get("INLINE_RAY_ADDRESS") or None,
            ray_resources=_ray_resources(env.get("INLINE_RAY_RESOURCES") or ""),
            ray_host_address=env.get("INLINE_RAY_HOST_ADDRESS") or None,
            ray_packs_dir=(
                Path(env["INLINE_RAY_PACKS_DIR"]).absolute()
                if env.get("INLINE_RAY_PACKS_DIR")
                else None
            ),
            ray_models_dir=(
                Path(env["INLINE_RAY_MODELS_DIR"]).absolute()
                if env.get("INLINE_RAY_MODELS_DIR")
                else None
            ),
            ray_connect_timeout=_float(env, "INLINE_RAY_CONNECT_TIMEOUT", 30.0),
            header_timeout=_positive(env, "INLINE_HEADER_TIMEOUT", 10.0),
            body_timeout=_positive(env, "INLINE_BODY_TIMEOUT", 30.0),
            max_connections_per_client=_int(env, "INLINE_MAX_CONNECTIONS_PER_CLIENT", 64),
            max_downloads=_int(env, "INLINE_MAX_DOWNLOADS", 2),
            hub_timeout=_positive(env, "INLINE_HUB_TIMEOUT", 60.0),
            sandbox=_choice(env, "INLINE_SANDBOX", ("auto", "off", "required"), "auto"),
            sandbox_read=tuple(
                Path(p).absolute()
                for p in env.get("INLINE_SANDBOX_READ", "").split(os.pathsep)
                if p
            ),
        )

    @property
    def db_path(self) -> Path:
        """The run store."""
        return self.data_dir / "inline.db"

    @property
    def models_roots(self) -> tuple[Path, ...]:
        """The writable models dir first, then ``./models`` if different, then the extra ones."""
        roots = [self.models_dir]
        local = Path.cwd() / "models"
        if local.is_dir() and local.absolute() != self.models_dir:
            roots.append(local.absolute())
        roots.extend(d for d in self.extra_models_dirs if d not in roots)
        return tuple(roots)

    @property
    def packs_dir(self) -> Path:
        """Where pack venvs live."""
        return self.data_dir / "packs"

    @property
    def blobs_dir(self) -> Path:
        """Where content-addressed blobs live."""
        return self.data_dir / "blobs"

    @property
    def logs_dir(self) -> Path:
        """Where worker logs are written."""
        return self.data_dir / "logs"


def versions() -> dict[str, Any]:
    """The engine's, the SDK's and the protocol's versions."""
    from importlib import metadata

    from inline_sdk import SDK_VERSION
    from inline_sdk.protocol import PROTOCOL

    try:
        engine = metadata.version("inline-host")
    except metadata.PackageNotFoundError:
        engine = "0+unknown"
    return {"engine": engine, "sdk": SDK_VERSION, "protocol": PROTOCOL}
