"""The built-in mappings: ComfyUI's core nodes onto the primitives vocabulary.

They live with the importer, not in the primitives pack: converting a file must not start (or
build) a pack's torch venv, and these ids are the contract's own vocabulary. Packs add theirs
through ``inline_comfyui_mappings`` (see ``_packs``).
"""

from __future__ import annotations

from typing import Any, Final

from ._checkpoint import checkpoint_loader
from ._convert import Converter, Rule
from ._prompt import PromptNode
from ._values import Edge, ModelValue, SamplerChoice, Sigmas, Value, ZeroConditioning

#: ComfyUI sampler names -> ``sample``'s (the nearest equivalent; the rest run Euler).
SAMPLERS: Final = {"euler": "euler", "dpmpp_2m": "dpmpp_2m", "heun": "heun"}
SCHEDULERS: Final = {"simple": "simple", "karras": "karras"}
#: CLIPLoader types that load Z-Image's Qwen3 text encoder in ComfyUI.
ZIMAGE_CLIP_TYPES: Final = frozenset({"lumina2", "qwen_image"})
OUTPUTS: Final = frozenset({"SaveImage", "PreviewImage"})


def _loader(node_type: str, port: str, file_input: str) -> Rule:
    def rule(cv: Converter, node: PromptNode) -> dict[int, Value]:
        file = cv.literal(node, file_input, "")
        cv.add(node.id, node_type, {"file": file} if file else {})
        cv.became(node, f"{node_type} {node.id}")
        edge = Edge(node.id, port)
        return {0: ModelValue(edge) if port == "model" else edge}

    return rule


def unet_loader(cv: Converter, node: PromptNode) -> dict[int, Value]:
    dtype = cv.literal(node, "weight_dtype", "default")
    if dtype not in (None, "default"):
        cv.warn(
            f"node {node.id} (UNETLoader): weight_dtype '{dtype}' is not applied (the memory "
            "policy picks the dtype)"
        )
    return _loader("load/diffusion-model", "model", "unet_name")(cv, node)


def clip_loader(cv: Converter, node: PromptNode) -> dict[int, Value]:
    kind = cv.literal(node, "type", "")
    if kind and kind not in ZIMAGE_CLIP_TYPES:
        cv.warn(f"node {node.id} (CLIPLoader): type '{kind}' is loaded as Z-Image's text encoder")
    return _loader("load/text-encoder", "text_encoder", "clip_name")(cv, node)


def text_encode(cv: Converter, node: PromptNode) -> dict[int, Value]:
    clip = cv.input(node, "clip")
    text = node.inputs.get("text", "")
    text_edge: Edge | None
    if isinstance(text, str):
        text_id = cv.add(f"{node.id}:text", "input/text", {"text": text})
        text_edge = Edge(text_id, "text")
        made = f"input/text {text_id} + encode/text {node.id}"
    else:
        found = cv.input(node, "text")
        text_edge = found if isinstance(found, Edge) else None
        made = f"encode/text {node.id}"
        if text_edge is None:
            cv.warn(
                f"node {node.id} (CLIPTextEncode): its text comes from a node with no mapping; "
                "the prompt is left unwired"
            )
    if clip is None:
        cv.warn(f"node {node.id} (CLIPTextEncode): no text encoder is wired to 'clip'")
    cv.add(node.id, "encode/text", {}, {"text_encoder": _edge(clip), "prompt": text_edge})
    cv.became(node, made)
    return {0: Edge(node.id, "conditioning")}


def zero_out(cv: Converter, node: PromptNode) -> dict[int, Value]:
    cv.input(node, "conditioning")  # converted (and reported) as ComfyUI runs it
    cv.became(node, "the empty negative (sample's negative left unwired)")
    return {0: ZeroConditioning()}


def empty_latent(cv: Converter, node: PromptNode) -> dict[int, Value]:
    params = {
        "width": cv.integer(node, "width", 1024),
        "height": cv.integer(node, "height", 1024),
        "batch": cv.integer(node, "batch_size", 1),
    }
    cv.add(node.id, "latent/empty", params)
    cv.became(node, f"latent/empty {node.id}")
    return {0: Edge(node.id, "latent")}


