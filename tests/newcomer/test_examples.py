"""Every example in ``examples/`` runs over HTTP against one real server on the demo models
(``inline demo models``, built once per session), with ``examples/run.py``: Z-Image one click,
the primitive graph, img2img, LoRA, a streamed completion, rewrite, a diffusers pipeline, a
mesh, a hosted model (against the fake upstream of ``tests/hosted``) and the basics. Relative
``{"ref": "path"}`` values resolve against the server's input roots (an unknown one is a 422
saying where it looked), and pickers mark demo models."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from .._builds import data_dir_over
from ..api.conftest import Server, start_server
from ..hosted._fakes import ANTHROPIC_TEXT, FakeUpstream
from ._demo_env import INLINE, ROOT, DemoModels, copy_models, demo_data, demo_models

__all__ = ("demo_data", "demo_models")  # the session fixtures, for pytest to find here

pytestmark = pytest.mark.timeout(3600)

EXAMPLES = ROOT / "examples"
#: A tiny real PNG (1x1), what the fake Gemini would return as a picture.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360f8cf000003010101a6b1d5500000000049454e44ae426082"
)
#: Each example: the kind of its target's takes.
KINDS = {
    "zimage.json": "image", "zimage_primitives.json": "image", "zimage_img2img.json": "image",
    "zimage_lora.json": "image", "text_complete.json": "text", "text_rewrite.json": "text",
    "diffusers.json": "image", "mesh.json": "mesh", "hosted.json": "text", "basics.json": "image",
}  # fmt: skip


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream(PNG) as upstream:
        yield upstream


def serve_examples(
    data: Path, demo: DemoModels, fake: FakeUpstream, here: Path, **env: str
) -> Iterator[Server]:
    """A server over ``data`` and a copy of the demo models, the example key stored."""
    models = copy_models(demo, here / "models")
    proc = subprocess.run([str(INLINE), "secrets", "set", "ANTHROPIC_API_KEY"],
                          env={**os.environ, "INLINE_DATA_DIR": str(data)},
                          input="sk-ant-example\n", text=True, capture_output=True,
                          timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    srv = start_server(data, here / "inputs", {
        "INLINE_MODELS_DIR": str(models), "INLINE_PACK_PATHS": "",
        "INLINE_ANTHROPIC_BASE_URL": fake.url, "HF_HUB_OFFLINE": "1",
        "TORCHAO_FORCE_SKIP_LOADING_SO_FILES": "1", **env,
    }, wait=False)  # fmt: skip
    try:
        from ..api.conftest import wait_healthy

        wait_healthy(srv, timeout=300)
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def server(
    demo_data: Path,
    demo_models: DemoModels,
    fake: FakeUpstream,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    """The examples' server, its packs sandboxed (the default where bwrap works, as in CI)."""
    yield from serve_examples(demo_data, demo_models, fake, tmp_path_factory.mktemp("examples"))


@pytest.fixture(scope="module")
def unsandboxed(
    demo_data: Path,
    demo_models: DemoModels,
    fake: FakeUpstream,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    """A second server over the same pack venvs and demo models, ``INLINE_SANDBOX=off``: a
    data dir of its own, so no take comes from the other's cache."""
    data = data_dir_over(tmp_path_factory, "demo-data-unsandboxed")
    here = tmp_path_factory.mktemp("examples-unsandboxed")
    yield from serve_examples(data, demo_models, fake, here, INLINE_SANDBOX="off")


def run_example(server: Server, name: str, out: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "run.py"), str(EXAMPLES / name), "--url", server.url,
         "--out", str(out), "--json"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, f"{name}: {proc.stderr[-3000:]}\n{server.log.read_text()[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_example_is_tested() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.json")) == sorted(KINDS)


