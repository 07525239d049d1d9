"""LoRA stacks: reading LoRA files and merging them into a loaded transformer, reversibly.

Layouts are recognised from the keys: kohya / ComfyUI (``lora_unet_<path>`` or dotted
``diffusion_model.<path>`` with ``.lora_down`` / ``.lora_up`` / ``.alpha``) and diffusers / peft
(``transformer.<path>.lora_A`` / ``.lora_B``). Target paths may name the module's own (diffusers)
parameters or the base file's original ones (fused ``qkv``): those deltas go through the family's
converter, which splits them as it splits the weights. A file whose keys match nothing is refused,
naming them.

Merging never reloads the base weights: the first LoRA to touch a parameter keeps a copy of its
original, and removing (or changing) the stack copies the originals back, exactly.
"""

from __future__ import annotations

import math
import threading
from pathlib import Path
from typing import Any, Final

import msgspec

from ._errors import ModelFileError, NotSafetensors

#: suffix -> (role, layout family)
SUFFIXES: Final = (
    (".lora_down.weight", "down", "kohya"),
    (".lora_up.weight", "up", "kohya"),
    (".lora_A.weight", "down", "peft"),
    (".lora_B.weight", "up", "peft"),
    (".lora_A.default.weight", "down", "peft"),
    (".lora_B.default.weight", "up", "peft"),
    (".alpha", "alpha", ""),
)
PREFIXES: Final = (
    "base_model.model.",
    "model.diffusion_model.",
    "diffusion_model.",
    "transformer.",
)
KOHYA_PREFIX: Final = "lora_unet_"
_LOCK = threading.Lock()


class LoraItem(msgspec.Struct, frozen=True, kw_only=True):
    """One LoRA of a stack: the resolved file, its strength and the layout its keys showed."""

    file: str
    strength: float
    layout: str


class LoraStack(msgspec.Struct, frozen=True, kw_only=True):
    """What ``load/lora`` outputs: LoRAs in wiring order (plain data any pack may read)."""

    loras: list[LoraItem] = []


class LoraRefused(ModelFileError):
    """A LoRA file whose keys match no known layout or name nothing in the model, or whose
    tensors cannot be merged (NaN or Inf, not floating point, shapes that do not fit); ``keys``
    names the culprits."""

    def __init__(self, path: str, message: str, keys: list[str]) -> None:
        shown = ", ".join(keys[:8]) + (f" (+{len(keys) - 8} more)" if len(keys) > 8 else "")
        super().__init__(path, f"LoRA {message}: {shown}")
        self.keys = keys


def as_stack(value: Any) -> LoraStack:
    """A ``lora`` input (a stack from ``load/lora``, as a struct or its JSON) as a ``LoraStack``."""
    if value is None:
        return LoraStack()
    if isinstance(value, LoraStack):
        return value
    try:
        return msgspec.convert(value, LoraStack)
    except (msgspec.ValidationError, TypeError):
        raise ValueError("the 'lora' input is not a LoRA stack from load/lora.") from None


def group_keys(keys: list[str]) -> tuple[str, dict[str, dict[str, str]]]:
    """The layout (``kohya``, ``comfyui`` or ``peft``) and, per target path, the file key of
    each role (``down``, ``up``, ``alpha``); ``{}`` when nothing looks like a LoRA."""
    groups: dict[str, dict[str, str]] = {}
    families: set[str] = set()
    for key in keys:
        for suffix, role, family in SUFFIXES:
            if key.endswith(suffix):
                groups.setdefault(key[: -len(suffix)], {})[role] = key
                if family:
                    families.add(family)
                break
    groups = {base: roles for base, roles in groups.items() if "down" in roles and "up" in roles}
    if not groups:
        return "", {}
    if "peft" in families:
        layout = "peft"
    elif all(base.startswith(KOHYA_PREFIX) for base in groups):
        layout = "kohya"
    else:
        layout = "comfyui"
    return layout, groups


def read_layout(path: Path) -> str:
    """The layout of the LoRA at ``path`` (headers only); raise ``LoraRefused``."""
    from ._header import read_header

    keys = sorted(read_header(path).tensors)
    layout, _ = group_keys(keys)
    if not layout:
        raise LoraRefused(
            str(path), "its keys match no LoRA layout (kohya/ComfyUI or diffusers/peft)", keys
        )
    return layout


def _strip(base: str) -> str:
    if base.startswith(KOHYA_PREFIX):
        return base[len(KOHYA_PREFIX) :]
    for prefix in PREFIXES:
        if base.startswith(prefix):
            return base[len(prefix) :]
    return base


def _targets(module_keys: set[str], original_keys: set[str]) -> dict[str, tuple[str, str]]:
    """Every weight a LoRA may name -> (its name, ``module`` or ``original``), by dotted name
    and by kohya's underscored name."""
    out: dict[str, tuple[str, str]] = {}
    for where, keys in (("original", original_keys), ("module", module_keys)):
        for key in keys:
            if key.endswith(".weight"):
                name = key[: -len(".weight")]
                out[name] = (name, where)
                out[name.replace(".", "_")] = (name, where)
    return out