def model_sampling(cv: Converter, node: PromptNode) -> dict[int, Value]:
    model = cv.input(node, "model")
    shift = cv.real(node, "shift", 3.0)
    cv.became(node, f"sample's shift = {shift:g}")
    if not isinstance(model, ModelValue):
        return {}
    return {0: ModelValue(model.edge, shift, model.lora)}


def lora_model_only(cv: Converter, node: PromptNode) -> dict[int, Value]:
    model = cv.input(node, "model")
    params = {
        "file": cv.literal(node, "lora_name", ""),
        "strength": cv.real(node, "strength_model", 1.0),
    }
    prev = model.lora if isinstance(model, ModelValue) else None
    cv.add(node.id, "load/lora", params, {"lora": prev})
    cv.became(node, f"load/lora {node.id} (on the sampler's lora input)")
    if not isinstance(model, ModelValue):
        cv.warn(f"node {node.id} (LoraLoaderModelOnly): no diffusion model is wired to 'model'")
        return {}
    return {0: ModelValue(model.edge, model.shift, Edge(node.id, "lora"))}


def lora_loader(cv: Converter, node: PromptNode) -> dict[int, Value]:
    """``LoraLoader``: the model half as ``LoraLoaderModelOnly``; the CLIP passes through."""
    outputs = lora_model_only(cv, node)
    clip = cv.input(node, "clip")
    if cv.real(node, "strength_clip", 1.0) != 0:
        cv.warn(f"node {node.id} (LoraLoader): the LoRA is not applied to the text encoder")
    if clip is not None:
        outputs[1] = clip
    return outputs


def sampler_select(cv: Converter, node: PromptNode) -> dict[int, Value]:
    name = str(cv.literal(node, "sampler_name", "euler"))
    cv.became(node, f"sample's sampler ('{name}')")
    return {0: SamplerChoice(name)}


def karras_scheduler(cv: Converter, node: PromptNode) -> dict[int, Value]:
    steps = cv.integer(node, "steps", 20)
    cv.became(node, f"sample's steps ({steps}) and scheduler 'karras'")
    cv.warn(
        f"node {node.id} (KarrasScheduler): sigma_max, sigma_min and rho are not mapped; "
        "sample's karras schedule uses the model's own sigma range"
    )
    return {0: Sigmas(steps, "karras")}


def basic_scheduler(cv: Converter, node: PromptNode) -> dict[int, Value]:
    steps = cv.integer(node, "steps", 20)
    scheduler = str(cv.literal(node, "scheduler", "simple"))
    denoise = cv.real(node, "denoise", 1.0)
    cv.became(node, f"sample's steps ({steps}), scheduler and denoise")
    return {0: Sigmas(steps, scheduler, denoise)}


def _edge(value: Value | None) -> Edge | None:
    if isinstance(value, ModelValue):
        return value.edge
    return value if isinstance(value, Edge) else None


def _names(cv: Converter, node: PromptNode, sampler: str, scheduler: str) -> dict[str, str]:
    cv.names[node.id] = (sampler, scheduler)
    got_sampler = SAMPLERS.get(sampler, "euler")
    got_scheduler = SCHEDULERS.get(scheduler, "simple")
    if got_sampler != sampler:
        cv.warn(
            f"node {node.id} ({node.class_type}): sampler '{sampler}' is mapped to its nearest "
            f"equivalent, '{got_sampler}'"
        )
    if got_scheduler != scheduler:
        cv.warn(
            f"node {node.id} ({node.class_type}): scheduler '{scheduler}' is mapped to its "
            f"nearest equivalent, '{got_scheduler}'"
        )
    return {"sampler": got_sampler, "scheduler": got_scheduler}


