"""``text/embed`` and ``/openai/v1/embeddings``, driven by the official ``openai`` package (sync
and async) against a real server and the text pack's worker, on tiny random encoders: the
vectors equal sentence-transformers' and plain transformers' (computed in the pack venv), in the
order of the inputs; base64 is the same floats; ``dimensions`` cuts (or is refused); concurrent
requests are batched together; errors in OpenAI's shape."""

from __future__ import annotations

import asyncio
import base64
import uuid
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from tests.api.conftest import Server

from .conftest import TOKEN, EmbedModels

# the session builds venvs and tiny models first: slow on a loaded machine
pytestmark = pytest.mark.timeout(2400)

TEXTS = [
    "the quick brown fox jumps over the lazy dog",
    "a cat sleeps on the warm mat",
    "embeddings map texts to vectors",
    "the sea is calm and the sky is blue " * 8,  # past bert-tiny-st's 32 tokens: cut
    "dogs and cats are friends",
]
#: How each tiny folder pools, spelled out for the plain transformers baseline.
PLAIN = {
    "bert-tiny-st": {"pooling": "mean", "normalize": True, "max_length": 32},
    "bert-tiny-dense": {"pooling": "cls", "dense": "2_Dense"},
    "bert-tiny": {"pooling": "mean"},
}
TOLERANCE = 1e-5


def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/openai/v1", api_key=TOKEN, max_retries=0)


def aclient(server: Server) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.url + "/openai/v1", api_key=TOKEN, max_retries=0)


def plain(embed_models: EmbedModels, name: str, texts: list[str]) -> dict[str, Any]:
    folder = embed_models.root / "embeddings" / name
    job: dict[str, Any] = {**PLAIN[name], "folder": str(folder), "texts": texts}
    if "dense" in job:
        job["dense"] = str(folder / job["dense"])
    return embed_models.baseline(**job)


def vectors(response: Any) -> np.ndarray:
    assert [d.index for d in response.data] == list(range(len(response.data)))
    return np.array([d.embedding for d in response.data], dtype=np.float64)


def test_models_list_the_encoder_folders(server: Server, embed_models: EmbedModels) -> None:
    ids = {m.id for m in client(server).models.list().data}
    assert {"bert-tiny-st", "bert-tiny-dense", "bert-tiny"} <= ids
    assert {"qwen-tiny"} <= ids and "t5-tiny" not in ids  # the chat models stay
    assert client(server).models.retrieve("bert-tiny-st").id == "bert-tiny-st"


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_vectors_equal_plain_transformers(
    server: Server, embed_models: EmbedModels, name: str
) -> None:
    done = client(server).embeddings.create(model=name, input=TEXTS)
    base = plain(embed_models, name, TEXTS)
    ours, theirs = vectors(done), np.array(base["vectors"])
    assert ours.shape == theirs.shape == (len(TEXTS), 16 if name == "bert-tiny-dense" else 32)
    assert np.abs(ours - theirs).max() < TOLERANCE
    assert done.object == "list" and done.model == name
    assert all(d.object == "embedding" for d in done.data)
    assert done.usage.prompt_tokens == done.usage.total_tokens == base["tokens"]
    norms = np.linalg.norm(ours, axis=1)
    assert np.allclose(norms, 1.0, atol=1e-6) == (name == "bert-tiny-st")  # its Normalize


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_vectors_equal_sentence_transformers(
    server: Server, embed_models: EmbedModels, name: str
) -> None:
    folder = embed_models.root / "embeddings" / name
    base = embed_models.baseline("sentence-transformers", folder=str(folder), texts=TEXTS)
    done = client(server).embeddings.create(model=name, input=TEXTS)
    assert np.abs(vectors(done) - np.array(base["vectors"])).max() < TOLERANCE


def test_a_string_input_and_cosine_order(server: Server, embed_models: EmbedModels) -> None:
    query = "a cat and a dog"
    one = client(server).embeddings.create(model="bert-tiny-st", input=query)
    assert len(one.data) == 1 and one.data[0].index == 0
    docs = client(server).embeddings.create(model="bert-tiny-st", input=TEXTS)
    base = plain(embed_models, "bert-tiny-st", [query, *TEXTS])
    theirs = np.array(base["vectors"])
    q, d = vectors(one)[0], vectors(docs)
    ours_cos = d @ q / (np.linalg.norm(d, axis=1) * np.linalg.norm(q))
    theirs_cos = (
        theirs[1:] @ theirs[0] / (np.linalg.norm(theirs[1:], axis=1) * np.linalg.norm(theirs[0]))
    )
    assert list(np.argsort(-ours_cos)) == list(np.argsort(-theirs_cos))
    assert np.abs(ours_cos - theirs_cos).max() < TOLERANCE


