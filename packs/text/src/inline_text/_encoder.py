"""A ``models/embeddings/<name>/`` folder: where its encoder is and how its vectors are made
(torch-free: read from the folder's files, never its weights).

A plain transformers folder (``config.json``, tokenizer, safetensors) is pooled by the mean of
its last hidden states over the real tokens, not normalised. A sentence-transformers folder
says more in its files, read as sentence-transformers reads them (the classic layout and the
one of sentence-transformers 5+): ``modules.json`` lists the modules in order, a
``Transformer`` (its folder, usually the root, with ``sentence_bert_config.json``:
``max_seq_length``, ``do_lower_case``), a ``Pooling`` (``1_Pooling/config.json``: the modes,
``pooling_mode`` or the older ``pooling_mode_*_tokens`` flags, and ``include_prompt``), any
``Dense`` layers (``in_features``, ``out_features``, ``bias``, ``activation_function``: a
``torch.nn`` module) and a ``Normalize``; ``config_sentence_transformers.json`` may name a
default prompt put before every text. A module of another kind is refused, naming it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from inline_sdk import UnsafeName, check_model_name, is_encoder_folder

from ._load import ModelNotFound

CATEGORY: Final = "embeddings"
#: The pooling modes, in the order sentence-transformers concatenates them.
POOLING_MODES: Final = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
#: The ``pooling`` param's choices (``auto``: the folder's own) and the modes they name.
POOLING_CHOICES: Final = {"mean": ("mean",), "cls": ("cls",), "last": ("lasttoken",)}
_LEGACY_MODES: Final = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
_KNOWN: Final = ("Transformer", "Pooling", "Dense", "Normalize")


class EncoderInvalid(ValueError):
    """A sentence-transformers folder whose files cannot be read, or that holds a module this
    node does not run (names the file and what is wrong)."""


@dataclass(frozen=True, slots=True)
class DenseLayer:
    """A ``Dense`` module: a linear layer and its activation (a ``torch.nn`` class name)."""

    folder: Path
    in_features: int
    out_features: int
    bias: bool
    activation: str  # e.g. torch.nn.modules.activation.Tanh


@dataclass(frozen=True, slots=True)
class EncoderConfig:
    """How a folder's vectors are made."""

    folder: Path
    weights: Path  # the transformers folder (config.json, tokenizer, weights)
    pooling: tuple[str, ...] = ("mean",)
    include_prompt: bool = True
    dense: tuple[DenseLayer, ...] = ()
    normalize: bool = False
    max_seq_length: int | None = None
    lower_case: bool = False
    prompt: str = ""
    sentence_transformers: bool = False  # the folder has a modules.json


