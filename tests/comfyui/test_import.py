"""The ComfyUI importer on real workflows (tests/data/comfyui: copied unedited, see its README)."""

from __future__ import annotations

import contextlib
import copy
import json
import random
import struct
import zlib
from pathlib import Path
from typing import Any

import msgspec
import pluggy
import pytest
from inline_host.comfyui import NotAWorkflow, import_comfyui, png_text_chunks, render_text
from inline_host.comfyui._flatten import flatten
from inline_host.comfyui._prompt import from_api
from inline_sdk import ComfyMapping, NodeDeclarationError, hookimpl, hookspecs
from inline_sdk._worker import collect_mappings

DATA = Path(__file__).resolve().parents[1] / "data" / "comfyui"
COMMUNITY = DATA / "community"


def load(name: str, **kw: Any):
    path = DATA / name
    return import_comfyui(path.read_bytes(), where=name, base_dir=path.parent, **kw)


def node(imported, node_id: str) -> dict[str, Any]:
    return next(n for n in imported.graph["nodes"] if n["id"] == node_id)


def row(imported, node_id: str):
    return next(r for r in imported.report.nodes if r.id == node_id)


def test_the_official_example_ui_and_api_give_one_graph():
    ui, api = load("z_image_turbo_example.ui.json"), load("z_image_turbo_example.api.json")
    assert ui.document == api.document
    assert ui.report.complete and api.report.complete and ui.target == "8"
    k = node(ui, "3")
    assert k["type"] == "sample"
    assert k["params"] == {
        "seed": 47447417949230, "steps": 9, "cfg": 1.0, "sampler": "euler",
        "scheduler": "simple", "denoise": 1.0,
    }  # fmt: skip
    assert k["inputs"]["model"] == {
        "from": "16",
        "output": "model",
    }  # the bypassed node passes through
    assert row(ui, "11").status == "dropped" and "bypassed" in row(ui, "11").reason
    assert row(ui, "9").became == "the run's target (8)"
    assert node(ui, "6:text")["params"]["text"].startswith("cute anime style girl")


@pytest.mark.parametrize(
    "pair", ["z_image_turbo_example", "sdxl_simple_base_refiner", "flux_dev_unet_dualclip"]
)
def test_flattening_a_ui_save_gives_its_api_prompt(pair: str):
    """graphToPrompt's rules (primitives pushed into widgets, bypass, control widgets skipped)
    checked against the API prompt ComfyUI itself wrote for the same workflow."""
    ui = flatten(json.loads((DATA / f"{pair}.ui.json").read_text()))
    api = from_api(json.loads((DATA / f"{pair}.api.json").read_text()))
    assert set(ui.nodes) == set(api.nodes)
    known = [nid for nid, n in api.nodes.items() if n.class_type != "ModelSamplingFlux"]
    for nid in known:
        assert ui.nodes[nid].inputs == api.nodes[nid].inputs, nid


def test_a_subgraph_template_is_flattened():
    imported = load("z_image_turbo_template_subgraph.ui.json")
    assert imported.report.complete
    assert imported.target == "57:8"
    k = node(imported, "57:3")
    assert k["params"]["shift"] == 3.0 and k["params"]["steps"] == 8
    assert "negative" not in k["inputs"]  # ConditioningZeroOut: the empty negative
    assert any("res_multistep" in w and "'euler'" in w for w in imported.report.warnings)
    assert row(imported, "57:33").became.startswith("the empty negative")
    assert row(imported, "35").reason.startswith("virtual")


def test_a_dangling_lora_in_a_png_is_left_out():
    imported = load("community/zimage_turbo_lora_dangling.embedded.png")
    assert imported.report.source == "png:workflow" and imported.report.complete
    assert not [n for n in imported.graph["nodes"] if n["type"] == "load/lora"]
    assert "not upstream" in row(imported, "72").reason
    k = node(imported, "70")
    assert k["params"]["seed"] == 191048568939468 and k["params"]["shift"] == 3.0


def test_a_connected_lora_reaches_the_sampler():
    chunks = png_text_chunks((COMMUNITY / "zimage_turbo_lora_dangling.embedded.png").read_bytes())
    prompt = json.loads(chunks["prompt"])
    prompt["72"]["inputs"]["model"] = ["66", 0]
    prompt["69"]["inputs"]["model"] = ["72", 0]
    imported = import_comfyui(json.dumps(prompt).encode())
    lora = node(imported, "72")
    assert lora["type"] == "load/lora"
    assert lora["params"] == {"file": "zflostyle5.safetensors", "strength": 1.0}
    k = node(imported, "70")
    assert k["inputs"]["lora"] == {"from": "72", "output": "lora"}
    assert k["inputs"]["model"] == {"from": "66", "output": "model"}
    click = import_comfyui(json.dumps(prompt).encode(), one_click_node=True)
    z = node(click, "70")
    assert z["type"] == "alibaba/z-image-turbo" and z["inputs"]["lora"]["from"] == "72"


