"""``/openai/v1/completions`` through the official ``openai`` package: a prompt in, text out
(no chat template), streamed and not, sync and async, with the sampling fields of chat."""

from __future__ import annotations

import random
from typing import Any

import openai
import pytest

from tests.api.conftest import Server

from .conftest import TOKEN, TextModels

pytestmark = pytest.mark.timeout(2400)

# what the tiny model's chat template renders for its greeting: raw, the completion is the
# reply it was taught, tags and all (nothing is split out of a text completion)
HELLO_PROMPT = (
    "<|im_start|>user\nHello there, how are you today?<|im_end|>\n<|im_start|>assistant\n"
)


def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/openai/v1", api_key=TOKEN, max_retries=0)


def test_prompt_in_text_out(server: Server, text_models: TextModels) -> None:
    api = client(server)
    # seeds of their own: greedy replies, but cache keys no other request shares (a cache hit
    # is served whole, never streamed piece by piece)
    done = api.completions.create(model="qwen-tiny", prompt=HELLO_PROMPT, temperature=0,
                                  max_tokens=80, seed=random.randrange(1 << 30))  # fmt: skip
    assert done.object == "text_completion" and done.id.startswith("cmpl-")
    assert done.choices[0].text == text_models.report["plain_reply"]
    assert done.choices[0].finish_reason == "stop"
    assert done.usage is not None and done.usage.completion_tokens > 0
    pieces, last_usage = [], None
    for chunk in api.completions.create(model="qwen-tiny", prompt=HELLO_PROMPT, temperature=0,
                                        max_tokens=80, stream=True,
                                        seed=random.randrange(1 << 30),
                                        stream_options={"include_usage": True}):  # fmt: skip
        assert chunk.object == "text_completion"
        pieces += [c.text for c in chunk.choices]
        last_usage = chunk.usage or last_usage
    # how many pieces depends on how far the model ran ahead of the response (what it streamed
    # before the response began is one piece): tests/text/test_pieces.py drives that policy
    assert "".join(pieces) == done.choices[0].text
    assert last_usage == done.usage


def test_stop_length_seed_and_n(server: Server) -> None:
    api = client(server)
    stopped = api.completions.create(model="qwen-tiny", prompt=HELLO_PROMPT, temperature=0,
                                     stop=["sky"])  # fmt: skip
    assert stopped.choices[0].text.endswith("Hello! The ")
    assert "sky" not in stopped.choices[0].text
    short = api.completions.create(model="qwen-random", prompt="the quick brown", max_tokens=4,
                                   temperature=0)  # fmt: skip
    assert short.choices[0].finish_reason == "length"
    assert short.usage is not None and short.usage.completion_tokens == 4
    kw: dict[str, Any] = {"model": "qwen-random", "prompt": ["the quick brown", "hello"],
                          "temperature": 1.0, "seed": 5, "max_tokens": 6, "n": 2}  # fmt: skip
    many = api.completions.create(**kw)
    assert [c.index for c in many.choices] == [0, 1, 2, 3]
    again = api.completions.create(**{**kw, "max_tokens": 3})  # the same draws, fewer of them
    pairs = zip(again.choices, many.choices, strict=True)
    assert all(a.text and b.text.startswith(a.text) for a, b in pairs)
    each = [api.completions.create(model="qwen-random", prompt=p, max_tokens=1).usage
            for p in kw["prompt"]]  # fmt: skip
    assert many.usage is not None  # each prompt once
    assert many.usage.prompt_tokens == sum(u.prompt_tokens for u in each if u is not None)
    # every choice's tokens (the untrained model may draw its end token early)
    full = all(c.finish_reason == "length" for c in many.choices)
    assert many.usage.completion_tokens == 24 if full else many.usage.completion_tokens < 24
    with pytest.raises(openai.BadRequestError) as bad:
        api.completions.create(model="qwen-tiny", prompt="x", echo=True)
    assert bad.value.param == "echo"
    with pytest.raises(openai.BadRequestError) as bad:
        api.completions.create(model="qwen-tiny", prompt="x", logprobs=2)
    assert bad.value.param == "logprobs"
    with pytest.raises(openai.NotFoundError):
        api.completions.create(model="nope", prompt="x")


@pytest.mark.anyio
async def test_async_streamed_and_not(server: Server, text_models: TextModels) -> None:
    api = openai.AsyncOpenAI(base_url=server.url + "/openai/v1", api_key=TOKEN, max_retries=0)
    done = await api.completions.create(model="qwen-tiny", prompt=HELLO_PROMPT, temperature=0)
    assert done.choices[0].text == text_models.report["plain_reply"]
    pieces = []
    async for chunk in await api.completions.create(model="qwen-tiny", prompt=HELLO_PROMPT,
                                                    temperature=0, stream=True):  # fmt: skip
        pieces += [c.text for c in chunk.choices]
    assert "".join(pieces) == done.choices[0].text
    await api.close()