@pytest.mark.parametrize("name", sorted(KINDS))
def test_the_example_runs_over_http(server: Server, name: str, tmp_path: Path) -> None:
    summary = run_example(server, name, tmp_path)
    assert summary["status"] == "done", summary
    takes = summary["takes"]
    assert takes and {t["kind"] for t in takes} == {KINDS[name]}, takes
    first = Path(takes[0]["path"]).read_bytes()
    if KINDS[name] == "image":
        size = Image.open(io.BytesIO(first)).size
        expected = {"diffusers.json": (64, 64), "basics.json": (256, 160)}.get(name, (256, 256))
        assert size == expected, (name, size)
    elif KINDS[name] == "mesh":
        assert first[:4] == b"glTF"
    if name == "text_complete.json":
        # streamed: the deltas, in order, are the text take (the demo LLM learnt this reply)
        text = next(Path(t["path"]).read_text() for t in takes if t["output"] == "text")
        assert summary["deltas"] > 1 and summary["text"] == text
        assert text == "Hello! The sky is blue and the sea is calm."
    if name == "hosted.json":
        reply = next(Path(t["path"]).read_text() for t in takes if t["output"] == "text")
        assert reply == "".join(ANTHROPIC_TEXT)


def workers_sandboxed(server: Server) -> dict[str, bool]:
    with server.client() as http:
        health = http.get("/v1/health").json()
    return {pack: w["sandboxed"] for pack, w in health["workers"].items()}


def take_bytes(summary: dict[str, Any]) -> list[tuple[str, str, bytes]]:
    return sorted((t["output"], t["kind"], Path(t["path"]).read_bytes()) for t in summary["takes"])


@pytest.mark.parametrize("name", sorted(KINDS))
def test_the_first_party_packs_give_the_same_bytes_unsandboxed(
    server: Server, unsandboxed: Server, name: str, tmp_path: Path
) -> None:
    boxed = run_example(server, name, tmp_path / "sandboxed")
    bare = run_example(unsandboxed, name, tmp_path / "unsandboxed")
    assert boxed["status"] == bare["status"] == "done"
    assert take_bytes(boxed) == take_bytes(bare), name
    # what ran, ran as each server says: in the sandbox there, outside it here
    assert workers_sandboxed(server) and all(workers_sandboxed(server).values())
    ran = workers_sandboxed(unsandboxed)
    assert ran and not any(ran.values())


def test_img2img_and_lora_change_the_render(server: Server, tmp_path: Path) -> None:
    renders = {}
    for name in ("zimage.json", "zimage_img2img.json", "zimage_lora.json"):
        summary = run_example(server, name, tmp_path / name)
        renders[name] = Path(summary["takes"][0]["path"]).read_bytes()
    assert len(set(renders.values())) == 3


def test_an_unknown_ref_says_where_it_looked(server: Server) -> None:
    doc = json.loads((EXAMPLES / "mesh.json").read_text())
    doc["graph"]["nodes"][0]["params"]["asset"]["path"] = "assets/no-such.png"
    with server.client() as http:
        r = http.post("/v1/runs", json=doc)
    assert r.status_code == 422, r.text
    body = r.json()["error"]
    assert body["nodeId"] == "photo"
    assert body["errors"][0]["path"] == "$.graph.nodes[0].params.asset"
    message = body["message"]
    assert "input 'assets/no-such.png' was not found" in message
    for root in server.env["INLINE_INPUT_ROOTS"].split(os.pathsep):
        assert str(Path(root) / "assets/no-such.png") in message


def test_pickers_mark_the_demo_models(server: Server) -> None:
    with server.client() as http:
        described = http.get("/v1/models/alibaba/z-image-turbo").json()
        llm = http.get("/v1/models/text/complete").json()
    options = {p["key"]: p.get("options", []) for p in described["params"]}
    assert {"value": "demo_z_image_turbo.safetensors",
            "label": "demo_z_image_turbo.safetensors (demo)"} in options["model"]  # fmt: skip
    assert {"value": "demo_ae.safetensors", "label": "demo_ae.safetensors (demo)"} in (
        options["vae"]
    )
    models = {p["key"]: p.get("options", []) for p in llm["params"]}["model"]
    assert {"value": "demo-qwen3", "label": "demo-qwen3 (demo)"} in models
    assert all(o["value"] != "demo-t5" for o in models)  # a seq2seq model is rewrite's