def test_reroutes_primitives_muted_nodes_and_custom_nodes():
    imported = load("community/zimage_turbo_amazing_v1_reroute_primitive_muted_rgthree.ui.json")
    report = imported.report
    assert not report.complete
    assert {u.class_type: u.ids for u in report.unmapped} == {
        "Any Switch (rgthree)": ["87"],
        "StringReplace": ["31"],
    }
    for muted in ("37", "38", "41", "43", "45", "47", "63"):
        assert row(imported, muted).reason.startswith("muted")
    assert row(imported, "71").reason.startswith("virtual")  # a Reroute
    assert "not upstream" in row(imported, "50").reason  # the CivitAI decoy sampler
    k = node(imported, "67")
    assert k["params"]["seed"] == 1 and k["params"]["steps"] == 8  # from PrimitiveNodes
    assert k["params"]["scheduler"] == "karras"
    assert k["inputs"]["model"] == {"from": "92", "output": "model"}  # through the reroutes
    assert "!!" in render_text(report)


def test_a_link_claimed_by_two_inputs_wires_both_and_is_reported():
    imported = load("community/zimage_turbo_img2img_handwritten.ui.json")
    assert imported.report.complete and imported.target == "8"  # PreviewImage is the output
    for enc in ("4", "5"):
        assert node(imported, enc)["inputs"]["text_encoder"] == {
            "from": "2",
            "output": "text_encoder",
        }
    assert any("link 2 is claimed by 2 inputs" in w for w in imported.report.warnings)
    assert any("'beta'" in w for w in imported.report.warnings)
    image = node(imported, "10")
    assert image["type"] == "input/image" and image["params"]["asset"]["ref"] == "path"
    assert any(
        "example.png" in w and "not next to the workflow" in w for w in imported.report.warnings
    )
    assert node(imported, "11")["type"] == "vae/encode"
    assert node(imported, "7")["params"]["denoise"] == 0.55


def test_string_node_ids():
    imported = load("community/zimage_turbo_img2img_string_ids.api.json")
    assert imported.report.complete
    assert imported.target == "ZIT:vaeDecode"
    assert node(imported, "ZIT:sampler")["inputs"]["latent"] == {
        "from": "ZIT:vaeEncode",
        "output": "latent",
    }