def find_encoder(models_dir: Path, name: str) -> Path:
    """The folder of ``models/embeddings/<name>`` (``""``: the first encoder folder there)."""
    root = models_dir / CATEGORY
    if not name:
        found = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        for folder in found:
            if not folder.name.startswith(".") and is_encoder_folder(folder):
                return folder
        raise ModelNotFound(
            f"No encoder folder in {root}: put a transformers or sentence-transformers folder "
            "there (inline models import hf:ORG/NAME --as embeddings)"
        )
    try:
        check_model_name(name)
    except UnsafeName as exc:
        raise ModelNotFound(str(exc)) from None
    folder = root / name
    if not is_encoder_folder(folder):
        raise ModelNotFound(f"No encoder folder '{name}' with a config.json in {root}")
    return folder


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EncoderInvalid(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise EncoderInvalid(f"{path}: expected an object, got {type(data).__name__}")
    return data


def _optional_json(path: Path) -> dict[str, Any]:
    return _json(path) if path.is_file() else {}


def _inside(folder: Path, sub: Any, where: str) -> Path:
    if not isinstance(sub, str) or Path(sub).is_absolute() or ".." in Path(sub).parts:
        raise EncoderInvalid(f"{where}: path {sub!r} is not a folder inside {folder}")
    return folder / sub


def pooling_modes(config: dict[str, Any], where: str) -> tuple[str, ...]:
    """The modes of a ``Pooling`` config (``pooling_mode``, or the older flags; none: mean)."""
    raw = config.get("pooling_mode")
    if raw is None:
        modes = tuple(m for key, m in _LEGACY_MODES.items() if config.get(key))
        return modes or ("mean",)
    modes = (raw,) if isinstance(raw, str) else tuple(raw) if isinstance(raw, list) else ()
    wrong = [m for m in modes if m not in POOLING_MODES]
    if not modes or wrong:
        raise EncoderInvalid(f"{where}: pooling_mode {raw!r} is not one of {list(POOLING_MODES)}")
    return modes


def read_encoder(folder: Path) -> EncoderConfig:
    """The folder's ``EncoderConfig`` (see the module docstring); raises ``EncoderInvalid``."""
    modules_path = folder / "modules.json"
    if not modules_path.is_file():
        return EncoderConfig(folder=folder, weights=folder)
    try:
        modules = json.loads(modules_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EncoderInvalid(f"{modules_path}: not readable JSON ({exc})") from None
    if not isinstance(modules, list):
        raise EncoderInvalid(f"{modules_path}: expected a list of modules")
    weights: Path | None = None
    pooling: tuple[str, ...] = ("mean",)
    include_prompt, normalize = True, False
    dense: list[DenseLayer] = []
    max_len: int | None = None
    lower = False
    for i, module in enumerate(modules):
        where = f"{modules_path} [{i}]"
        kind = str(module.get("type", "")) if isinstance(module, dict) else ""
        name = kind.rsplit(".", 1)[-1]
        if name not in _KNOWN:
            known = ", ".join(_KNOWN)
            raise EncoderInvalid(f"{where}: module {kind or module!r} is not one of {known}")
        path = _inside(folder, module.get("path", ""), where)
        if name == "Transformer":
            weights = path
            bert = _optional_json(path / "sentence_bert_config.json")
            length = bert.get("max_seq_length")
            max_len = length if isinstance(length, int) and length > 0 else None
            lower = bool(bert.get("do_lower_case", False))
        elif name == "Pooling":
            config = _optional_json(path / "config.json")
            pooling = pooling_modes(config, str(path / "config.json"))
            include_prompt = bool(config.get("include_prompt", True))
        elif name == "Dense":
            dense.append(_dense(path))
        else:
            normalize = True
    if weights is None:
        raise EncoderInvalid(f"{modules_path}: no Transformer module (the encoder)")
    st = _optional_json(folder / "config_sentence_transformers.json")
    prompts = st.get("prompts") if isinstance(st.get("prompts"), dict) else {}
    default = st.get("default_prompt_name")
    prompt = prompts.get(default, "") if isinstance(default, str) else ""
    return EncoderConfig(
        folder=folder,
        weights=weights,
        pooling=pooling,
        include_prompt=include_prompt,
        dense=tuple(dense),
        normalize=normalize,
        max_seq_length=max_len,
        lower_case=lower,
        prompt=prompt if isinstance(prompt, str) else "",
        sentence_transformers=True,
    )


def _dense(path: Path) -> DenseLayer:
    config = _json(path / "config.json")
    where = str(path / "config.json")
    try:
        in_f, out_f = int(config["in_features"]), int(config["out_features"])
    except (KeyError, TypeError, ValueError):
        raise EncoderInvalid(f"{where}: needs in_features and out_features") from None
    activation = config.get("activation_function", "torch.nn.modules.activation.Tanh")
    if not isinstance(activation, str) or not activation.startswith("torch.nn."):
        raise EncoderInvalid(f"{where}: activation_function {activation!r} is not torch.nn's")
    if config.get("use_residual"):
        raise EncoderInvalid(f"{where}: use_residual is not supported")
    return DenseLayer(path, in_f, out_f, bool(config.get("bias", True)), activation)
