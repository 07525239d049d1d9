"""An encoder as placed, and the vectors of a batch of texts (torch, imported when it runs).

The texts are cut to the model's length and sorted by length, then run through the encoder in
chunks of similar length (padding masked), so that a batch of very different lengths pads
little. Each chunk's last hidden states are pooled over the real tokens exactly as
sentence-transformers pools them (its ``Pooling``, mode by mode, concatenated in its order),
then go through the folder's ``Dense`` layers. Normalising and cutting to ``dimensions`` are
per call (``finish``), after the batch.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from ._encoder import DenseLayer, EncoderConfig
from ._load import Loaded

#: At most this many texts, and this many tokens with their padding, go through one forward.
CHUNK_TEXTS: Final = 64
CHUNK_TOKENS: Final = 16384
#: Inputs a tokenizer makes that an encoder's ``forward`` takes (as sentence-transformers).
FORWARD_INPUTS: Final = ("input_ids", "attention_mask", "token_type_ids")


@dataclass(eq=False)
class Encoder:
    """A loaded encoder with what its folder says about pooling (one per loaded model)."""

    loaded: Loaded
    config: EncoderConfig
    max_length: int | None
    dense: list[Any]  # torch modules, in order
    prompt_length: int | None  # tokens of the prompt excluded from pooling
    inputs: tuple[str, ...]  # the tokenizer outputs the model's forward takes
    width: int = 0  # values per vector (set on the first batch)


def make_encoder(loaded: Loaded, config: EncoderConfig) -> Encoder:
    """``loaded`` with its folder's Dense layers (on its device) and its tokenizer's rules."""
    model, tokenizer = loaded.model, loaded.tokenizer
    max_length = config.max_seq_length
    if max_length is None:  # as sentence-transformers: the tokenizer's, capped by the model's
        limit = getattr(tokenizer, "model_max_length", None)
        positions = getattr(model.config, "max_position_embeddings", None)
        candidates = [n for n in (limit, positions) if isinstance(n, int) and 0 < n < 10**9]
        max_length = min(candidates) if candidates else None
    takes = set(inspect.signature(model.forward).parameters)
    inputs = tuple(k for k in FORWARD_INPUTS if k in takes)
    dense = [_dense_module(layer, loaded.device, model.dtype) for layer in config.dense]
    prompt_length = None
    if config.prompt and not config.include_prompt:
        ids = tokenizer([config.prompt], truncation=True, max_length=max_length)["input_ids"][0]
        specials = set(getattr(tokenizer, "all_special_ids", ()) or ())
        prompt_length = len(ids) - (1 if ids and ids[-1] in specials else 0)
    return Encoder(loaded, config, max_length, dense, prompt_length, inputs)


def _dense_module(layer: DenseLayer, device: str, dtype: Any) -> Any:
    import torch

    module_name, _, class_name = layer.activation.rpartition(".")
    activation = getattr(importlib.import_module(module_name), class_name, None)
    if not (isinstance(activation, type) and issubclass(activation, torch.nn.Module)):
        raise ValueError(f"{layer.folder}: activation {layer.activation!r} is no torch.nn module")
    linear = torch.nn.Linear(layer.in_features, layer.out_features, bias=layer.bias)
    weights = layer.folder / "model.safetensors"
    if weights.is_file():
        from safetensors.torch import load_file

        state = load_file(str(weights))
    else:
        state = torch.load(str(layer.folder / "pytorch_model.bin"), weights_only=True)
    state = {k.removeprefix("linear."): v for k, v in state.items() if k.startswith("linear.")}
    linear.load_state_dict(state)
    return torch.nn.Sequential(linear, activation()).to(device=device, dtype=dtype).eval()


def tokenize(encoder: Encoder, texts: Sequence[str]) -> list[list[int]]:
    """Each text's token ids (the folder's prompt first, lower-cased when it says so, cut to the
    model's length)."""
    config = encoder.config
    prepared = [config.prompt + t for t in texts]
    if config.lower_case:
        prepared = [t.lower() for t in prepared]
    cut = encoder.max_length is not None
    out = encoder.loaded.tokenizer(
        prepared, truncation="longest_first" if cut else False, max_length=encoder.max_length
    )
    return list(out["input_ids"])