def test_base64_is_the_same_little_endian_float32(
    server: Server, embed_models: EmbedModels
) -> None:
    c = client(server)
    floats = c.embeddings.create(model="bert-tiny", input=TEXTS[:3], encoding_format="float")
    raw = httpx.post(
        server.url + "/openai/v1/embeddings",
        json={"model": "bert-tiny", "input": TEXTS[:3], "encoding_format": "base64"},
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=120,
    )
    assert raw.status_code == 200, raw.text
    body = raw.json()
    assert list(body) == ["object", "data", "model", "usage"]
    assert list(body["data"][0]) == ["object", "index", "embedding"]
    decoded = [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in body["data"]]
    assert np.array_equal(np.array(decoded, dtype=np.float64), vectors(floats))  # exact
    # without encoding_format the official client asks for base64 and decodes it itself
    assert vectors(c.embeddings.create(model="bert-tiny", input=TEXTS[:3])).tolist() == (
        vectors(floats).tolist()
    )
    run_id = raw.headers["X-Inline-Run-Id"]
    run = httpx.get(f"{server.url}/v1/runs/{run_id}", headers={"Authorization": f"Bearer {TOKEN}"})
    assert run.json()["status"] == "done"  # a durable run like any other


def test_dimensions_cut_and_renormalise_or_are_refused(
    server: Server, embed_models: EmbedModels
) -> None:
    full = vectors(client(server).embeddings.create(model="bert-tiny-st", input=TEXTS))
    cut = vectors(client(server).embeddings.create(model="bert-tiny-st", input=TEXTS, dimensions=8))
    expected = full[:, :8] / np.linalg.norm(full[:, :8], axis=1, keepdims=True)
    assert cut.shape == (len(TEXTS), 8) and np.abs(cut - expected).max() < TOLERANCE
    # a model that does not normalise is cut, not normalised
    raw = vectors(client(server).embeddings.create(model="bert-tiny", input=TEXTS, dimensions=4))
    base = np.array(plain(embed_models, "bert-tiny", TEXTS)["vectors"])
    assert np.abs(raw - base[:, :4]).max() < TOLERANCE
    with pytest.raises(openai.BadRequestError) as caught:
        client(server).embeddings.create(model="bert-tiny-st", input="x", dimensions=64)
    error = caught.value.body
    assert isinstance(error, dict) and error["param"] == "dimensions"
    assert "dimensions=64 is more than the 32 values" in error["message"]
    with pytest.raises(openai.BadRequestError) as caught:
        client(server).embeddings.create(model="bert-tiny-st", input="x", dimensions=0)
    assert isinstance(caught.value.body, dict) and caught.value.body["param"] == "dimensions"


def test_errors_in_openai_shape(server: Server, embed_models: EmbedModels) -> None:
    c = client(server)
    with pytest.raises(openai.NotFoundError) as missing:
        c.embeddings.create(model="no-such-encoder", input="x")
    assert isinstance(missing.value.body, dict) and missing.value.body["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError):  # a chat model is no embedding model
        c.embeddings.create(model="qwen-tiny", input="x")
    bad: list[dict[str, Any]] = [
        {"input": [[1, 2, 3]]},  # token arrays
        {"input": [1, 2, 3]},
        {"input": []},
        {"input": ["ok", ""]},
        {"input": "x", "encoding_format": "int8"},
        {"input": "x", "dimensions": "eight"},
    ]
    headers = {"Authorization": f"Bearer {TOKEN}"}
    for extra in bad:
        r = httpx.post(server.url + "/openai/v1/embeddings", headers=headers,
                       json={"model": "bert-tiny", **extra}, timeout=60)  # fmt: skip
        assert r.status_code == 400, (extra, r.text)
        error = r.json()["error"]
        assert error["type"] == "invalid_request_error" and error["param"] in (
            "input", "encoding_format", "dimensions"
        ), extra  # fmt: skip
    tokens = httpx.post(server.url + "/openai/v1/embeddings", headers=headers,
                        json={"model": "bert-tiny", "input": [[1, 2]]}, timeout=60)  # fmt: skip
    assert "token arrays" in tokens.json()["error"]["message"]
    user = c.embeddings.create(model="bert-tiny", input="x", user="someone")  # accepted
    assert len(user.data) == 1


def test_concurrent_requests_async_are_batched_and_each_its_own(
    server: Server, embed_models: EmbedModels
) -> None:
    """A long request holds the encoder; the small ones that arrive meanwhile go through as one
    batch, and each still gets exactly its own vectors."""
    nonce = uuid.uuid4().hex[:6]  # new texts: no run's outputs are in the cache yet
    long = [f"the sea is calm and the sky is blue {nonce} {i}" for i in range(1500)]
    small = [[f"dogs and cats are friends {nonce} {i}", f"a cat {i}"] for i in range(7)]

    async def main() -> list[Any]:
        ac = aclient(server)
        first = asyncio.create_task(ac.embeddings.create(model="bert-tiny", input=long))
        await asyncio.sleep(0.2)  # the long one is running (or about to) when the rest arrive
        rest = [ac.embeddings.create(model="bert-tiny", input=texts) for texts in small]
        done = await asyncio.gather(first, *rest)
        await ac.close()
        return done

    done = asyncio.run(main())
    every = [t for texts in small for t in texts]
    base = np.array(plain(embed_models, "bert-tiny", every)["vectors"])
    for i, response in enumerate(done[1:]):
        assert np.abs(vectors(response) - base[2 * i : 2 * i + 2]).max() < TOLERANCE
    assert len(done[0].data) == len(long)
    health = httpx.get(server.url + "/v1/health", headers={"Authorization": f"Bearer {TOKEN}"})
    stats = health.json()["workers"]["text"]["runtime"]["embedBatching"]
    assert stats["largest"] >= 2 and stats["items"] > stats["batches"], stats