def lora_deltas(path: Path, strength: float, module: Any, detection: Any) -> dict[str, Any]:
    """The weight deltas (``strength * up @ down * alpha / rank``, float32) of one LoRA, keyed by
    the module's parameter names. Every tensor is checked before it is used: ``LoraRefused``
    names the key (and the shapes) of one that targets nothing, holds NaN or Inf, is not
    floating point, or does not fit its weight; ``NotSafetensors`` a file that cannot be read."""
    from safetensors import SafetensorError, safe_open

    from ._header import read_file_header

    if not math.isfinite(strength):
        raise ValueError(f"LoRA strength {strength} for '{path}' is not a finite number")
    read_file_header(path)  # a truncated or garbled file: NotSafetensors, naming what is wrong
    try:
        with safe_open(str(path), framework="pt", device="cpu") as fh:
            direct, original = _read_deltas(fh, path, strength, module, detection)
    except SafetensorError as exc:
        raise NotSafetensors(path, f"cannot be read as a LoRA: {exc}") from None
    if original:
        for key, delta in _convert(path, original, module, detection).items():
            direct[key] = direct[key] + delta if key in direct else delta
    return direct


def _read_deltas(
    fh: Any, path: Path, strength: float, module: Any, detection: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The deltas on the module's own weights, and those on the base file's original ones."""
    keys = list(fh.keys())
    layout, groups = group_keys(keys)
    if not layout:
        raise LoraRefused(
            str(path),
            "its keys match no LoRA layout (kohya/ComfyUI or diffusers/peft)",
            sorted(keys),
        )
    shapes = {key: tuple(value.shape) for key, value in module.state_dict().items()}
    originals = {key: tuple(info.shape) for key, info in detection.keys.items()}
    targets = _targets(set(shapes), set(originals))
    unknown = [roles["down"] for base, roles in groups.items() if _strip(base) not in targets]
    if unknown:
        raise LoraRefused(
            str(path), "these keys name no weight of the diffusion model", sorted(unknown)
        )
    direct: dict[str, Any] = {}
    original: dict[str, Any] = {}
    for base, roles in groups.items():
        name, where = targets[_strip(base)]
        weight = (shapes if where == "module" else originals)[f"{name}.weight"]
        delta = _delta(fh, path, roles, strength, weight)
        (direct if where == "module" else original)[f"{name}.weight"] = delta
    return direct, original


def _delta(
    fh: Any, path: Path, roles: dict[str, str], strength: float, weight: tuple[int, ...]
) -> Any:
    """One target's delta, its tensors and shapes checked first (``weight``: the shape the
    delta must have)."""
    import torch

    down, up = _tensor(fh, path, roles["down"]), _tensor(fh, path, roles["up"])
    if down.ndim < 2 or up.ndim < 2 or up.flatten(1).shape[1] != down.shape[0]:
        raise LoraRefused(
            str(path),
            f"up {list(up.shape)} and down {list(down.shape)} do not multiply (the up's "
            "columns and the down's rows are the rank)",
            [roles["up"], roles["down"]],
        )
    shape = (up.shape[0], down.flatten(1).shape[1])
    if shape != weight:
        raise LoraRefused(
            str(path),
            f"delta is {list(shape)} but the weight it names is {list(weight)} "
            "(a LoRA for another model?)",
            [roles["down"]],
        )
    scale = float(strength)
    if "alpha" in roles:
        alpha = _tensor(fh, path, roles["alpha"])
        if alpha.numel() != 1:
            raise LoraRefused(
                str(path), f"alpha must be one number, this one has shape {list(alpha.shape)}",
                [roles["alpha"]],
            )  # fmt: skip
        scale *= float(alpha.item()) / down.shape[0]
    # finite factors can still overflow float32 in the product: check it only when they could
    bound = float(up.abs().amax()) * float(down.abs().amax()) * down.shape[0] * abs(scale)
    delta = (up.flatten(1) @ down.flatten(1)) * scale
    if not bound < torch.finfo(torch.float32).max and not bool(torch.isfinite(delta).all()):
        raise LoraRefused(
            str(path), "delta overflows float32 (values far too large)", [roles["up"]]
        )
    return delta


def _tensor(fh: Any, path: Path, key: str) -> Any:
    """The tensor ``key`` as float32; refused unless floating point and finite."""
    import torch

    tensor = fh.get_tensor(key)
    if not tensor.is_floating_point():
        raise LoraRefused(
            str(path), f"tensors must be floating point, this one is {tensor.dtype}", [key]
        )
    tensor = tensor.to(torch.float32)
    if not bool(torch.isfinite(tensor).all()):
        raise LoraRefused(
            str(path),
            "holds NaN or Inf values (a diverged training run or a corrupted file)",
            [key],
        )
    return tensor


def _convert(path: Path, original: dict[str, Any], module: Any, detection: Any) -> dict[str, Any]:
    """Deltas on the base file's weights, converted (split) as the family converts them."""
    try:
        converted = detection.component.convert(original, detection.layout, detection.config)
    except (RuntimeError, ValueError, KeyError, IndexError) as exc:
        raise LoraRefused(
            str(path), f"deltas do not convert as the base file's weights do ({exc})",
            sorted(original),
        ) from None  # fmt: skip
    shapes = {key: tuple(value.shape) for key, value in module.state_dict().items()}
    for key, delta in converted.items():
        if shapes.get(key) != tuple(delta.shape):
            raise LoraRefused(
                str(path),
                f"converted delta is {list(delta.shape)} but the weight '{key}' is "
                f"{list(shapes[key]) if key in shapes else 'absent'}",
                sorted(original),
            )
    return converted


