"""``--one-click``: a Z-Image-shaped primitive graph as one ``alibaba/z-image-turbo`` node.

The shape: the target is ``vae/decode`` of one ``sample`` whose model comes from
``load/diffusion-model``, whose prompts are ``encode/text`` of ``input/text`` through one
``load/text-encoder``, and whose latent is ``latent/empty`` or ``vae/encode`` of an image.
"""

from __future__ import annotations

from typing import Any, Final

ONE_CLICK: Final = "alibaba/z-image-turbo"
#: ComfyUI sampler / scheduler names -> the one-click node's.
SAMPLERS: Final = {"euler": "euler", "euler_ancestral": "euler_a", "euler_a": "euler_a"}
SCHEDULERS: Final = {s: s for s in ("simple", "karras", "exponential", "beta")}


class NotOneClick(ValueError):
    """Raised when the graph is not Z-Image-shaped (the message says where it differs)."""


class _Graph:
    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.by_id = {n["id"]: n for n in nodes}

    def source(self, node: dict[str, Any], port: str, *types: str) -> dict[str, Any] | None:
        edge = (node.get("inputs") or {}).get(port)
        if edge is None:
            return None
        src = self.by_id.get(edge["from"])
        if src is None or (types and src["type"] not in types):
            got = src["type"] if src else "nothing"
            raise NotOneClick(f"{node['id']}.{port} comes from {got}, not {' or '.join(types)}")
        return src

    def need(self, node: dict[str, Any], port: str, *types: str) -> dict[str, Any]:
        src = self.source(node, port, *types)
        if src is None:
            raise NotOneClick(f"{node['id']}.{port} is not wired")
        return src


def _text(g: _Graph, encode: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    prompt = g.need(encode, "prompt", "input/text")
    return str(prompt["params"].get("text", "")), g.need(
        encode, "text_encoder", "load/text-encoder"
    )


def one_click(
    nodes: list[dict[str, Any]], target: str | None, names: dict[str, tuple[str, str]], warn: Any
) -> tuple[list[dict[str, Any]], str]:
    """The one-click graph and its target; raise ``NotOneClick``. ``names``: each sample's
    ComfyUI sampler and scheduler names (the one-click node knows more than ``sample``)."""
    g = _Graph(nodes)
    decode = g.by_id.get(target or "")
    if decode is None or decode["type"] != "vae/decode":
        raise NotOneClick("the target is not a vae/decode")
    sample = g.need(decode, "latent", "sample")
    vae = g.need(decode, "vae", "load/vae")
    model = g.need(sample, "model", "load/diffusion-model")
    prompt, te = _text(g, g.need(sample, "positive", "encode/text"))
    negative = g.source(sample, "negative", "encode/text")
    negative_prompt = _text(g, negative)[0] if negative is not None else ""
    latent = g.need(sample, "latent", "latent/empty", "vae/encode")
    sp = sample["params"]
    sampler, scheduler = names.get(
        sample["id"], (sp.get("sampler", "euler"), sp.get("scheduler", "simple"))
    )
    params: dict[str, Any] = {
        "negative_prompt": negative_prompt,
        "steps": sp.get("steps", 8),
        "guidance": max(0.0, float(sp.get("cfg", 1.0)) - 1.0),
        "sampler": SAMPLERS.get(sampler, "euler"),
        "scheduler": SCHEDULERS.get(scheduler, "simple"),
        "seed": sp.get("seed", -1),
    }
    for key, src in (("model", model), ("vae", vae), ("text_encoder", te)):
        if src["params"].get("file"):
            params[key] = src["params"]["file"]
    if SAMPLERS.get(sampler) is None or SCHEDULERS.get(scheduler) is None:
        warn(
            f"one-click: sampler '{sampler}' / scheduler '{scheduler}' become "
            f"'{params['sampler']}' / '{params['scheduler']}'"
        )
    if float(sp.get("shift", 3.0)) != 3.0:
        warn(f"one-click: the node samples with shift 3, not {sp['shift']:g}")
    out: list[dict[str, Any]] = [
        {"id": f"{sample['id']}:prompt", "type": "input/text", "params": {"text": prompt}}
    ]
    inputs: dict[str, Any] = {"prompt": {"from": f"{sample['id']}:prompt", "output": "text"}}
    if latent["type"] == "latent/empty":
        params["width"] = latent["params"].get("width", 1024)
        params["height"] = latent["params"].get("height", 1024)
        if latent["params"].get("batch", 1) != 1:
            warn("one-click: the node renders one image, not a batch")
    else:
        image = g.need(latent, "image", "input/image")
        out.append(image)
        inputs["image"] = {"from": image["id"], "output": "image"}
        params["strength"] = sp.get("denoise", 1.0)
        warn("one-click: the input image is resized to the node's width and height (1024x1024)")
    lora_edge = (sample.get("inputs") or {}).get("lora")
    chain: list[dict[str, Any]] = []
    while lora_edge is not None:
        lora = g.by_id[lora_edge["from"]]
        chain.append(lora)
        lora_edge = (lora.get("inputs") or {}).get("lora")
    out += reversed(chain)
    if chain:
        inputs["lora"] = {"from": chain[0]["id"], "output": "lora"}
    zid = sample["id"]
    out.append({"id": zid, "type": ONE_CLICK, "params": params, "inputs": inputs})
    return out, zid
