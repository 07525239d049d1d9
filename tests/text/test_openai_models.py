"""The models listings, driven by the official ``openai`` and ``anthropic`` packages: every
chat, completion, embedding and image model in ``/openai/v1/models`` with its owner (the
organisation its card says it was imported from, else ``local``), one model by id, OpenAI's
404 ``model_not_found`` wherever a request names a model that is not here, and
``/anthropic/v1/models`` in Anthropic's shape, paged."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from tests.api.conftest import Server

from .._builds import built_once, run_builder
from .conftest import TOKEN, TextModels, _venv_python

HERE = Path(__file__).resolve().parent
pytestmark = pytest.mark.timeout(2400)

HELLO = [{"role": "user", "content": "Hello there, how are you today?"}]


@pytest.fixture(scope="module")
def listed(
    text_data: Path, text_models: TextModels, tmp_path_factory: pytest.TempPathFactory
) -> TextModels:
    """The tiny encoders in the server's models dir (the same build the embedding tests use),
    and a copy of a tiny chat model whose card says it came from ``hf:acme/qwen-acme``."""
    python = _venv_python(text_data, "text")
    if os.environ.get("INLINE_TEXT_TEST_DATA"):
        built = text_data / "tiny-embed"
        if not (built / "embed-report.json").is_file():
            run_builder(python, HERE / "_tiny_embed.py", built)
    else:

        def build(out: Path) -> None:
            run_builder(python, HERE / "_tiny_embed.py", out)

        built = built_once(tmp_path_factory, "tiny-embed", build)
    shutil.copytree(built / "embeddings", text_models.root / "embeddings", dirs_exist_ok=True)
    acme = text_models.root / "llm" / "qwen-acme"
    shutil.copytree(text_models.root / "llm" / "qwen-tiny", acme, dirs_exist_ok=True)
    card = {"source": "hf:acme/qwen-acme", "revision": "main", "category": "llm"}
    (acme / "inline.json").write_text(json.dumps(card))
    return text_models


def oai(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/openai/v1", api_key=TOKEN, max_retries=0)


def claude(server: Server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url + "/anthropic", api_key=TOKEN, max_retries=0)


def test_every_model_with_its_owner(server: Server, listed: TextModels) -> None:
    api = oai(server)
    owners = {m.id: m.owned_by for m in api.models.list().data}
    # chat (and completion) models: a folder put there by hand is local's
    assert owners["qwen-tiny"] == owners["qwen-short"] == "local"
    assert owners["qwen-acme"] == "acme"  # imported from hf:acme/...
    assert "t5-tiny" not in owners  # encoder-decoder: nothing here serves it over /openai
    # embedding models
    assert {"bert-tiny", "bert-tiny-st", "bert-tiny-dense"} <= set(owners)
    assert owners["bert-tiny"] == "local"
    # image models: an image node type is its namespace's
    assert owners["alibaba/z-image-turbo"] == "alibaba"
    assert len(owners) == len(api.models.list().data)  # each id once
    for model_id in ("qwen-acme", "bert-tiny-st", "alibaba/z-image-turbo"):
        got = api.models.retrieve(model_id)
        assert (got.id, got.owned_by, got.object) == (model_id, owners[model_id], "model")


def test_a_model_not_here_is_model_not_found(server: Server, listed: TextModels) -> None:
    api = oai(server)
    calls = {
        "retrieve": lambda: api.models.retrieve("nope"),
        "chat": lambda: api.chat.completions.create(model="nope", messages=HELLO),  # type: ignore[arg-type]
        "completions": lambda: api.completions.create(model="nope", prompt="hi"),
        "embeddings": lambda: api.embeddings.create(model="nope", input="hi"),
        "images": lambda: api.images.generate(model="nope", prompt="a fox"),
        "responses": lambda: api.responses.create(model="nope", input="hi"),
    }
    for what, call in calls.items():
        with pytest.raises(openai.NotFoundError) as missing:
            call()
        error = missing.value.body
        assert isinstance(error, dict), what
        assert error["code"] == "model_not_found", what
        assert error["type"] == "invalid_request_error" and error["param"] == "model", what
        assert "nope" in error["message"], what


def test_anthropic_models_paged(server: Server, listed: TextModels) -> None:
    api = claude(server)
    page = api.models.list()
    ids = [m.id for m in page.data]
    assert {"qwen-tiny", "qwen-short", "qwen-acme"} <= set(ids)
    assert "bert-tiny" not in ids and "alibaba/z-image-turbo" not in ids  # not chat models
    assert all(m.type == "model" and m.display_name == m.id for m in page.data)
    assert all(m.created_at.tzinfo is not None for m in page.data)
    assert page.first_id == ids[0] and page.last_id == ids[-1] and page.has_more is False
    # paged one at a time, the SDK's auto-paging follows after_id to the same list
    assert [m.id for m in api.models.list(limit=1)] == ids
    first = api.models.list(limit=1)
    assert first.has_more is (len(ids) > 1) and [m.id for m in first.data] == ids[:1]
    back = api.models.list(before_id=ids[-1], limit=1)
    assert [m.id for m in back.data] == ids[-2:-1]
    got = api.models.retrieve("qwen-acme")
    assert (got.id, got.type, got.display_name) == ("qwen-acme", "model", "qwen-acme")
    with pytest.raises(anthropic.NotFoundError) as missing:
        api.models.retrieve("nope")
    body = missing.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "not_found_error" and "nope" in body["error"]["message"]
    r = httpx.get(server.url + "/anthropic/v1/models", params={"limit": 0},
                  headers={"x-api-key": TOKEN})  # fmt: skip
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert r.json()["error"]["message"].startswith("limit:")