def apply_loras(module: Any, stack: LoraStack, detection: Any, stamps: tuple[Any, ...]) -> None:
    """Make ``module``'s weights its originals plus ``stack``'s deltas (nothing when empty).

    ``stamps`` identifies the files' contents (path, size, mtime each): the same stack on the
    same files is a no-op. Originals of touched weights are kept on the module and copied back
    first, so removing a stack restores the base exactly and no base weight is ever re-read.
    Every LoRA of the stack is read and checked before any weight changes, so a refused one
    leaves the module as it was; a merge that fails half-way puts the base back.
    """
    import torch

    key = tuple(
        (item.file, item.strength, stamp) for item, stamp in zip(stack.loras, stamps, strict=True)
    )
    with _LOCK:
        if getattr(module, "_inline_lora_key", ()) == key:
            return
        params = dict(module.named_parameters())
        total: dict[str, Any] = {}
        for item in stack.loras:
            for name, delta in lora_deltas(
                Path(item.file), item.strength, module, detection
            ).items():
                total[name] = total[name] + delta if name in total else delta
        for name in total:
            param = params.get(name)
            if param is None or param.is_meta or type(param.data) is not torch.Tensor:
                raise ValueError(
                    f"LoRA cannot change '{name}': the model is placed quantized or streamed; "
                    "LoRAs need it resident (or model-offloaded) in full precision"
                )
        backup: dict[str, Any] | None = getattr(module, "_inline_lora_backup", None)
        if backup is None:
            backup = module._inline_lora_backup = {}
        try:
            with torch.no_grad():
                _restore(params, backup)
                module._inline_lora_key = ()
                for name, delta in total.items():
                    param = params[name]
                    if name not in backup:
                        backup[name] = param.data.detach().clone()
                    merged = backup[name].to(torch.float32) + delta.to(param.device)
                    param.data.copy_(merged.to(param.dtype))
        except BaseException:
            with torch.no_grad():
                _restore(params, backup)  # never a half-merged stack
            raise
        if not stack.loras:
            backup.clear()
        module._inline_lora_key = key


def _restore(params: dict[str, Any], backup: dict[str, Any]) -> None:
    for name, original in backup.items():
        params[name].data.copy_(original)


def use_loras(module: Any, model_file: str, value: Any) -> LoraStack:
    """Put the stack on ``value`` (a ``lora`` input; ``None``: no LoRA) onto the transformer
    loaded from ``model_file``; the stack applied."""
    from ._families import detect
    from ._loading import file_key

    stack = as_stack(value)
    if not stack.loras and not getattr(module, "_inline_lora_key", ()):
        return stack
    detection = detect(Path(model_file), "diffusion")
    stamps = tuple(file_key(Path(item.file)) for item in stack.loras)
    apply_loras(module, stack, detection, stamps)
    return stack


class LoraWeights:
    """A call's LoRA stack, applied by the denoiser right before it runs the call's batch.

    Calls batch only with calls of the same stack (``key``), and the denoiser runs one batch at
    a time per transformer, so a stack is never changed under another call's steps.
    """

    __slots__ = ("_model_file", "_module", "_value", "key")

    def __init__(self, module: Any, model_file: str, value: Any) -> None:
        self._module, self._model_file, self._value = module, model_file, value
        stack = as_stack(value)
        self.key = tuple((item.file, float(item.strength)) for item in stack.loras)

    def apply(self) -> None:
        """Make the transformer's weights this stack's (restoring what others changed)."""
        use_loras(self._module, self._model_file, self._value)

    def stack_data(self) -> Any:
        """The stack as plain data (what a worker group's ranks apply to their own copies)."""
        return msgspec.to_builtins(as_stack(self._value))


def lora_weights(module: Any, model_file: str, value: Any) -> LoraWeights:
    """The stack on ``value`` (a ``lora`` input; ``None``: none), to be applied by the
    denoiser; refused at once (before any batching) if a LoRA file is unusable."""
    as_stack(value)
    return LoraWeights(module, model_file, value)
