"""The sandbox a pack's worker runs in: bubblewrap (``bwrap``) on Linux.

Inside, the worker sees:

- read-only: ``/usr`` and the system's library links, the few files of ``/etc`` a program
  needs (the loader's cache, time zone, users, CA certificates; name resolution only with the
  network), ``/sys``, Python's own install, its venv (at ``/inline/venv``: never the host's
  data dir it lives in), and the folders it is given (the models dirs, input roots);
- read-write: a scratch folder of the pack's own at ``/inline/scratch`` (its ``HOME``,
  ``HF_HOME``, caches) and ``/tmp`` (also the pack's own, under its scratch), nothing else;
- a ``/proc`` of its own PID namespace (no other process, nor its environment, is visible),
  a minimal ``/dev`` and the GPUs it is placed on, and a ``/dev/shm`` of its own: the folder
  ``Confinement.shm`` (where its bulk bytes go, which the host reads there), or an empty
  one; never the machine's, where other workers' segments and the host's lie;
- no network (a namespace with only its own loopback) unless its manifest says
  ``network = true``; no capabilities, its own session, and it dies with the host.

Descriptors the worker is handed (its socket's end) pass through.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

#: Where a worker sees its venv and its scratch.
VENV: Final = Path("/inline/venv")
SCRATCH: Final = Path("/inline/scratch")
#: ``/etc`` entries bound read-only when they exist.
ETC: Final = (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "passwd", "group",
    "nsswitch.conf", "ssl", "ca-certificates", "ca-certificates.conf", "pki", "mime.types",
    "fonts", "alternatives",
)  # fmt: skip
#: ... and these with the network.
ETC_NETWORK: Final = ("resolv.conf", "hosts", "host.conf", "gai.conf", "services", "protocols")
#: Top-level links or folders a merged-/usr system has.
SYSTEM_LINKS: Final = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
#: The device nodes of GPUs (NVIDIA, and DRM for the others).
GPU_DEVICES: Final = ("/dev/nvidia*", "/dev/nvidia-caps", "/dev/dri", "/dev/kfd")


class SandboxUnavailable(RuntimeError):
    """This machine cannot sandbox a worker (the message says why and what to do)."""


@dataclass(frozen=True, slots=True)
class Confinement:
    """What one worker may reach (see the module docstring)."""

    #: The pack's venv (mounted read-only at ``VENV``).
    venv: Path
    #: The pack's own scratch folder (read-write at ``SCRATCH``; made when missing).
    scratch: Path
    #: Folders the worker reads, at their own paths (models dirs, input roots).
    read_only: tuple[Path, ...] = ()
    #: Folders hidden (an empty tmpfs over them) where a read-only folder holds them.
    masked: tuple[Path, ...] = ()
    #: Folders of a masked one bound back read-only.
    reopened: tuple[Path, ...] = ()
    network: bool = False
    gpus: bool = True
    #: The folder the worker sees as ``/dev/shm`` (read-write); None: an empty one.
    shm: Path | None = None
    #: Extra variables of the worker's environment.
    env: Mapping[str, str] = field(default_factory=dict)


def _works(bwrap: str) -> str | None:
    """None when ``bwrap`` runs a process in new namespaces here; else what it said."""
    try:
        proc = subprocess.run(
            [bwrap, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent",
             "--new-session", "--cap-drop", "ALL", "true"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    return None if proc.returncode == 0 else (proc.stderr.strip() or f"exit {proc.returncode}")


@functools.cache
def bwrap_path() -> str:
    """The ``bwrap`` that works here; ``SandboxUnavailable`` when there is none (once per
    process: the answer is kept)."""
    found = shutil.which("bwrap")
    if found is None:
        raise SandboxUnavailable(
            "bubblewrap (bwrap) is not installed: install it (apt install bubblewrap)"
        )
    problem = _works(found)
    if problem is not None:
        raise SandboxUnavailable(
            f"bubblewrap cannot create namespaces here ({problem.splitlines()[0]}): user "
            "namespaces may be switched off (kernel.unprivileged_userns_clone, AppArmor)"
        )
    return found


def sandbox_problem() -> str | None:
    """Why this machine cannot sandbox workers, or None when it can."""
    try:
        bwrap_path()
    except SandboxUnavailable as exc:
        return str(exc)
    return None


def python_home(venv: Path) -> Path | None:
    """The install a venv's interpreter comes from (``home`` in ``pyvenv.cfg``, one up)."""
    try:
        lines = (venv / "pyvenv.cfg").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            home = Path(value.strip()).resolve()
            return home.parent if home.name == "bin" else home
    return None


def venv_sources(venv: Path) -> list[Path]:
    """The folders a venv's ``.pth`` files add to its path (editable installs), which its
    interpreter must read too."""
    out: list[Path] = []
    for pth in sorted(venv.glob("lib/python3*/site-packages/*.pth")):
        try:
            lines = pth.read_text().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for line in lines:
            line = line.strip()
            if line.startswith("/") and Path(line).is_dir():
                out.append(Path(line).resolve())
    return out


