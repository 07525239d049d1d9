"""``inline serve``: the /v1 server, with the launcher's flags (``main.py`` and ``webui.sh`` take
the same ones); ``python -m inline_host`` is the same server configured by the environment alone.

The flags are written into the ``INLINE_*`` variables the settings read, then the server runs.
Until then this module needs the standard library only: ``./webui.sh --help`` reads its flags
before the workspace is set up.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any


def _port(raw: str) -> int:
    """A TCP port for ``--port``: 1-65535, or 0 for one the kernel picks."""
    try:
        port = int(raw)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a port: pick 1-65535 (0: any free one)")
    return port


def _gigabytes(raw: str) -> float:
    """A positive number of gigabytes for ``--vram-budget``."""
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{raw!r} is not a size: give GB above 0, e.g. 8 or 11.5")
    return value


def add_server_flags(p: Any) -> None:
    """The server's flags on parser ``p``."""
    p.add_argument(
        "--listen",
        nargs="?",
        const="0.0.0.0",
        metavar="ADDR",
        help="listen beyond loopback (default address 0.0.0.0; requires --token)",
    )
    p.add_argument("--port", type=_port, help="port (default 8848; 0: any free one)")
    p.add_argument(
        "--token",
        help="bearer token every request must carry (visible in `ps`: prefer --token-file or "
        "INLINE_TOKEN)",
    )
    p.add_argument(
        "--token-file", type=Path, metavar="FILE", help="read the bearer token from FILE"
    )
    p.add_argument(
        "--data-dir",
        help="runs, takes, blobs and pack venvs (default ./.inline); one host per data dir",
    )
    p.add_argument("--models-dir", help="model files, ComfyUI layout (default ./models)")
    p.add_argument("--lowvram", action="store_true", help="memory profile 'lowvram'")
    p.add_argument(
        "--smart-memory",
        action="store_true",
        help="let the memory policy fit models automatically (the default)",
    )
    p.add_argument(
        "--vram-budget",
        type=_gigabytes,
        metavar="GB",
        help="cap the VRAM the engine uses (GPUs only)",
    )
    p.add_argument(
        "--multi-gpu",
        action="store_true",
        help="split one image across every GPU by Ulysses whatever the interconnect "
        "(INLINE_PARALLEL=ulysses=<GPUs>; fewer than 2 GPUs is exit 2)",
    )
    p.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run pack workers on the Ray cluster at ADDRESS (INLINE_RAY_ADDRESS); one that "
        "does not answer within INLINE_RAY_CONNECT_TIMEOUT seconds (30) is exit 2",
    )
    p.add_argument(
        "--no-sandbox",
        action="store_true",
        help="run pack workers unsandboxed (INLINE_SANDBOX=off; health says so)",
    )
    p.add_argument(
        "--front-end-root", type=Path, metavar="DIR", help="serve a local SPA build from DIR at /"
    )
    p.add_argument(
        "--install", action="store_true", help="set up every pack's venv, then exit without serving"
    )


def token_of(args: argparse.Namespace) -> str | None:
    """The token: ``--token``, else the first line of ``--token-file`` (kept out of ``ps``)."""
    if args.token_file is None:
        return args.token
    try:
        token = args.token_file.read_text().strip()
    except OSError as exc:
        message = f"error: cannot read --token-file {args.token_file}: {exc.strerror}"
        raise SystemExit(message) from None
    if not token:
        raise SystemExit(f"error: --token-file {args.token_file} is empty")
    return token


def apply_flags(args: argparse.Namespace, env: dict[str, str]) -> None:
    """Write the flags into the environment the engine reads."""
    pairs = {
        "INLINE_HOST": args.listen,
        "INLINE_PORT": None if args.port is None else str(args.port),
        "INLINE_TOKEN": token_of(args),
        "INLINE_DATA_DIR": args.data_dir,
        "INLINE_MODELS_DIR": args.models_dir,
        "INLINE_PROFILE": "lowvram" if args.lowvram else None,
        "INLINE_VRAM_BUDGET_GB": None if args.vram_budget is None else str(args.vram_budget),
        "INLINE_SMART_MEMORY": "1" if args.smart_memory else None,
        "INLINE_RAY_ADDRESS": args.ray,
        "INLINE_SANDBOX": "off" if getattr(args, "no_sandbox", False) else None,
    }
    env.update({k: v for k, v in pairs.items() if v is not None})
    env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")


def run_server(args: argparse.Namespace) -> int:
    """Apply the flags, then serve (or, with ``--install``, set up every pack's venv and exit);
    the exit code."""
    if args.vram_budget is not None:
        from inline_host.workers import probe

        if not probe().gpus:
            print(
                f"error: --vram-budget {args.vram_budget:g}: this machine has no GPU (NVML sees "
                "none), so there is no VRAM to cap: drop the flag (INLINE_RAM_BUDGET_GB caps RAM)",
                file=sys.stderr,
            )
            return 2
    if getattr(args, "multi_gpu", False):
        from inline_host.workers import probe

        gpus = len(probe().gpus)
        if gpus < 2:
            print(
                f"error: --multi-gpu splits one image across GPUs: this machine has {gpus} "
                "(NVML); drop the flag",
                file=sys.stderr,
            )
            return 2
        os.environ["INLINE_PARALLEL"] = f"ulysses={gpus}"
    apply_flags(args, os.environ)  # type: ignore[arg-type]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    # absolute and here: this module is read by main.py with the standard library alone
    from inline_registry import load_registry

    from inline_host._settings import Settings
    from inline_host.api import serve

    settings = Settings.from_env()
    if args.install:
        registry = load_registry(
            settings.packs_dir,
            settings.extra_packs,
            say=lambda m: print(m, file=sys.stderr),
            build=True,
        )
        for name, info in registry.packs.items():
            print(f"{name} {info.version}: {len(info.node_types)} node(s) ready")
        for name, reason in registry.failed.items():
            print(f"{name}: unavailable: {reason}", file=sys.stderr)
        return 1 if registry.failed else 0
    return serve(settings, front_end_root=args.front_end_root)
