"""LoRA on the tiny Z-Image through real workers, and the imported ComfyUI example's parity with
the hand-written primitive graph (tiny models saved under the workflow's file names)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from inline_core import GraphInvalid, NodeFailed
from inline_host import Engine
from inline_host.comfyui import import_comfyui

from ..e2e._graphs import n, request
from ._png import assert_other_image, assert_same_image
from .conftest import Tiny, install_comfy_layout
from .test_render import PROMPT, render

pytestmark = pytest.mark.anyio
HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data" / "comfyui"


@pytest.fixture(scope="module", autouse=True)
def models(tiny: Tiny, settings) -> Path:
    """The tiny models, again under the example workflow's names, and the test's LoRAs."""
    root = install_comfy_layout(tiny, settings.models_dir)
    for sub, src, dst in (
        ("diffusion_models", "tiny_z_image_turbo.safetensors", "z_image_turbo_bf16.safetensors"),
        ("vae", "tiny_ae.safetensors", "ae.safetensors"),
        ("text_encoders", "tiny_qwen3.safetensors", "qwen_3_4b.safetensors"),
    ):
        shutil.copy(root / sub / src, root / sub / dst)
    (root / "loras").mkdir(exist_ok=True)
    base = root / "diffusion_models" / "tiny_z_image_turbo.safetensors"
    proc = subprocess.run(
        [str(tiny.python), str(HERE / "_tiny_lora.py"), str(base), str(root)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


def graph(
    model: str = "tiny_z_image_turbo.safetensors", *loras: tuple[str, float]
) -> dict[str, Any]:
    nodes = [
        n("p", "input/text", {"text": PROMPT}),
        n("m", "load/diffusion-model", {"file": model}),
        n("v", "load/vae", {"file": "tiny_ae.safetensors"}),
        n("t", "load/text-encoder", {"file": "tiny_qwen3.safetensors"}),
        n("c", "encode/text", {}, text_encoder=("t", "text_encoder"), prompt=("p", "text")),
        n("l", "latent/empty", {"width": 256, "height": 256}),
    ]
    prev = None
    for i, (file, strength) in enumerate(loras):
        inputs = {"lora": (prev, "lora")} if prev else {}
        nodes.append(n(f"lora{i}", "load/lora", {"file": file, "strength": strength}, **inputs))
        prev = f"lora{i}"
    wired: dict[str, Any] = {
        "model": ("m", "model"),
        "positive": ("c", "conditioning"),
        "latent": ("l", "latent"),
    }
    if prev:
        wired["lora"] = (prev, "lora")
    nodes.append(n("s", "sample", {"steps": 4, "cfg": 1.0, "seed": 7}, **wired))
    nodes.append(n("d", "vae/decode", {}, vae=("v", "vae"), latent=("s", "latent")))
    return request("d", *nodes)


async def test_strength_zero_is_no_lora_and_one_is_merged_by_hand(engine: Engine):
    base, _ = await render(engine, graph())
    zero, _ = await render(
        engine, graph("tiny_z_image_turbo.safetensors", ("tiny_kohya.safetensors", 0.0))
    )
    one, _ = await render(
        engine, graph("tiny_z_image_turbo.safetensors", ("tiny_kohya.safetensors", 1.0))
    )
    by_hand, _ = await render(engine, graph("tiny_merged_by_hand.safetensors"))
    assert_same_image(zero, base, "strength 0 against no LoRA")
    assert_same_image(one, by_hand, "strength 1 against the weights merged by hand")
    assert_other_image(one, base, "strength 1 against no LoRA")
    # removing the LoRA restores the base weights (the same loaded model, not reloaded)
    again, _ = await render(engine, graph())
    assert_same_image(again, base, "the LoRA removed against no LoRA")


async def test_peft_layout_and_stacking(engine: Engine):
    base, _ = await render(engine, graph())
    peft, _ = await render(
        engine, graph("tiny_z_image_turbo.safetensors", ("tiny_peft.safetensors", 1.0))
    )
    both, _ = await render(
        engine,
        graph(
            "tiny_z_image_turbo.safetensors",
            ("tiny_kohya.safetensors", 1.0),
            ("tiny_peft.safetensors", 1.0),
        ),
    )
    kohya, _ = await render(
        engine, graph("tiny_z_image_turbo.safetensors", ("tiny_kohya.safetensors", 1.0))
    )
    named = {"none": base, "peft": peft, "both": both, "kohya": kohya}
    for i, (a, x) in enumerate(named.items()):
        for b, y in list(named.items())[i + 1 :]:
            assert_other_image(x, y, f"LoRA {a} against {b}")


async def test_a_file_matching_no_layout_is_refused_naming_its_keys(engine: Engine):
    engine.cache.clear()
    with pytest.raises(NodeFailed) as info:
        await engine.run(graph("tiny_z_image_turbo.safetensors", ("not_a_lora.safetensors", 1.0)))
    text = str(info.value) + str(getattr(info.value, "__cause__", ""))
    assert "bar.bias" in text and "foo.weight" in text, text


async def test_cache_key_has_the_files_hash_and_strength(engine: Engine, models: Path):
    def key(strength: float) -> str:
        plan = engine.prepare(
            graph("tiny_z_image_turbo.safetensors", ("tiny_peft.safetensors", strength))
        )
        return plan.node("s").key

    before = key(1.0)
    assert key(0.5) != before
    lora = models / "loras" / "tiny_peft.safetensors"
    saved = lora.read_bytes()
    try:
        lora.write_bytes(saved[:-4] + bytes(4))  # same size, other content
        assert key(1.0) != before
    finally:
        lora.write_bytes(saved)
    assert key(1.0) == before


async def test_the_one_click_node_takes_the_lora_stack(engine: Engine):
    prim, _ = await render(
        engine, graph("tiny_z_image_turbo.safetensors", ("tiny_kohya.safetensors", 1.0))
    )
    doc = request(
        "z",
        n("p", "input/text", {"text": PROMPT}),
        n("k", "load/lora", {"file": "tiny_kohya.safetensors", "strength": 1.0}),
        n("z", "alibaba/z-image-turbo", {"width": 256, "height": 256, "steps": 4, "seed": 7},
          prompt=("p", "text"), lora=("k", "lora")),
    )  # fmt: skip
    click, value = await render(engine, doc)
    assert_same_image(click, prim, "the one-click node against the primitives")
    assert value.params["loras"][0]["strength"] == 1.0


def hand_written_example() -> dict[str, Any]:
    """The official Z-Image example (z_image_turbo_example), written by hand as primitives."""
    ui = (DATA / "z_image_turbo_example.api.json").read_text()
    import json

    api = json.loads(ui)
    pos, neg, ks = api["6"]["inputs"]["text"], api["7"]["inputs"]["text"], api["3"]["inputs"]
    return request(
        "decode",
        n("pos", "input/text", {"text": pos}),
        n("neg", "input/text", {"text": neg}),
        n("unet", "load/diffusion-model", {"file": "z_image_turbo_bf16.safetensors"}),
        n("clip", "load/text-encoder", {"file": "qwen_3_4b.safetensors"}),
        n("vae", "load/vae", {"file": "ae.safetensors"}),
        n("cp", "encode/text", {}, text_encoder=("clip", "text_encoder"), prompt=("pos", "text")),
        n("cn", "encode/text", {}, text_encoder=("clip", "text_encoder"), prompt=("neg", "text")),
        n("lat", "latent/empty", {"width": 1024, "height": 1024, "batch": 1}),
        n("k", "sample", {"seed": ks["seed"], "steps": 9, "cfg": 1.0, "sampler": "euler",
                          "scheduler": "simple", "denoise": 1.0},
          model=("unet", "model"), positive=("cp", "conditioning"), negative=("cn", "conditioning"),
          latent=("lat", "latent")),
        n("decode", "vae/decode", {}, vae=("vae", "vae"), latent=("k", "latent")),
    )  # fmt: skip


async def test_the_imported_example_renders_as_the_hand_written_graph(engine: Engine):
    imported = import_comfyui((DATA / "z_image_turbo_example.ui.json").read_bytes())
    assert imported.report.complete
    ours, _ = await render(engine, imported.document)
    hand, _ = await render(engine, hand_written_example())
    assert_same_image(ours, hand, "the imported example against the hand-written graph")
    try:
        engine.prepare({"graph": imported.graph, "target": imported.target})
    except GraphInvalid as exc:  # pragma: no cover - a failure shows every problem
        raise AssertionError(exc) from None


def test_loading_a_lora_never_rereads_the_base_and_removing_it_restores_it(
    tiny: Tiny, models: Path
):
    import json

    proc = subprocess.run(
        [str(tiny.python), str(HERE / "_lora_probe.py"), str(models)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    probe = json.loads(proc.stdout.strip().splitlines()[-1])
    assert probe["same"] is True and probe["restored"] is True
    assert probe["zero_changed"] == []  # strength 0: every weight the base's, bit for bit
    assert probe["opened"] == [str(models / "loras" / "tiny_kohya.safetensors")]
    # the fused qkv delta lands split on to_q/to_k/to_v, plus the other two targets
    assert "layers.0.attention.to_k.weight" in probe["changed"]
    assert "layers.0.feed_forward.w1.weight" in probe["changed"]
    assert "layers.1.attention.to_out.0.weight" in probe["changed"]
