"""Clear errors for missing, foreign, truncated and incomplete model files (the worker lives
on); real-scale detection and loading from sparse files written from the real headers."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from inline_core import NodeFailed
from inline_host import Engine, NodeError
from inline_sdk.protocol import JsonValue

from ..e2e._graphs import n, request
from ._sparse import write_all
from .conftest import Tiny

pytestmark = pytest.mark.anyio
HERE = Path(__file__).resolve().parent


def one_click(**params: Any) -> dict[str, Any]:
    return request(
        "z",
        n("p", "input/text", {"text": "a fox"}),
        n("z", "alibaba/z-image-turbo", {"width": 256, "height": 256, "steps": 1, **params},
          prompt=("p", "text")),
    )  # fmt: skip


async def failure(engine: Engine, doc: dict[str, Any]) -> NodeError:
    engine.cache.clear()
    with pytest.raises(NodeFailed) as err:
        await engine.run(doc)
    cause = err.value.__cause__
    assert isinstance(cause, NodeError), err.value
    return cause


def load(kind: str, file: str) -> dict[str, Any]:
    node_type = {"diffusion": "load/diffusion-model", "vae": "load/vae"}.get(kind, kind)
    return request("l", n("l", node_type, {"file": file}))


async def test_missing_components_are_listed_with_the_pull_command(engine: Engine, settings):
    served = engine.descriptor("alibaba/z-image-turbo")
    assert served is not None
    status = {m.label: m for m in served.models}
    assert set(status) == {"Diffusion model", "VAE", "Text encoder", "Tokenizer"}
    assert not any(m.present for m in status.values())
    assert status["Diffusion model"].file == "z_image_turbo_bf16.safetensors"

    err = await failure(engine, one_click(seed=1))
    message = err.remote_message
    assert message.startswith("Z-Image models missing: Diffusion model, VAE, Text encoder.")
    for folder in ("diffusion_models", "vae", "text_encoders"):
        assert str(settings.models_dir / folder) in message
    assert "INLINE_ZIMAGE_MODEL (unset)" in message
    assert "z_image_turbo_bf16.safetensors" in message
    assert message.rstrip().endswith("inline models pull alibaba/z-image-turbo")
    pid = engine.supervisor.workers()["zimage"].pid

    # an empty prompt is refused with the contract's words, by the same worker
    doc = one_click(seed=1)
    doc["graph"]["nodes"][0]["params"]["text"] = "  "
    assert (await failure(engine, doc)).remote_message == "Z-Image needs a prompt."
    assert engine.supervisor.workers()["zimage"].pid == pid


async def test_a_single_file_text_encoder_without_tokenizer_says_where_it_looked(
    engine: Engine, settings, tiny: Tiny
):
    models = settings.models_dir
    for sub, name in (
        ("diffusion_models", "tiny_z_image_turbo.safetensors"),
        ("vae", "tiny_ae.safetensors"),
        ("text_encoders", "tiny_qwen3.safetensors"),
    ):
        shutil.copy(tiny.comfy / sub / name, models / sub / name)  # fmt: skip
    err = await failure(engine, one_click(seed=1))
    assert err.remote_message.startswith("Z-Image models missing: Tokenizer.")
    assert str(models / "text_encoders" / "qwen_3_4b_tokenizer") in err.remote_message
    assert "inline models pull alibaba/z-image-turbo" in err.remote_message
    shutil.copytree(
        tiny.comfy / "text_encoders" / "qwen_3_4b_tokenizer",
        models / "text_encoders" / "qwen_3_4b_tokenizer",
    )
    engine.cache.clear()
    result = await engine.run(one_click(seed=1))  # now complete: it renders
    assert "image" in result.outputs


async def test_bad_files_fail_clearly_and_the_worker_lives_on(engine: Engine, settings, tiny):
    models = settings.models_dir
    good = tiny.comfy / "diffusion_models" / "tiny_z_image_turbo.safetensors"
    # a VAE in the diffusion model folder: the wrong family/component
    shutil.copy(
        tiny.comfy / "vae" / "tiny_ae.safetensors", models / "diffusion_models" / "ae.safetensors"
    )
    err = await failure(engine, load("diffusion", "ae.safetensors"))
    assert "ae.safetensors" in err.remote_message
    assert "VAE" in err.remote_message and "not a diffusion model" in err.remote_message
    pid = engine.supervisor.workers()["primitives"].pid

    # a truncated download
    data = good.read_bytes()
    (models / "diffusion_models" / "cut.safetensors").write_bytes(data[: len(data) // 2])
    err = await failure(engine, load("diffusion", "cut.safetensors"))
    assert "cut.safetensors" in err.remote_message and "truncated" in err.remote_message

    # not safetensors at all
    (models / "diffusion_models" / "junk.safetensors").write_bytes(b"\x00" * 64)
    err = await failure(engine, load("diffusion", "junk.safetensors"))
    assert "junk.safetensors" in err.remote_message and "not a safetensors" in err.remote_message

    # keys missing: named, before anything is loaded
    holed = models / "diffusion_models" / "holed.safetensors"
    drop_keys(
        good, holed, ("layers.1.feed_forward.w2.weight", "noise_refiner.0.attention.out.weight")
    )
    err = await failure(engine, load("diffusion", "holed.safetensors"))
    msg = err.remote_message
    assert "holed.safetensors" in msg and "2 missing key(s)" in msg
    assert "layers.1.feed_forward.w2.weight" in msg and "Nothing was loaded" in msg

    # a name that leaves the models dir is refused
    err = await failure(engine, load("diffusion", "../vae/tiny_ae.safetensors"))
    assert "not a plain model name" in err.remote_message

    # the same worker serves the next call
    ok = await engine.run(load("diffusion", "tiny_z_image_turbo.safetensors"))
    assert isinstance(ok.outputs["model"].value, JsonValue)
    assert engine.supervisor.workers()["primitives"].pid == pid

    # the one-click node names the file too
    err = await failure(engine, one_click(model="holed.safetensors"))
    assert "holed.safetensors" in err.remote_message and "missing key" in err.remote_message


def drop_keys(src: Path, dest: Path, keys: tuple[str, ...]) -> None:
    """A copy of a safetensors file without ``keys`` (header rewritten, data kept)."""
    raw = src.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    for key in keys:
        del header[key]
    body = json.dumps(header, separators=(",", ":")).encode()
    body += b" " * (-len(body) % 8)
    dest.write_bytes(struct.pack("<Q", len(body)) + body + raw[8 + length :])


async def test_real_scale_files_are_detected_from_their_headers(engine: Engine, settings):
    written = write_all(settings.models_dir)
    assert written["diffusion_models/z_image_turbo_bf16.safetensors"].stat().st_size == 12309866400
    served = engine.descriptor("alibaba/z-image-turbo")
    assert served is not None
    present = {m.label: m.present for m in served.models}
    assert present == {
        "Diffusion model": True,
        "VAE": True,
        "Text encoder": True,
        "Tokenizer": True,
    }
    pick = {p.key: p.default for p in served.params if p.options_from}
    assert pick["model"] == "z_image_turbo_bf16.safetensors" and pick["vae"] == "ae.safetensors"

    got = {}
    for node_type, file, port in (
        ("load/diffusion-model", "z_image_turbo_bf16.safetensors", "model"),
        ("load/vae", "ae.safetensors", "vae"),
        ("load/text-encoder", "qwen_3_4b.safetensors", "text_encoder"),
    ):
        result = await engine.run(request("l", n("l", node_type, {"file": file})))
        value = result.outputs[port].value
        assert isinstance(value, JsonValue)
        got[port] = value.value
    assert got["model"]["label"] == "Z-Image Turbo transformer"
    assert got["model"]["arch"] == "z-image" and got["model"]["params"] == 6_154_908_736
    assert got["model"]["dtype"] == "BF16" and got["model"]["layout"] == "original"
    assert got["vae"]["params"] == 83_819_683
    assert got["text_encoder"]["params"] == 4_022_468_096


def test_the_full_size_transformer_loads_from_its_sparse_file_without_reading_it(
    tmp_path: Path, pack_python: Path
):
    written = write_all(tmp_path / "models")
    path = written["diffusion_models/z_image_turbo_bf16.safetensors"]
    proc = subprocess.run(
        [str(pack_python), str(HERE / "_load_probe.py"), "diffusion", str(path)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["params"] == report["header_params"] == 6_154_908_736
    assert report["dtype"] == "torch.bfloat16"
    # 12.3 GB of weights, mapped, not read: anonymous memory hardly moves
    assert report["rss_anon_growth_mb"] < 500, report
    assert path.stat().st_blocks * 512 < 1 << 20  # on disk: the header only