def test_load_image_next_to_the_workflow(tmp_path: Path):
    (tmp_path / "example_input.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    data = (COMMUNITY / "zimage_turbo_img2img_string_ids.api.json").read_bytes()
    imported = import_comfyui(data, base_dir=tmp_path)
    asset = node(imported, "ZIT:loadImage")["params"]["asset"]
    assert asset == {"ref": "path", "path": str((tmp_path / "example_input.png").resolve())}


def test_custom_nodes_are_named_in_the_unmapped_report():
    imported = load("community/sd15_ipadapter_simple_custom_nodes.ui.json")
    unmapped = {u.class_type: u.ids for u in imported.report.unmapped}
    assert unmapped["IPAdapterUnifiedLoader"] == ["11"] and unmapped["IPAdapter"] == ["10"]


def test_duplicate_and_missing_links_are_warnings_not_crashes():
    data = json.loads((DATA / "z_image_turbo_example.ui.json").read_text())
    broken = copy.deepcopy(data)
    first = broken["links"][0]
    broken["links"].append(list(first))  # an exact duplicate
    broken["links"].append([first[0], first[1], first[2], 999, 0, first[5]])  # same id, other end
    sampler = next(n for n in broken["nodes"] if n["id"] == 3)
    latent_in = next(i for i in sampler["inputs"] if i["name"] == "latent_image")
    latent_in["link"] = 4242  # not in the table
    imported = import_comfyui(json.dumps(broken).encode())
    warnings = " | ".join(imported.report.warnings)
    assert "appears twice" in warnings and "link 4242 is not in the links table" in warnings
    assert "latent" not in node(imported, "3")["inputs"]


def test_the_one_click_node():
    imported = load("z_image_turbo_example.ui.json", one_click_node=True)
    assert imported.report.one_click
    (text,) = [n for n in imported.graph["nodes"] if n["type"] == "input/text"]
    z = node(imported, imported.target)
    assert z["type"] == "alibaba/z-image-turbo"
    assert z["params"]["model"] == "z_image_turbo_bf16.safetensors"
    assert z["params"]["steps"] == 9 and z["params"]["guidance"] == 0.0
    assert z["params"]["negative_prompt"] == "blurry ugly bad"
    assert z["inputs"]["prompt"] == {"from": text["id"], "output": "text"}
    kept = load("community/sd15_ipadapter_simple_custom_nodes.ui.json", one_click_node=True)
    assert not kept.report.one_click
    assert any("not a Z-Image-shaped graph" in w for w in kept.report.warnings)


def test_packs_mappings_extend_the_vocabulary():
    mapping = ComfyMapping(
        class_type="IPAdapter", node="acme/ip-adapter", inputs={"model": "model"},
        params={"weight": "weight"}, outputs=["model"], widgets=["weight", "start_at", "end_at"],
    )  # fmt: skip
    imported = load("community/sd15_ipadapter_simple_custom_nodes.ui.json", mappings=[mapping])
    assert "IPAdapter" not in {u.class_type for u in imported.report.unmapped}
    assert node(imported, "10")["type"] == "acme/ip-adapter"
    assert node(imported, "10")["params"] == {"weight": 0.8}


def test_a_pack_declares_mappings_through_the_hook():
    class Plugin:
        @hookimpl
        def inline_comfyui_mappings(self) -> list[ComfyMapping]:
            return [ComfyMapping(class_type="X", node="acme/x")]

    class Bad:
        @hookimpl
        def inline_comfyui_mappings(self) -> list[Any]:
            return [{"class_type": "Y"}]

    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.register(Plugin())
    assert [m.node for m in collect_mappings(pm)] == ["acme/x"]
    pm.register(Bad())
    with pytest.raises(NodeDeclarationError, match="not a ComfyMapping"):
        collect_mappings(pm)


def _png(chunks: list[tuple[bytes, bytes]]) -> bytes:
    out = b"\x89PNG\r\n\x1a\n"
    for ctype, body in [(b"IHDR", b"\x00" * 13), *chunks, (b"IEND", b"")]:
        out += (
            struct.pack(">I", len(body))
            + ctype
            + body
            + struct.pack(">I", zlib.crc32(ctype + body))
        )
    return out


def test_png_text_chunks_of_every_kind():
    api = (DATA / "z_image_turbo_example.api.json").read_bytes()
    ztxt = _png([(b"zTXt", b"prompt\x00\x00" + zlib.compress(api))])
    assert load_bytes(ztxt).report.source == "png:prompt"
    itxt = _png([(b"iTXt", b"prompt\x00\x01\x00en\x00\x00" + zlib.compress(api))])
    assert load_bytes(itxt).target == "8"


def load_bytes(data: bytes):
    return import_comfyui(data, where="test.png")


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not json",
        b'{"a": 1}',
        b"[1, 2]",
        _png([]),
        _png([(b"tEXt", b"prompt\x00{oops")]),
        b"\xff\xfe\x00",
    ],
)
def test_what_is_not_a_workflow_is_refused(data: bytes):
    with pytest.raises(NotAWorkflow, match="not a ComfyUI workflow"):
        import_comfyui(data, where="upload")


JUNK: list[Any] = [None, 1, -1, 2.5, "x", [], {}, [1], ["a", 0], True, {"name": 3}, [None] * 6]


def _mutate(obj: Any, rng: random.Random) -> None:
    if isinstance(obj, dict) and obj:
        key = rng.choice(list(obj))
        if rng.random() < 0.3:
            obj[key] = copy.deepcopy(rng.choice(JUNK))
        elif rng.random() < 0.2:
            del obj[key]
        else:
            _mutate(obj[key], rng)
    elif isinstance(obj, list) and obj:
        i = rng.randrange(len(obj))
        if rng.random() < 0.3:
            obj[i] = copy.deepcopy(rng.choice(JUNK))
        else:
            _mutate(obj[i], rng)


def test_damaged_workflows_never_crash_the_importer():
    """Real files with random damage: a result with warnings, or NotAWorkflow; nothing else."""
    rng = random.Random(13)
    files = sorted(DATA.rglob("*.json"))
    for _ in range(150):
        data = json.loads(rng.choice(files).read_text())
        for _ in range(rng.randint(1, 4)):
            _mutate(data, rng)
        with contextlib.suppress(NotAWorkflow):
            import_comfyui(json.dumps(data).encode(), one_click_node=rng.random() < 0.3)


