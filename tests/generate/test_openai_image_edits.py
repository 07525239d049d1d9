"""The rest of OpenAI's images API on a real server, driven by the official ``openai`` client:
``/images/edits`` (the multipart upload the client sends, img2img through the pipeline's
family), ``n`` and ``response_format`` for edits, and ``size`` checked against what each
pipeline makes (a 400 naming ``size`` before anything runs)."""

from __future__ import annotations

import base64
import io
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from PIL import Image

from ..api.conftest import Server, start_server
from .conftest import MESHPACK, TinyPipes

PROMPT = "a cat wearing a hat"


@pytest.fixture(scope="module")
def server(
    gen_data_dir: Path, pipes: TinyPipes, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("openai-edits")
    models, inputs = root / "models", root / "inputs"
    shutil.copytree(pipes.root / "diffusers", models / "diffusers")
    inputs.mkdir()
    env = {"INLINE_MODELS_DIR": str(models), "INLINE_PACK_PATHS": str(MESHPACK)}
    srv = start_server(gen_data_dir, inputs, env)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/openai/v1", api_key="unused", max_retries=0)


def png(data: bytes) -> Image.Image:
    img = Image.open(io.BytesIO(data))
    img.load()
    return img


def init(pipes: TinyPipes) -> tuple[str, bytes, str]:
    return ("init.png", (pipes.root / "init.png").read_bytes(), "image/png")


def test_an_edit_is_img2img_with_n_images(client: openai.OpenAI, server: Server, pipes: TinyPipes):
    got = client.images.edit(
        model="tiny-sd", image=init(pipes), prompt=PROMPT, size="64x64", n=2,
        response_format="b64_json", extra_body={"seed": 5, "strength": 0.5},
    )  # fmt: skip
    assert got.data is not None and len(got.data) == 2
    edits = [base64.b64decode(d.b64_json or "") for d in got.data]
    assert [png(e).size for e in edits] == [(64, 64), (64, 64)]
    assert edits[0] != edits[1]  # seeds 5 and 6
    # the same prompt and seed without the image: another picture (the image was used)
    made = client.images.generate(model="tiny-sd", prompt=PROMPT, size="64x64",
                                  response_format="b64_json", extra_body={"seed": 5})  # fmt: skip
    assert made.data is not None and base64.b64decode(made.data[0].b64_json or "") != edits[0]
    with server.client() as http:
        takes = http.get("/v1/takes", params={"nodeId": "image", "limit": 20}).json()["takes"]
        edited = [t for t in takes if t["params"].get("strength") == 0.5]
        assert {t["params"]["seed"] for t in edited} >= {5, 6}
        take = next(t for t in edited if t["params"]["seed"] == 5)
        assert http.get(f"/v1/takes/{take['id']}/bytes").content == edits[0]
        run = http.get(f"/v1/runs/{take['runId']}").json()
        assert run["status"] == "done" and run["target"] == "image"
    # the same edit again answers the same pixels (its seed given); as a url this time
    again = client.images.edit(model="tiny-sd", image=init(pipes), prompt=PROMPT, size="64x64",
                               extra_body={"seed": 5, "strength": 0.5})  # fmt: skip
    assert again.data is not None and again.data[0].url is not None
    r = httpx.get(again.data[0].url, timeout=60)
    assert r.status_code == 200 and r.content == edits[0]


def test_what_an_edit_refuses(client: openai.OpenAI, pipes: TinyPipes):
    def refused(**fields: object) -> openai.BadRequestError:
        with pytest.raises(openai.BadRequestError) as bad:
            client.images.edit(**{"model": "tiny-sd", "image": init(pipes), "prompt": PROMPT,
                                  **fields})  # type: ignore[call-overload]  # fmt: skip
        return bad.value

    assert refused(mask=init(pipes)).param == "mask"
    assert refused(image=[init(pipes), init(pipes)]).param == "image"
    assert refused(image=("notes.txt", b"just text", "text/plain")).param == "image"
    assert refused(size="100x64").param == "size"
    assert refused(n=11).param == "n"
    assert refused(extra_body={"strength": 2}).param == "strength"
    # a family without an image-to-image pipeline in diffusers says so, naming the model
    no_img2img = refused(model="tiny-pixart", size="64x64")
    assert no_img2img.param == "model" and "tiny-pixart" in no_img2img.message
    with pytest.raises(openai.NotFoundError) as missing:
        client.images.edit(model="nope", image=init(pipes), prompt=PROMPT)
    assert missing.value.code == "model_not_found"


def test_size_is_what_the_pipeline_makes(client: openai.OpenAI):
    def refused(model: str, size: str) -> str:
        with pytest.raises(openai.BadRequestError) as bad:
            client.images.generate(model=model, prompt=PROMPT, size=size)  # type: ignore[arg-type]
        assert bad.value.param == "size"
        return bad.value.message

    # Stable Diffusion: the VAE's 8; PixArt: 8 x its patch size 2
    assert "multiple of 8" in refused("tiny-sd", "100x64")
    assert "from 64" in refused("tiny-sd", "32x32")
    assert "multiple of 16" in refused("tiny-pixart", "72x64")
    assert "8192" in refused("tiny-sd", "16384x64")
    got = client.images.generate(model="tiny-pixart", prompt=PROMPT, size="80x64",
                                 response_format="b64_json", extra_body={"seed": 1})  # fmt: skip
    assert got.data is not None and png(base64.b64decode(got.data[0].b64_json or "")).size == (
        80,
        64,
    )