def _sample(cv: Converter, node: PromptNode, params: dict[str, Any]) -> dict[int, Value]:
    model = cv.input(node, "model")
    positive = cv.input(node, "positive")
    negative = cv.input(node, "negative")
    latent = cv.input(node, "latent_image")
    inputs: dict[str, Edge | None] = {
        "model": _edge(model),
        "positive": _edge(positive),
        "negative": _edge(negative),
        "latent": _edge(latent),
    }
    if isinstance(model, ModelValue):
        if model.shift is not None:
            params["shift"] = model.shift
        inputs["lora"] = model.lora
    if isinstance(positive, ZeroConditioning):
        cv.warn(f"node {node.id} ({node.class_type}): a zeroed positive is left unwired")
    for port in ("model", "positive", "latent"):
        if inputs[port] is None:
            cv.warn(f"node {node.id} ({node.class_type}): nothing convertible is wired to '{port}'")
    cv.add(node.id, "sample", params, inputs)
    cv.became(node, f"sample {node.id}")
    return {0: Edge(node.id, "latent")}


def ksampler(cv: Converter, node: PromptNode) -> dict[int, Value]:
    params: dict[str, Any] = {
        "seed": cv.integer(node, "seed", 0),
        "steps": cv.integer(node, "steps", 20),
        "cfg": cv.real(node, "cfg", 8.0),
        **_names(cv, node, str(cv.literal(node, "sampler_name", "euler")),
                 str(cv.literal(node, "scheduler", "simple"))),
        "denoise": cv.real(node, "denoise", 1.0),
    }  # fmt: skip
    return _sample(cv, node, params)


def ksampler_advanced(cv: Converter, node: PromptNode) -> dict[int, Value]:
    steps = cv.integer(node, "steps", 20)
    start = cv.integer(node, "start_at_step", 0)
    end = cv.integer(node, "end_at_step", 10000)
    params: dict[str, Any] = {
        "seed": cv.integer(node, "noise_seed", 0),
        "steps": steps,
        "cfg": cv.real(node, "cfg", 8.0),
        **_names(cv, node, str(cv.literal(node, "sampler_name", "euler")),
                 str(cv.literal(node, "scheduler", "simple"))),
        "denoise": max(0.0, min(1.0, (steps - start) / steps)) if steps else 1.0,
    }  # fmt: skip
    if start > 0:
        cv.warn(
            f"node {node.id} (KSamplerAdvanced): start_at_step {start} of {steps} becomes denoise "
            f"{params['denoise']:g}"
        )
    if end < steps:
        cv.warn(
            f"node {node.id} (KSamplerAdvanced): end_at_step {end} (stopping early) is not "
            "supported; all steps run"
        )
    if cv.literal(node, "add_noise", "enable") == "disable":
        cv.warn(
            f"node {node.id} (KSamplerAdvanced): add_noise 'disable' is not supported; noise is "
            "added"
        )
    return _sample(cv, node, params)


def sampler_custom(cv: Converter, node: PromptNode) -> dict[int, Value]:
    choice = cv.input(node, "sampler")
    sigmas = cv.input(node, "sigmas")
    name = choice.name if isinstance(choice, SamplerChoice) else "euler"
    steps, scheduler, denoise = 20, "simple", 1.0
    if isinstance(sigmas, Sigmas):
        steps, scheduler, denoise = sigmas.steps, sigmas.scheduler, sigmas.denoise
    else:
        cv.warn(
            f"node {node.id} (SamplerCustom): its sigmas have no mapping; 20 steps of 'simple' "
            "are used"
        )
    if not isinstance(choice, SamplerChoice):
        cv.warn(f"node {node.id} (SamplerCustom): its sampler has no mapping; 'euler' is used")
    if cv.literal(node, "add_noise", True) is False:
        cv.warn(f"node {node.id} (SamplerCustom): add_noise off is not supported; noise is added")
    params: dict[str, Any] = {
        "seed": cv.integer(node, "noise_seed", 0),
        "steps": steps,
        "cfg": cv.real(node, "cfg", 8.0),
        **_names(cv, node, name, scheduler),
        "denoise": denoise,
    }
    return _sample(cv, node, params)