def test_lora_loader_stacks_on_the_model_and_passes_the_clip():
    prompt = json.loads((DATA / "z_image_turbo_example.api.json").read_text())
    prompt["20"] = {
        "class_type": "LoraLoader",
        "inputs": {"lora_name": "a.safetensors", "strength_model": 0.5, "strength_clip": 1,
                   "model": ["16", 0], "clip": ["18", 0]},
    }  # fmt: skip
    prompt["21"] = {
        "class_type": "LoraLoaderModelOnly",
        "inputs": {"lora_name": "b.safetensors", "strength_model": 1.0, "model": ["20", 0]},
    }
    prompt["3"]["inputs"]["model"] = ["21", 0]
    prompt["6"]["inputs"]["clip"] = ["20", 1]
    imported = import_comfyui(json.dumps(prompt).encode())
    assert imported.report.complete
    assert node(imported, "21")["inputs"]["lora"] == {"from": "20", "output": "lora"}
    assert node(imported, "3")["inputs"]["lora"] == {"from": "21", "output": "lora"}
    assert node(imported, "6")["inputs"]["text_encoder"] == {"from": "18", "output": "text_encoder"}
    assert any("not applied to the text encoder" in w for w in imported.report.warnings)


def test_cached_handshakes_give_the_command_line_packs_mappings(tmp_path: Path):
    from inline_host.comfyui._sources import cached_mappings
    from inline_sdk.protocol import Welcome

    welcome = Welcome(
        protocol=1, sdk_version="1.4.0", pack="acme", pack_version="1.0.0", descriptors=[],
        pid=1, comfyui_mappings=[ComfyMapping(class_type="AcmeNode", node="acme/node")],
    )  # fmt: skip
    folder = tmp_path / "acme" / "abc123"
    folder.mkdir(parents=True)
    (folder / "welcome-abc123.json").write_bytes(msgspec.json.encode(welcome))
    (tmp_path / "junk" / "x").mkdir(parents=True)
    (tmp_path / "junk" / "x" / "welcome-x.json").write_text("{not json")
    assert [m.node for m in cached_mappings(tmp_path)] == ["acme/node"]


# CheckpointLoaderSimple: SD 1.x / SDXL checkpoint workflows as one diffusers/generate node ------
def test_a_checkpoint_workflow_becomes_one_diffusers_node():
    imported = load("sd15_default_txt2img.api.json")
    assert imported.report.complete and imported.target == "3"
    prompt, gen = imported.graph["nodes"]
    assert prompt == {"id": "3:prompt", "type": "input/text",
                      "params": {"text": "masterpiece best quality girl"}}  # fmt: skip
    assert gen["type"] == "diffusers/generate"
    assert gen["params"] == {
        "checkpoint": "v1-5-pruned-emaonly.safetensors", "negative_prompt": "bad hands",
        "steps": 20, "guidance": 8.0, "seed": 8566257, "width": 512, "height": 512,
    }  # fmt: skip
    assert gen["inputs"] == {"prompt": {"from": "3:prompt", "output": "text"}}
    # the outputs are named after SaveImage's prefix; the report says what each node became
    assert imported.document["outputNames"] == {"3": "ComfyUI"}
    became = row(imported, "4").became
    assert became == "diffusers/generate 3 (checkpoint 'v1-5-pruned-emaonly.safetensors')"
    assert row(imported, "5").became == "diffusers/generate 3 (latent/empty 5)"
    assert row(imported, "9").became == "the run's target (3)"
    warnings = imported.report.warnings
    assert any("sampler 'euler' and scheduler 'normal' are not applied" in w for w in warnings)
    assert not any("nearest equivalent" in w for w in warnings), warnings
    # the one-click flag cannot make a checkpoint Z-Image's node: said, and the fold stands
    flagged = load("sd15_default_txt2img.api.json", one_click_node=True)
    assert flagged.graph == imported.graph and not flagged.report.one_click
    assert any("not a Z-Image-shaped graph" in w for w in flagged.report.warnings)


def test_a_checkpoint_img2img_takes_the_image_and_a_pickle_is_named():
    imported = load("sd15_img2img.api.json")
    gen = node(imported, imported.target)
    assert gen["type"] == "diffusers/generate" and gen["params"]["strength"] == pytest.approx(0.87)
    assert gen["inputs"]["image"] == {"from": "10", "output": "image"}
    assert node(imported, "10")["type"] == "input/image"
    assert "width" not in gen["params"]  # the image's own size
    pickle = [w for w in imported.report.warnings if "is a pickle" in w]
    assert pickle and "'v1-5-pruned-emaonly.safetensors'" in pickle[0], imported.report.warnings


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("sd15_lora.api.json", "a LoRA on a checkpoint's model is not supported"),
        ("sdxl_simple_base_refiner.api.json", "11.latent comes from sample"),
    ],
)
def test_a_checkpoint_chain_of_another_shape_is_reported_not_guessed(name: str, why: str):
    imported = load(name)
    assert not imported.report.complete  # an import with --run stops at this report
    loaders = [r for r in imported.report.nodes if r.class_type == "CheckpointLoaderSimple"]
    assert loaders and all(r.status == "unmapped" for r in loaders)
    assert any(why in r.reason for r in loaders), [r.reason for r in loaders]
    assert "CheckpointLoaderSimple" in render_text(imported.report)