def vectors(
    encoder: Encoder, texts: Sequence[str], modes: tuple[str, ...]
) -> tuple[Any, list[int]]:
    """The pooled vectors (float32, on the CPU, in the order of ``texts``) and each text's
    tokens. One batch at a time (the tokenizer is not safe across threads)."""
    import torch

    ids = tokenize(encoder, texts)
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    out: list[Any] = [None] * len(ids)
    start = 0
    while start < len(order):
        longest = max(1, len(ids[order[start]]))
        size = max(1, min(CHUNK_TEXTS, CHUNK_TOKENS // longest))
        chunk = order[start : start + size]
        pooled = _forward(encoder, [ids[i] for i in chunk], modes)
        for row, i in enumerate(chunk):
            out[i] = pooled[row]
        start += size
    stacked = torch.stack(out)
    encoder.width = int(stacked.shape[-1])
    return stacked, [len(i) for i in ids]


def _forward(encoder: Encoder, ids: list[list[int]], modes: tuple[str, ...]) -> Any:
    import torch

    loaded = encoder.loaded
    padded = loaded.tokenizer.pad({"input_ids": ids}, padding=True, return_tensors="pt")
    mask = padded["attention_mask"]
    feed = {"input_ids": padded["input_ids"], "attention_mask": mask}
    if "token_type_ids" in encoder.inputs:
        feed["token_type_ids"] = torch.zeros_like(padded["input_ids"])
    feed = {k: v.to(loaded.device) for k, v in feed.items() if k in encoder.inputs}
    with torch.inference_mode():
        hidden = loaded.model(**feed, return_dict=True).last_hidden_state
        mask = mask.to(hidden.device)
        pooled = torch.cat(pool(hidden, mask, modes, encoder.prompt_length), dim=-1)
        for layer in encoder.dense:
            pooled = layer(pooled)
    return pooled.float().cpu()


def pool(hidden: Any, mask: Any, modes: Sequence[str], prompt_length: int | None) -> list[Any]:
    """sentence-transformers' padded pooling, mode by mode (its ``Pooling._forward_padded``)."""
    import torch

    original = mask
    if prompt_length:
        mask = _exclude_prompt(mask, prompt_length)
    acc = torch.float32 if hidden.dtype in (torch.float16, torch.bfloat16) else hidden.dtype
    out: list[Any] = []
    mean_sum = mean_mask = None
    for mode in modes:
        if mode == "cls":
            first = mask.to(torch.int).argmax(dim=1)
            index = first.unsqueeze(-1).unsqueeze(1).expand(-1, 1, hidden.shape[-1])
            out.append(torch.gather(hidden, 1, index).squeeze(1))
        elif mode == "max":
            m = mask.unsqueeze(-1).expand_as(hidden).to(hidden.dtype)
            out.append(hidden.masked_fill(m == 0, float("-inf")).max(dim=1).values)
        elif mode in ("mean", "mean_sqrt_len_tokens"):
            if mean_sum is None or mean_mask is None:
                m = mask.unsqueeze(-1).to(hidden.dtype)
                mean_sum = (hidden * m).sum(dim=1, dtype=acc)
                mean_mask = torch.clamp(m.sum(dim=1, dtype=acc), min=1e-9)
            denominator = mean_mask if mode == "mean" else torch.sqrt(mean_mask)
            out.append((mean_sum / denominator).to(hidden.dtype))
        elif mode == "weightedmean":
            m = mask.unsqueeze(-1).to(acc)
            weights = torch.arange(1, hidden.shape[1] + 1, device=hidden.device, dtype=acc)
            weights = weights.view(1, -1, 1) - original.to(torch.int32).argmax(dim=1).view(-1, 1, 1)
            weighted = m * weights
            total = (hidden * weighted).sum(dim=1)
            out.append((total / torch.clamp(weighted.sum(dim=1), min=1e-9)).to(hidden.dtype))
        elif mode == "lasttoken":
            _, length, width = hidden.shape
            values, indices = mask.flip(1).max(1)
            indices = torch.where(values == 0, length - 1, indices)
            index = (length - indices - 1).unsqueeze(-1).unsqueeze(1).expand(-1, 1, width)
            m = mask.unsqueeze(-1).expand_as(hidden).to(hidden.dtype)
            out.append(torch.gather(hidden * m, 1, index).squeeze(dim=1))
        else:
            raise ValueError(f"unknown pooling mode {mode!r}")
    return out


def _exclude_prompt(mask: Any, prompt_length: int) -> Any:
    import torch

    mask = mask.clone()
    pads = mask.to(torch.int32).argmax(dim=1)
    if int(pads.sum()) == 0:
        mask[:, :prompt_length] = 0
    else:  # left padding: the padding and the prompt after it
        positions = torch.arange(mask.size(1), device=mask.device).unsqueeze(0)
        mask[positions < (pads + prompt_length).unsqueeze(1)] = 0
    return mask


def finish(pooled: Any, dimensions: int, normalize: bool) -> list[list[float]]:
    """One call's vectors: their first ``dimensions`` values (0: all), then L2-normalised when
    asked, as plain lists."""
    import torch

    x = pooled[:, :dimensions] if dimensions else pooled
    if normalize:
        x = torch.nn.functional.normalize(x, p=2, dim=-1)
    return x.tolist()
