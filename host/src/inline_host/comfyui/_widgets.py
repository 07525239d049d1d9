"""What a UI save does not say: each core node's widget names in order, and which nodes are
virtual (frontend-only). From ComfyUI's node definitions (``nodes.py``, ``comfy_extras``).

``widgets_values`` lists values by position; the frontend appends a ``control_after_generate``
widget after seed widgets, which never reaches the API prompt: it is named here and skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

CONTROL: Final = "control_after_generate"
#: Values a control widget takes (legacy saves store a boolean).
CONTROL_VALUES: Final = frozenset({"fixed", "increment", "decrement", "randomize"})

WIDGETS: Final[dict[str, tuple[str, ...]]] = {
    "UNETLoader": ("unet_name", "weight_dtype"),
    "CLIPLoader": ("clip_name", "type", "device"),
    "DualCLIPLoader": ("clip_name1", "clip_name2", "type", "device"),
    "VAELoader": ("vae_name",),
    "CheckpointLoaderSimple": ("ckpt_name",),
    "CLIPTextEncode": ("text",),
    "ConditioningZeroOut": (),
    "EmptyLatentImage": ("width", "height", "batch_size"),
    "EmptySD3LatentImage": ("width", "height", "batch_size"),
    "KSampler": ("seed", CONTROL, "steps", "cfg", "sampler_name", "scheduler", "denoise"),
    "KSamplerAdvanced": (
        "add_noise",
        "noise_seed",
        CONTROL,
        "steps",
        "cfg",
        "sampler_name",
        "scheduler",
        "start_at_step",
        "end_at_step",
        "return_with_leftover_noise",
    ),
    "SamplerCustom": ("add_noise", "noise_seed", CONTROL, "cfg"),
    "KSamplerSelect": ("sampler_name",),
    "KarrasScheduler": ("steps", "sigma_max", "sigma_min", "rho"),
    "BasicScheduler": ("scheduler", "steps", "denoise"),
    "RandomNoise": ("noise_seed", CONTROL),
    "ModelSamplingAuraFlow": ("shift",),
    "VAEDecode": (),
    "VAEEncode": (),
    "LoadImage": ("image", "upload"),
    "SaveImage": ("filename_prefix",),
    "PreviewImage": (),
    "LoraLoaderModelOnly": ("lora_name", "strength_model"),
    "LoraLoader": ("lora_name", "strength_model", "strength_clip"),
    "PrimitiveString": ("value",),
    "PrimitiveStringMultiline": ("value",),
    "PrimitiveInt": ("value", CONTROL),
    "PrimitiveFloat": ("value",),
    "PrimitiveBoolean": ("value",),
    "StringReplace": ("string", "find", "replace"),
    "FluxGuidance": ("guidance",),
    "ImageToMask": ("channel",),
    "FeatherMask": ("left", "top", "right", "bottom"),
    "VAEEncodeForInpaint": ("grow_mask_by",),
    "ModelSamplingFlux": ("max_shift", "base_shift", "width", "height"),
    "ControlNetLoader": ("control_net_name",),
    "ControlNetApply": ("strength",),
}

#: UI-only nodes: never in an API prompt (PrimitiveNode and Reroute are resolved through).
VIRTUAL: Final = frozenset(
    {
        "Note",
        "MarkdownNote",
        "Reroute",
        "PrimitiveNode",
        "Fast Muter (rgthree)",
        "Fast Groups Muter (rgthree)",
        "Fast Groups Bypasser (rgthree)",
        "Fast Bypasser (rgthree)",
        "Label (rgthree)",
        "Bookmark (rgthree)",
    }
)

#: Nodes ComfyUI executes as outputs (everything else runs only if an output needs it).
OUTPUT_NODES: Final = frozenset({"SaveImage", "PreviewImage"})


def widget_names(
    class_type: str, declared: list[str], extra: Mapping[str, tuple[str, ...]] | None = None
) -> tuple[str, ...]:
    """The widget names of ``class_type`` in order: packs' (``extra``), the table's, else the
    names the save itself declares on widget inputs (1.x frontends list them), with a control
    widget after a seed."""
    known = (extra or {}).get(class_type) or WIDGETS.get(class_type)
    if known is not None:
        return known
    names: list[str] = []
    for name in declared:
        names.append(name)
        if name in ("seed", "noise_seed"):
            names.append(CONTROL)
    return tuple(names)


def is_control_value(value: object) -> bool:
    """Whether ``value`` is what a ``control_after_generate`` widget stores."""
    return isinstance(value, bool) or value in CONTROL_VALUES
