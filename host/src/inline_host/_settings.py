"""Host settings, from ``INLINE_*`` environment variables with embedded defaults."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, got {raw!r}") from None


@dataclass(frozen=True, slots=True)
class Settings:
    """Where the host keeps its data and how long it waits for workers."""

    data_dir: Path
    models_dir: Path
    input_roots: tuple[Path, ...]
    call_timeout: float = 3600.0
    start_timeout: float = 120.0
    cancel_grace: float = 10.0
    #: Seconds a worker may sit without a call before it is stopped (0: never).
    worker_idle: float = 600.0
    cache_entries: int = 256
    extra_packs: tuple[Path, ...] = field(default=())
    extra_models_dirs: tuple[Path, ...] = field(default=())
    cwd: Path = field(default_factory=Path.cwd)
    host: str = "127.0.0.1"
    port: int = 8848
    token: str | None = None
    max_upload_bytes: int = 1 << 30

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
            worker_idle=_float(env, "INLINE_WORKER_IDLE", 600.0),
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
