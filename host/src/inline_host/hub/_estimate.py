"""Size estimates before a download: parameter counts and bytes per dtype from the safetensors
headers over HTTP (one ranged read per weight file, a second only for a header longer than the
first read), the memory one replica needs, and the policy's fit answer for this machine."""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import msgspec
from inline_core import (
    GIB,
    Budget,
    Component,
    Estimate,
    HeaderError,
    activation_bytes,
    place,
    read_header,
)

from ..models import fit_answer
from ..workers import probe
from ._hf import METADATA_LIMIT, WEIGHT_SUFFIXES, HubError, ImportPlan, infer_category, read_limited
from ._pull import HUB_TIMEOUT

#: Bytes of the first ranged read: the whole header of nearly every file (a shard of a large
#: LLM lists a few hundred tensors, ~100 bytes each).
FIRST_READ: Final = 100_000
#: A longer header is not read: the file is sized by its bytes (safetensors allows 100 MB; a
#: real one is under a few MB).
MAX_HEADER: Final = METADATA_LIMIT
DTYPE_SIZES: Final = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
    "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8, "F8_E8M0": 1,
    "F4": 1, "F6_E2M3": 1, "F6_E3M2": 1,
}  # fmt: skip
FOLDER_ROLES: Final = {
    "transformer": "diffusion", "unet": "diffusion", "prior": "diffusion",
    "text_encoder": "text-encoder", "text_encoder_2": "text-encoder",
    "text_encoder_3": "text-encoder", "vae": "vae",
}  # fmt: skip
#: The dtype each task loads its weights in on a GPU (bf16 for every task today).
TASK_DTYPE_BYTES: Final = {"bf16": 2}
#: Context a text model is sized for when its card says nothing (``max_total_tokens``).
DEFAULT_TOKENS: Final = 4096
#: What a process adds beside its weights (CUDA context, allocator slack, Python).
OVERHEAD_BYTES: Final = GIB


class FileCount(msgspec.Struct):
    """One weight file's tensors: parameters and bytes per dtype (from its header, or its size)."""

    path: str
    size: int
    from_header: bool
    params: dict[str, int] = msgspec.field(default_factory=dict)
    nbytes: dict[str, int] = msgspec.field(default_factory=dict)


def count_header(path: str, size: int, header: dict[str, Any]) -> FileCount:
    """Parameters and bytes per dtype of a parsed header."""
    out = FileCount(path, size, True)
    for name, info in header.items():
        if name == "__metadata__" or not isinstance(info, dict):
            continue
        dtype = str(info.get("dtype"))
        n = math.prod(info.get("shape") or [1])
        out.params[dtype] = out.params.get(dtype, 0) + n
        out.nbytes[dtype] = out.nbytes.get(dtype, 0) + n * DTYPE_SIZES.get(dtype, 2)
    return out


