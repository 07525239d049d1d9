"""Finding, sizing and loading a ``models/llm/<name>/`` folder, placed by the memory broker.

A folder is a transformers layout (``config.json``, tokenizer files, safetensors). Its
architecture comes from ``config.json`` (the SDK's ``llm_architecture``, the rule the host's
pickers apply too), its size from the safetensors headers (never the weights). Before loading,
the worker asks the host's broker (``ctx.memory``) where the model goes (without one, the SDK's
``local_placement``); the plan's device, dtype, int8 and offload are applied here. One model per
slot (``causal``, ``seq2seq``, and ``encoder`` for ``text/embed``'s ``models/embeddings/``
folders) stays loaded until another is picked or the broker evicts it. Everything loads with
``local_files_only``.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from inline_sdk import LlmArchitecture as Arch
from inline_sdk import Memory, UnsafeName, check_model_name, llm_architecture, local_placement
from inline_sdk.protocol import ModelSize

from ._card import ModelCard, read_card

CATEGORY: Final = "llm"
DTYPE_BYTES: Final = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I8": 1, "U8": 1}
DTYPES: Final = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
log = logging.getLogger("inline.text")
#: What one loaded model is kept as: a causal LM, a seq2seq LM, an encoder (its hidden states).
Slot = Literal["causal", "seq2seq", "encoder"]


class ModelNotFound(FileNotFoundError):
    """No usable folder for the pick (names what was looked for, and where)."""


def find_model(models_dir: Path, name: str, arch: Arch) -> Path:
    """The folder of ``models/llm/<name>`` (``""``: the first of the right architecture)."""
    root = models_dir / CATEGORY
    kind = "causal (decoder-only)" if arch == "causal" else "encoder-decoder"
    if not name:
        found = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        for folder in found:
            if not folder.name.startswith(".") and llm_architecture(folder) == arch:
                return folder
        raise ModelNotFound(f"No {kind} model folder in {root}: put a transformers folder there")
    try:
        check_model_name(name)
    except UnsafeName as exc:
        raise ModelNotFound(str(exc)) from None
    folder = root / name
    if not (folder / "config.json").is_file():
        raise ModelNotFound(f"No model folder '{name}' with a config.json in {root}")
    got = llm_architecture(folder)
    if got != arch:
        raise ModelNotFound(f"'{name}' in {root} is not a {kind} model (its config says {got})")
    return folder


def header_size(folder: Path) -> tuple[int, int]:
    """(parameters, bytes) of the folder's safetensors, from their headers."""
    params = nbytes = 0
    for path in sorted(folder.rglob("*.safetensors")):
        with open(path, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for key, info in header.items():
            if key == "__metadata__" or not isinstance(info, dict):
                continue
            count = 1
            for d in info.get("shape", []):
                count *= int(d)
            params += count
            nbytes += count * DTYPE_BYTES.get(info.get("dtype", "F32"), 4)
    return params, nbytes


@dataclass
class Loaded:
    """A model and its tokenizer as placed."""

    folder: Path
    model: Any
    tokenizer: Any
    card: ModelCard
    device: str
    compile: bool  # compile generate (CUDA and the card asks)
    compile_failed: bool = False


_SLOTS: dict[str, tuple[tuple[Any, ...], Loaded]] = {}
_LOCK = threading.RLock()
#: One load of a slot at a time: concurrent first calls (the choices of one request) load once.
_LOADING: dict[str, threading.Lock] = {}
#: transformers' lazy module is not safe to initialise from two threads at once.
_IMPORTS = threading.Lock()


def _key(folder: Path) -> tuple[Any, ...]:
    stats = [(p.name, p.stat().st_mtime_ns) for p in sorted(folder.glob("*")) if p.is_file()]
    return (str(folder), tuple(stats))


def free(slot: str) -> None:
    """Drop what ``slot`` holds (the broker evicts it, or another model replaces it)."""
    with _LOCK:
        held = _SLOTS.pop(slot, None)
    if held is None:
        return
    del held
    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _placement(memory: Memory, folder: Path, slot: str) -> tuple[str, str, str, str, Any]:
    """(device, torch dtype, quantization, offload, plan) from the broker, else the default."""
    params, nbytes = header_size(folder)
    placed = memory.place([ModelSize(name=str(folder), role="other", params=params, bytes=nbytes,
                                     slot=slot)])  # fmt: skip
    if placed is None:  # no broker: the SDK's one local rule
        local = local_placement(nbytes)
        return local.device, local.dtype or "auto", "none", "resident", None
    if not placed.fits or not placed.components:
        raise MemoryError(f"{folder.name} does not fit: {placed.reason}")
    plan = placed.components[0]
    return plan.device, DTYPES.get(plan.dtype, plan.dtype), plan.quantization, plan.offload, plan


def load(memory: Memory, folder: Path, slot: Slot, weights: Path | None = None) -> Loaded:
    """The model of ``folder`` (loaded once per slot, placed where the broker says; its
    transformers files in ``weights``, by default the folder itself). Calls that arrive at once
    wait for the first one's load."""
    with _LOCK:
        loading = _LOADING.setdefault(slot, threading.Lock())
    with loading:
        return _load(memory, folder, slot, weights)


def _load(memory: Memory, folder: Path, slot: Slot, weights: Path | None) -> Loaded:
    source = str(weights or folder)
    key = _key(folder) + ((source,) if weights is not None else ())
    with _LOCK:
        held = _SLOTS.get(slot)
        if held is not None and held[0] == key:
            memory.touch(slot)
            return held[1]
    free(slot)
    memory.drop(slot)
    card = read_card(folder)
    device, dtype, quantization, offload, plan = _placement(memory, folder, slot)
    os.environ.setdefault("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", "1")
    with _IMPORTS:
        import torch
        from transformers import (
            AutoModel,
            AutoModelForCausalLM,
            AutoModelForSeq2SeqLM,
            AutoTokenizer,
        )

    auto = {"causal": AutoModelForCausalLM, "seq2seq": AutoModelForSeq2SeqLM}.get(slot, AutoModel)
    with _LOCK:
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
        model = auto.from_pretrained(
            source,
            local_files_only=True,
            dtype=dtype if dtype == "auto" else getattr(torch, dtype),  # auto: the file's
            low_cpu_mem_usage=True,
        )
    if quantization == "int8":
        from torchao.quantization import Int8WeightOnlyConfig, quantize_

        quantize_(model, Int8WeightOnlyConfig())
    if offload == "resident":
        model.to(device)
    else:  # weights stay in RAM and move to the device layer by layer as they run
        from accelerate import cpu_offload

        cpu_offload(model, execution_device=torch.device(device))
    model.eval()
    compiled = card.compile and device.startswith("cuda") and offload == "resident"
    loaded = Loaded(folder, model, tokenizer, card, device, compiled)
    with _LOCK:
        _SLOTS[slot] = (key, loaded)
    if plan is not None:
        memory.hold(slot, str(folder), plan.bytes or header_size(folder)[1], plan,
                    lambda: free(slot))  # fmt: skip
    log.info("loaded %s on %s (%s, %s, %s)", folder.name, device, dtype, quantization, offload)
    return loaded
