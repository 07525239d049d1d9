"""A one-off handshake with a pack's worker, to learn and validate its nodes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import msgspec
from inline_sdk import SDK_VERSION, ProtocolError
from inline_sdk.protocol import (
    PROTOCOL,
    FrameCodec,
    FromWorker,
    Hello,
    Refused,
    Shutdown,
    Welcome,
    recv_frame,
)

from ._envs import PackEnv
from ._errors import HandshakeFailed, SdkMismatch
from ._files import write_atomically
from ._sandbox import SandboxUnavailable, probe_confinement
from ._spawn import spawn_worker_sync


def make_hello(
    pack: str,
    *,
    shm_prefix: str,
    models_dir: Path,
    assets_dir: Path,
    input_roots: list[Path],
    threshold: int = 256 * 1024,
) -> Hello:
    """The handshake message a host sends first."""
    return Hello(
        protocol=PROTOCOL,
        host_sdk=SDK_VERSION,
        pack=pack,
        shm_prefix=shm_prefix,
        shm_threshold=threshold,
        models_dir=str(models_dir),
        assets_dir=str(assets_dir),
        input_roots=[str(r) for r in input_roots],
        cwd=os.getcwd(),
    )


def check_welcome(pack: str, welcome: Welcome) -> None:
    """Refuse a worker whose SDK major differs from the host's."""
    if welcome.sdk_version.split(".", 1)[0] != SDK_VERSION.split(".", 1)[0]:
        raise SdkMismatch(pack, welcome.sdk_version, SDK_VERSION)


def probe(env: PackEnv, *, timeout: float = 120.0) -> Welcome:
    """Start the pack's worker, take its handshake, stop it; cache the answer with the env."""
    cached = read_cached_welcome(env)
    if cached is not None:
        return cached
    pack = env.source.name
    scratch = env.root / "probe-scratch"
    try:
        confinement = probe_confinement(pack, env.python.parent.parent, scratch,
                                        first_party=env.source.first_party)  # fmt: skip
    except SandboxUnavailable as exc:
        raise HandshakeFailed(pack, str(exc)) from None
    proc, sock = spawn_worker_sync(env.python, pack, confinement=confinement)
    codec: FrameCodec[Any] = FrameCodec(FromWorker)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            hello = make_hello(
                pack,
                shm_prefix=f"inline-probe-{os.getpid()}-{pack}",
                models_dir=Path(tmp),
                assets_dir=Path(tmp),
                input_roots=[],
            )
            sock.sendall(codec.encode(hello))
            try:
                msg = _recv(sock, codec, timeout)
            except (OSError, TimeoutError) as exc:
                raise HandshakeFailed(pack, f"no answer within {timeout:.0f}s ({exc})") from None
            if msg is None:
                proc.wait(timeout=10)
                stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                tail = "\n".join(stderr.strip().splitlines()[-20:])
                raise HandshakeFailed(pack, f"worker exited with code {proc.returncode}", tail)
            if isinstance(msg, Refused):
                raise HandshakeFailed(pack, msg.error.message, msg.error.traceback)
            if not isinstance(msg, Welcome):
                raise HandshakeFailed(pack, f"unexpected {type(msg).__name__} instead of welcome")
            check_welcome(pack, msg)
            sock.sendall(codec.encode(Shutdown()))
    finally:
        sock.close()
        try:
            proc.wait(timeout=10)
        except Exception:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
    write_atomically(env.descriptors_file, msgspec.json.encode(msg))
    return msg


def read_cached_welcome(env: PackEnv) -> Welcome | None:
    """The handshake cached for this exact env, if any (no worker needed)."""
    try:
        return msgspec.json.decode(env.descriptors_file.read_bytes(), type=Welcome)
    except (FileNotFoundError, msgspec.DecodeError):
        return None


def _recv(sock: Any, codec: FrameCodec[Any], timeout: float) -> Any:
    """One frame, or None if the worker closed the socket (it died or refused to talk)."""
    sock.settimeout(timeout)
    try:
        return recv_frame(sock, codec)
    except ProtocolError:
        return None