def by_size(path: str, size: int) -> FileCount:
    """A weight file without a readable header: its bytes, its parameters guessed at 16 bits."""
    return FileCount(path, size, False, {"unknown": size // 2}, {"unknown": size})


def remote_header(
    url: str, size: int | None, headers: dict[str, str], timeout: float = HUB_TIMEOUT
) -> dict[str, Any] | None:
    """A safetensors header over HTTP: one ranged read (two for a header longer than the first
    read), never more than ``MAX_HEADER`` bytes; None when the file holds no header (or one
    longer than that)."""

    def read(start: int, end: int) -> bytes:
        ask = {**headers, "Range": f"bytes={start}-{end}"}
        # a server that ignores ranges sends the whole file: only what was asked is read
        name = url.rsplit("/", 1)[-1]
        status, data = read_limited(url, ask, name, limit=end - start + 1, timeout=timeout)
        if status == 206 or start == 0:
            return data
        cut = read_limited(url, ask, name, limit=end + 1, timeout=timeout)[1]
        return cut[start:]  # from zero, cut

    last = (min(size, FIRST_READ) if size else FIRST_READ) - 1
    head = read(0, last)
    if len(head) < 8:
        return None
    (length,) = struct.unpack("<Q", head[:8])
    if length > MAX_HEADER or (size is not None and length + 8 > size):
        return None
    raw = head[8 : 8 + length]
    if len(raw) < length:
        raw += read(len(head), 8 + length - 1)
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return header if isinstance(header, dict) else None


def count_remote(plan: ImportPlan) -> list[FileCount]:
    """Every weight file of the plan, counted from its header over HTTP."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.utils import build_hf_headers

    headers = build_hf_headers(token=plan.token)
    counts: list[FileCount] = []
    for f in plan.files:
        if not f.path.endswith(WEIGHT_SUFFIXES):
            continue
        size = f.size or 0
        if not f.path.endswith(".safetensors"):
            counts.append(by_size(f.path, size))
            continue
        url = hf_hub_url(plan.source.repo, f.path, revision=plan.commit)
        try:
            header = remote_header(url, f.size, headers, plan.timeout)
        except HfHubHTTPError as exc:
            raise HubError(f"{plan.source}: cannot read the header of {f.path}: {exc}") from None
        except Exception as exc:  # connection errors (httpx's derive from no builtin error)
            if not isinstance(exc, OSError) and not type(exc).__module__.startswith("http"):
                raise
            raise HubError(f"{plan.source}: cannot read the header of {f.path}: {exc}") from None
        counts.append(count_header(f.path, size, header) if header else by_size(f.path, size))
    return counts


def count_local(folder: Path) -> list[FileCount]:
    """Every weight file under a local folder (or one file), from its header."""
    files = [folder] if folder.is_file() else sorted(p for p in folder.rglob("*") if p.is_file())
    counts: list[FileCount] = []
    for p in files:
        if not p.name.endswith(WEIGHT_SUFFIXES) or any(s.startswith(".") for s in p.parts[-3:]):
            continue
        rel = p.name if p == folder else p.relative_to(folder).as_posix()
        size = p.stat().st_size
        try:
            counts.append(count_header(rel, size, read_header(p)))
        except HeaderError:
            counts.append(by_size(rel, size))
    return counts


def _component_of(path: str, category: str) -> tuple[str, str]:
    top = path.split("/", 1)[0] if "/" in path else ""
    if category == "diffusers" and top:
        return top, FOLDER_ROLES.get(top, "other")
    role = {"text-encoder": "text-encoder", "vae": "vae", "diffusion-model": "diffusion"}
    return "model", role.get(category, "other")


def _kv_cache_bytes(config: dict[str, Any] | None, tokens: int, dtype_bytes: int) -> int:
    """A causal LM's KV cache for ``tokens`` (static, as the text pack sizes it)."""
    if not config:
        return 0
    inner = config.get("text_config")
    cfg: dict[str, Any] = inner if isinstance(inner, dict) else config
    layers = int(cfg.get("num_hidden_layers") or cfg.get("n_layer") or 0)
    heads = int(cfg.get("num_attention_heads") or cfg.get("n_head") or 0)
    kv = int(cfg.get("num_key_value_heads") or heads)
    hidden = int(cfg.get("hidden_size") or cfg.get("n_embd") or 0)
    head_dim = int(cfg.get("head_dim") or (hidden // heads if heads else 0))
    limit = int(cfg.get("max_position_embeddings") or tokens)
    return 2 * layers * kv * head_dim * min(tokens, limit) * dtype_bytes


def summarize(
    counts: Sequence[FileCount],
    category: str,
    config: dict[str, Any] | None,
    *,
    profile: str | None = None,
    budget: Budget | None = None,
) -> dict[str, Any]:
    """The estimate's JSON: parameters and bytes per dtype, one replica's needs, the fit
    (within ``budget``: the settings' ``INLINE_VRAM_BUDGET_GB``, passed by the top)."""
    params: dict[str, int] = {}
    nbytes: dict[str, int] = {}
    groups: dict[str, list[FileCount]] = {}
    for c in counts:
        for k, v in c.params.items():
            params[k] = params.get(k, 0) + v
        for k, v in c.nbytes.items():
            nbytes[k] = nbytes.get(k, 0) + v
        groups.setdefault(_component_of(c.path, category)[0], []).append(c)
    components = []
    for name, files in groups.items():
        role = _component_of(files[0].path, category)[1]
        components.append(Component(name, role,  # type: ignore[arg-type]
                                    sum(sum(f.params.values()) for f in files),
                                    sum(sum(f.nbytes.values()) for f in files)))  # fmt: skip
    total_params = sum(params.values())
    dtype_bytes = TASK_DTYPE_BYTES["bf16"]
    weights = total_params * dtype_bytes
    if category in ("llm", "seq2seq"):
        working = _kv_cache_bytes(config, DEFAULT_TOKENS, dtype_bytes) + weights // 10
        activation = working
    elif category == "diffusers":
        activation = activation_bytes(1024, 1024, dtype_bytes=dtype_bytes)
        working = activation
    else:
        working = activation = weights // 10
    largest = max((c.params * dtype_bytes for c in components), default=0)
    inventory = probe()
    chosen = profile or ("gpu-max" if inventory.gpus else "cpu")
    placement = place(inventory, Estimate(tuple(components), activation), chosen,  # type: ignore[arg-type]
                      budget or Budget())  # fmt: skip
    return {
        "category": category,
        "params": total_params,
        "paramsByDtype": params,
        "bytes": sum(nbytes.values()),
        "bytesByDtype": nbytes,
        "weightFiles": [
            {
                "path": c.path,
                "size": c.size,
                "fromHeader": c.from_header,
                "params": sum(c.params.values()),
            }
            for c in counts
        ],
        "replica": {
            "dtype": "bf16",
            "vramGb": round((weights + working + OVERHEAD_BYTES) / GIB, 2),
            "ramGb": round((largest + OVERHEAD_BYTES) / GIB, 2),
            "gpus": 1,
        },
        "fit": fit_answer(placement, Estimate(tuple(components), activation)),
    }


def estimate_plan(
    plan: ImportPlan, *, profile: str | None = None, budget: Budget | None = None
) -> dict[str, Any]:
    """The estimate of what an import would stage (the same file list)."""
    out = summarize(count_remote(plan), plan.category, plan.config, profile=profile, budget=budget)
    return {"source": str(plan.source), "commit": plan.commit, "files": len(plan.files),
            "downloadBytes": plan.total_bytes, **out}  # fmt: skip


def estimate_folder(
    folder: Path, category: str | None, *, profile: str | None = None, budget: Budget | None = None
) -> dict[str, Any]:
    """The estimate of a local model folder (or file)."""
    if not folder.exists():
        raise HubError(f"'{folder}' does not exist")
    config = None
    if folder.is_dir() and (folder / "config.json").is_file():
        try:
            config = json.loads((folder / "config.json").read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise HubError(f"'{folder / 'config.json'}' is not readable JSON: {exc}") from None
    names = [p.name for p in folder.iterdir()] if folder.is_dir() else []
    found = category or infer_category(names, config) or "other"
    counts = count_local(folder)
    if not counts:
        raise HubError(f"'{folder}' holds no weight files ({', '.join(WEIGHT_SUFFIXES)})")
    return {
        "source": str(folder),
        **summarize(counts, found, config, profile=profile, budget=budget),
    }