def vae_decode(cv: Converter, node: PromptNode) -> dict[int, Value]:
    inputs = {"vae": _edge(cv.input(node, "vae")), "latent": _edge(cv.input(node, "samples"))}
    cv.add(node.id, "vae/decode", {}, inputs)
    cv.became(node, f"vae/decode {node.id}")
    return {0: Edge(node.id, "image")}


def vae_encode(cv: Converter, node: PromptNode) -> dict[int, Value]:
    inputs = {"vae": _edge(cv.input(node, "vae")), "image": _edge(cv.input(node, "pixels"))}
    cv.add(node.id, "vae/encode", {}, inputs)
    cv.became(node, f"vae/encode {node.id}")
    return {0: Edge(node.id, "latent")}


def load_image(cv: Converter, node: PromptNode) -> dict[int, Value]:
    name = str(cv.literal(node, "image", ""))
    if name.startswith("sha256-"):
        asset: dict[str, Any] = {"ref": "asset", "id": name.split(" ")[0]}
    else:
        clean = name.removesuffix(" [input]").removesuffix(" [output]")
        if cv.base_dir is None:
            # over HTTP: the name is passed on as written and the file system is never looked
            # at here (a run checks it against the input roots, saying nothing of what exists)
            asset = {"ref": "path", "path": clean}
        else:
            path = cv.base_dir / clean
            if not path.is_file():
                cv.warn(
                    f"node {node.id} (LoadImage): '{clean}' is not next to the workflow; put it "
                    f"there or set node {node.id}'s asset (inline assets add FILE)"
                )
            asset = {"ref": "path", "path": str(path.resolve() if path.is_file() else path)}
    cv.add(node.id, "input/image", {"asset": asset})
    cv.became(node, f"input/image {node.id}")
    return {0: Edge(node.id, "image")}


def save_image(cv: Converter, node: PromptNode) -> dict[int, Value]:
    images = cv.input(node, "images")
    if not isinstance(images, Edge):
        cv.warn(f"node {node.id} ({node.class_type}): nothing convertible is wired to 'images'")
        cv.became(node, "an output with nothing convertible to show")
        return {}
    if cv.target is None:
        cv.target = images.node
        prefix = cv.literal(node, "filename_prefix", "") if node.class_type == "SaveImage" else ""
        if isinstance(prefix, str) and prefix.strip():
            cv.output_names[images.node] = prefix.strip()
        cv.became(node, f"the run's target ({images.node})")
    else:
        cv.became(node, f"another output ({images.node}); not the run's target")
    return {}


def primitive_string(cv: Converter, node: PromptNode) -> dict[int, Value]:
    cv.add(node.id, "input/text", {"text": str(cv.literal(node, "value", ""))})
    cv.became(node, f"input/text {node.id}")
    return {0: Edge(node.id, "text")}


BUILTIN_RULES: Final[dict[str, Rule]] = {
    "CheckpointLoaderSimple": checkpoint_loader,
    "UNETLoader": unet_loader,
    "CLIPLoader": clip_loader,
    "VAELoader": _loader("load/vae", "vae", "vae_name"),
    "CLIPTextEncode": text_encode,
    "ConditioningZeroOut": zero_out,
    "EmptySD3LatentImage": empty_latent,
    "EmptyLatentImage": empty_latent,
    "ModelSamplingAuraFlow": model_sampling,
    "LoraLoaderModelOnly": lora_model_only,
    "LoraLoader": lora_loader,
    "KSampler": ksampler,
    "KSamplerAdvanced": ksampler_advanced,
    "SamplerCustom": sampler_custom,
    "KSamplerSelect": sampler_select,
    "KarrasScheduler": karras_scheduler,
    "BasicScheduler": basic_scheduler,
    "VAEDecode": vae_decode,
    "VAEEncode": vae_encode,
    "LoadImage": load_image,
    "SaveImage": save_image,
    "PreviewImage": save_image,
    "PrimitiveString": primitive_string,
    "PrimitiveStringMultiline": primitive_string,
}