def _bind_args(flag: str, paths: Sequence[Path]) -> list[str]:
    out: list[str] = []
    seen: set[str] = set()
    for p in paths:
        if str(p) not in seen and p.exists():
            seen.add(str(p))
            out += [flag, str(p), str(p)]
    return out


def confined_command(command: Sequence[str], c: Confinement) -> tuple[list[str], dict[str, str]]:
    """``command`` (``<venv>/bin/python ...``) as bwrap runs it inside ``c``, and the
    variables its environment gets (or loses: an empty value is dropped)."""
    bwrap = bwrap_path()
    venv = c.venv.resolve()
    scratch = c.scratch
    (scratch / "tmp").mkdir(parents=True, exist_ok=True)
    args = [bwrap, "--die-with-parent", "--new-session", "--unshare-all", "--cap-drop", "ALL"]
    if c.network:
        args.append("--share-net")
    args += ["--ro-bind", "/usr", "/usr"]
    for name in SYSTEM_LINKS:
        top = Path("/") / name
        if top.is_symlink():
            args += ["--symlink", os.readlink(top), str(top)]
        elif top.is_dir():
            args += ["--ro-bind", str(top), str(top)]
    etc = [Path("/etc") / n for n in (*ETC, *(ETC_NETWORK if c.network else ()))]
    args += _bind_args("--ro-bind", etc)
    args += ["--ro-bind-try", "/sys", "/sys", "--proc", "/proc", "--dev", "/dev"]
    args += ["--bind", str(c.shm), "/dev/shm"] if c.shm is not None else ["--tmpfs", "/dev/shm"]
    if c.gpus:
        for pattern in GPU_DEVICES:
            for dev in sorted(glob.glob(pattern)):
                args += ["--dev-bind", dev, dev]
    # the scratch first: a folder given below may lie under /tmp, and must show over it
    args += ["--bind", str(scratch), str(SCRATCH), "--bind", str(scratch / "tmp"), "/tmp"]
    home = python_home(venv)
    args += _bind_args("--ro-bind", [*([home] if home is not None else []), *venv_sources(venv)])
    readable = [p.resolve() for p in c.read_only]
    args += _bind_args("--ro-bind", readable)
    for hidden in (p.resolve() for p in c.masked):
        if any(hidden == r or hidden.is_relative_to(r) for r in readable):
            args += ["--tmpfs", str(hidden)]
    args += _bind_args("--ro-bind", [p.resolve() for p in c.reopened])
    args += ["--ro-bind", str(venv), str(VENV)]
    args += ["--remount-ro", "/", "--chdir", str(SCRATCH), "--"]  # the rest is read-only
    inner = list(command)
    python = Path(inner[0])
    if python.is_relative_to(venv) or python.is_relative_to(c.venv):
        base = venv if python.is_relative_to(venv) else c.venv
        inner[0] = str(VENV / python.relative_to(base))
    env = {
        "HOME": str(SCRATCH),
        "TMPDIR": "/tmp",
        "TEMP": "/tmp",
        "TMP": "/tmp",
        "HF_HOME": str(SCRATCH / "hf"),
        "XDG_CACHE_HOME": str(SCRATCH / "cache"),
        "INLINE_SANDBOXED": "1",
        **c.env,
    }
    return [*args, *inner], env


def apply_env(env: Mapping[str, str], changes: Mapping[str, str]) -> dict[str, str]:
    """``env`` with ``changes`` (an empty value removes the variable)."""
    out = dict(env)
    for key, value in changes.items():
        if value:
            out[key] = value
        else:
            out.pop(key, None)
    return out


def sandbox_mode(env: Mapping[str, str] | None = None) -> str:
    """``INLINE_SANDBOX``: ``auto`` (the default), ``off`` or ``required``."""
    value = (env if env is not None else os.environ).get("INLINE_SANDBOX", "").strip().lower()
    mode = value or "auto"
    if mode not in ("auto", "off", "required"):
        raise ValueError(f"INLINE_SANDBOX must be auto, off or required, not {value!r}")
    return mode


def probe_confinement(
    pack: str, venv: Path, scratch: Path, *, first_party: bool
) -> Confinement | None:
    """The sandbox of an install-time handshake (the pack's code runs: its imports): nothing
    but its venv and a scratch, no network. None when the sandbox is off, or unavailable for
    a first-party pack; ``SandboxUnavailable`` when it is required or the pack third-party."""
    mode = sandbox_mode()
    if mode == "off":
        return None
    problem = sandbox_problem()
    if problem is not None:
        if mode == "required" or not first_party:
            raise SandboxUnavailable(
                f"pack {pack} cannot be sandboxed here ({problem}); to run it unsandboxed "
                "anyway: INLINE_SANDBOX=off"
            )
        return None
    return Confinement(venv=venv, scratch=scratch, gpus=False)
