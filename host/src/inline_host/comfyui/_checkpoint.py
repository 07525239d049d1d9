"""``CheckpointLoaderSimple`` workflows (SD 1.x, SDXL) as one ``diffusers/generate`` node.

A ComfyUI checkpoint is one file with the diffusion model, its text encoder and its VAE; the
primitives load Z-Image's parts, not these, but the diffusers pack loads such a file whole
(its ``checkpoint`` param). The rule for ``CheckpointLoaderSimple`` adds a stand-in
``load/checkpoint`` node; once the walk is done, ``to_diffusers`` folds the chain it feeds
(``sample`` of ``encode/text`` prompts, ``latent/empty`` or ``vae/encode`` of an image,
``vae/decode``) into the one node. A chain of another shape (a LoRA, a ControlNet, two
checkpoints in a row) is left unconverted, and the report says what stopped it.
"""

from __future__ import annotations

from typing import Any, Final

from ._convert import Converter
from ._prompt import PromptNode
from ._values import Edge, ModelValue, Value

#: The stand-in node the rule adds; ``to_diffusers`` replaces it (it is no node type).
CHECKPOINT: Final = "load/checkpoint"
DIFFUSERS: Final = "diffusers/generate"
#: Checkpoint suffixes that are pickles: the diffusers pack loads .safetensors only.
PICKLES: Final = (".ckpt", ".pt", ".pth", ".bin")


class NotDiffusers(ValueError):
    """The chain a checkpoint feeds is not one ``diffusers/generate`` node (the message says
    where it differs)."""


def checkpoint_loader(cv: Converter, node: PromptNode) -> dict[int, Value]:
    """``CheckpointLoaderSimple``: MODEL, CLIP and VAE of one file (folded later)."""
    file = str(cv.literal(node, "ckpt_name", "") or "")
    if file.lower().endswith(PICKLES):
        stem = file.rsplit(".", 1)[0]
        cv.warn(
            f"node {node.id} (CheckpointLoaderSimple): '{file}' is a pickle, which Inline does "
            f"not load; put the model's .safetensors release in models/checkpoints/ and pick it "
            f"(the node's checkpoint param, '{stem}.safetensors' for the same model)"
        )
    cv.add(node.id, CHECKPOINT, {"file": file})
    cv.became(node, f"{DIFFUSERS} (checkpoint '{file}')")
    edge = Edge(node.id, "model")
    return {0: ModelValue(edge), 1: Edge(node.id, "clip"), 2: Edge(node.id, "vae")}


def _find(nodes: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {n["id"]: n for n in nodes}


def _source(
    by_id: dict[str, dict[str, Any]], node: dict[str, Any], port: str, *types: str
) -> dict[str, Any] | None:
    edge = (node.get("inputs") or {}).get(port)
    if edge is None:
        return None
    src = by_id.get(edge["from"])
    if src is None or src["type"] not in types:
        got = src["type"] if src else "nothing"
        raise NotDiffusers(f"{node['id']}.{port} comes from {got}, not {' or '.join(types)}")
    return src


def _need(
    by_id: dict[str, dict[str, Any]], node: dict[str, Any], port: str, *types: str
) -> dict[str, Any]:
    src = _source(by_id, node, port, *types)
    if src is None:
        raise NotDiffusers(f"{node['id']}.{port} is not wired")
    return src


def _prompt(by_id: dict[str, dict[str, Any]], encode: dict[str, Any], ckpt: str) -> str:
    if _need(by_id, encode, "text_encoder", CHECKPOINT)["id"] != ckpt:
        raise NotDiffusers(f"{encode['id']} encodes with another checkpoint's text encoder")
    return str(_need(by_id, encode, "prompt", "input/text")["params"].get("text", ""))


def to_diffusers(
    nodes: list[dict[str, Any]], target: str | None, names: dict[str, tuple[str, str]], warn: Any
) -> tuple[list[dict[str, Any]], str]:
    """The ``diffusers/generate`` graph and its target; raise ``NotDiffusers``. ``names``: each
    sampler's ComfyUI sampler and scheduler (the pipeline samples with its own scheduler)."""
    by_id = _find(nodes)
    decode = by_id.get(target or "")
    if decode is None or decode["type"] != "vae/decode":
        raise NotDiffusers("the output is not a VAEDecode of the checkpoint's sampler")
    sample = _need(by_id, decode, "latent", "sample")
    ckpt = _need(by_id, sample, "model", CHECKPOINT)
    if _need(by_id, decode, "vae", CHECKPOINT)["id"] != ckpt["id"]:
        raise NotDiffusers(f"{decode['id']} decodes with another checkpoint's VAE")
    if (sample.get("inputs") or {}).get("lora") is not None:
        raise NotDiffusers("a LoRA on a checkpoint's model is not supported by diffusers/generate")
    file = str(ckpt["params"].get("file", ""))
    prompt = _prompt(by_id, _need(by_id, sample, "positive", "encode/text"), ckpt["id"])
    negative = _source(by_id, sample, "negative", "encode/text")
    latent = _need(by_id, sample, "latent", "latent/empty", "vae/encode")
    sp = sample["params"]
    params: dict[str, Any] = {
        "checkpoint": file,
        "negative_prompt": _prompt(by_id, negative, ckpt["id"]) if negative is not None else "",
        "steps": sp.get("steps", 20),
        "guidance": float(sp.get("cfg", 8.0)),
        "seed": sp.get("seed", -1),
    }
    sampler, scheduler = names.get(sample["id"], ("euler", "normal"))
    warn(
        f"{DIFFUSERS}: the checkpoint samples with its pipeline's own scheduler; sampler "
        f"'{sampler}' and scheduler '{scheduler}' are not applied"
    )
    prompt_id = f"{sample['id']}:prompt"
    out: list[dict[str, Any]] = [
        {"id": prompt_id, "type": "input/text", "params": {"text": prompt}}
    ]
    inputs: dict[str, Any] = {"prompt": {"from": prompt_id, "output": "text"}}
    if latent["type"] == "latent/empty":
        params["width"] = latent["params"].get("width", 512)
        params["height"] = latent["params"].get("height", 512)
        if latent["params"].get("batch", 1) != 1:
            warn(f"{DIFFUSERS}: the node renders one image, not a batch")
        if float(sp.get("denoise", 1.0)) != 1.0:
            warn(f"{DIFFUSERS}: denoise {sp['denoise']:g} on an empty latent is not applied")
    else:
        if _need(by_id, latent, "vae", CHECKPOINT)["id"] != ckpt["id"]:
            raise NotDiffusers(f"{latent['id']} encodes with another checkpoint's VAE")
        image = _need(by_id, latent, "image", "input/image")
        out.append(image)
        inputs["image"] = {"from": image["id"], "output": "image"}
        params["strength"] = float(sp.get("denoise", 1.0))
    out.append({"id": sample["id"], "type": DIFFUSERS, "params": params, "inputs": inputs})
    return out, sample["id"]
