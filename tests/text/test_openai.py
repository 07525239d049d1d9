"""``/openai/v1`` driven by the official ``openai`` package: sync and async, streamed and not,
with tools; models, errors, auth, and each request a durable run in ``/v1/runs``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.api.conftest import Server

from .conftest import TOKEN, TextModels

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "packs" / "text" / "src"))
from inline_text import ReplyParser

# the session builds venvs and tiny models first: slow on a loaded machine
pytestmark = pytest.mark.timeout(2400)

WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]
HELLO = [{"role": "user", "content": "Hello there, how are you today?"}]


def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/openai/v1", api_key=TOKEN, max_retries=0)


def aclient(server: Server) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.url + "/openai/v1", api_key=TOKEN, max_retries=0)


def parsed(raw: str) -> ReplyParser:
    parser = ReplyParser(emit=lambda _s, _t: None)
    parser.feed(raw)
    parser.finish()
    return parser


def test_models_lists_causal_folders(server: Server) -> None:
    models = client(server).models.list()
    ids = {m.id for m in models.data}
    assert {"qwen-tiny", "qwen-short", "qwen-random"} <= ids
    assert "t5-tiny" not in ids  # encoder-decoder: not a chat model
    assert all(m.object == "model" and m.owned_by for m in models.data)  # test_openai_models
    assert client(server).models.retrieve("qwen-tiny").id == "qwen-tiny"


def test_tool_call_not_streamed_matches_transformers(
    server: Server, text_models: TextModels
) -> None:
    tools = text_models.report["tools"]
    done = client(server).chat.completions.create(
        model="qwen-tiny", messages=WEATHER, tools=tools, temperature=0, max_tokens=80
    )
    base = text_models.baseline(
        folder=str(text_models.root / "llm/qwen-tiny"), kind="causal", messages=WEATHER,
        tools=tools, max_new_tokens=80,
    )  # fmt: skip
    expected = parsed(base["text"])
    (choice,) = done.choices
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == expected.text == "Let me check."
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
    assert getattr(choice.message, "reasoning_content", None) == expected.reasoning
    # greedy: the same tokens as plain generate (same count, same text)
    assert done.usage is not None
    assert done.usage.prompt_tokens == base["prompt_tokens"]
    assert done.usage.completion_tokens == len(base["ids"])
    assert done.usage.total_tokens == base["prompt_tokens"] + len(base["ids"])
    assert done.id.startswith("chatcmpl-run_") and done.object == "chat.completion"


def test_tool_call_streamed_in_openai_chunks(server: Server, text_models: TextModels) -> None:
    stream = client(server).chat.completions.create(
        model="qwen-tiny", messages=WEATHER, tools=text_models.report["tools"], temperature=0,
        max_tokens=80, stream=True, stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({c.id for c in chunks}) == 1
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == "Let me check."
    deltas = [t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or []]
    head = deltas[0]
    assert (head.index, head.type, head.function.name) == (0, "function", "get_weather")  # type: ignore[union-attr]
    assert head.id is not None and head.id.startswith("call_")
    assert all(d.index == 0 and d.id is None for d in deltas[1:])
    args = "".join(d.function.arguments or "" for d in deltas)  # type: ignore[union-attr]
    assert json.loads(args) == {"city": "Paris"} and len(deltas) > 2  # fragments
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "tool_calls" and set(finishes[:-1]) == {None}
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens > 0


def test_raw_sse_ends_with_done(server: Server) -> None:
    body = {"model": "qwen-tiny", "messages": HELLO, "temperature": 0, "stream": True}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.stream("POST", server.url + "/openai/v1/chat/completions", json=body,
                      headers=headers, timeout=120) as r:  # fmt: skip
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    last = json.loads(lines[-2][6:])
    assert last["object"] == "chat.completion.chunk"
    assert last["choices"][0] == {
        "index": 0, "delta": {}, "finish_reason": "stop", "logprobs": None,
    }  # fmt: skip


@pytest.mark.anyio
async def test_async_streamed_and_not(server: Server, text_models: TextModels) -> None:
    api = aclient(server)
    done = await api.chat.completions.create(model="qwen-tiny", messages=HELLO, temperature=0)
    base = text_models.baseline(
        folder=str(text_models.root / "llm/qwen-tiny"), kind="causal", messages=HELLO,
        tools=None, max_new_tokens=512,
    )  # fmt: skip
    expected = parsed(base["text"])
    assert done.choices[0].message.content == expected.text
    assert done.choices[0].message.content == "Hello! The sky is blue and the sea is calm."
    assert done.choices[0].finish_reason == "stop"
    assert done.choices[0].message.tool_calls is None
    assert done.usage is not None and done.usage.completion_tokens == len(base["ids"])
    pieces: list[str] = []
    reasons: list[Any] = []
    async for chunk in await api.chat.completions.create(
        model="qwen-tiny", messages=HELLO, temperature=0, stream=True
    ):
        pieces.append(chunk.choices[0].delta.content or "")
        reasons.append(chunk.choices[0].finish_reason)
    assert "".join(pieces) == expected.text
    assert reasons[-1] == "stop"
    await api.close()


def test_length_and_stop(server: Server) -> None:
    api = client(server)
    short = api.chat.completions.create(model="qwen-tiny", messages=HELLO, temperature=0,
                                        max_tokens=3)  # fmt: skip
    assert short.choices[0].finish_reason == "length"
    assert short.usage is not None and short.usage.completion_tokens == 3
    stopped = api.chat.completions.create(model="qwen-tiny", messages=HELLO, temperature=0,
                                          stop=["sky"])  # fmt: skip
    assert stopped.choices[0].message.content == "Hello! The"
    assert stopped.choices[0].finish_reason == "stop"


def test_errors_in_openai_shape(server: Server) -> None:
    api = client(server)
    with pytest.raises(openai.NotFoundError) as missing:
        api.chat.completions.create(model="nope", messages=HELLO)
    assert missing.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        api.chat.completions.create(model="t5-tiny", messages=HELLO)  # not a causal LM
    with pytest.raises(openai.BadRequestError) as bad:
        api.chat.completions.create(model="qwen-tiny", messages=[])
    assert "messages" in bad.value.message
    auth = {"Authorization": f"Bearer {TOKEN}"}
    r = httpx.post(server.url + "/openai/v1/chat/completions", content=b"{not json",
                   headers={**auth, "Content-Type": "application/json"})  # fmt: skip
    assert r.status_code == 400
    error = r.json()["error"]
    assert set(error) >= {"message", "type", "code"} and error["type"] == "invalid_request_error"
    # a body without a JSON type (what a cross-site page can send) is refused before the route,
    # still in the shape OpenAI's clients parse
    r = httpx.post(server.url + "/openai/v1/chat/completions", content=b"{}", headers=auth)
    assert r.status_code == 415
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "unsupported_media_type"
    assert "application/json" in error["message"] and error["param"] is None
    r = httpx.post(server.url + "/openai/v1/chat/completions",
                   json={"model": "qwen-tiny", "messages": HELLO, "temperature": 9},
                   headers={"Authorization": f"Bearer {TOKEN}"})  # fmt: skip
    assert r.status_code == 400 and r.json()["error"]["param"] == "temperature"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/openai/v1", api_key="wrong", max_retries=0
                      ).models.list()  # fmt: skip


def test_each_request_is_a_durable_run(server: Server) -> None:
    done = client(server).chat.completions.create(
        model="qwen-tiny", messages=HELLO, temperature=0, seed=5
    )
    run_id = done.id.removeprefix("chatcmpl-")
    with server.client(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        state = http.get(f"/v1/runs/{run_id}").json()
        assert state["status"] == "done" and state["target"] == "complete"
        texts = [t for t in state["takes"] if t["kind"] == "text"]
        assert texts, state
        bodies = {http.get(f"/v1/takes/{t['id']}/bytes").text for t in texts}
        assert done.choices[0].message.content in bodies


def test_prompt_cut_to_the_card_with_a_warning(
    server: Server, text_models: TextModels, worker_log: Path
) -> None:
    done = client(server).chat.completions.create(
        model="qwen-short", messages=WEATHER, tools=text_models.report["tools"], temperature=0,
        max_tokens=16,
    )  # fmt: skip
    assert done.usage is not None
    assert done.usage.prompt_tokens == 48  # 64-token cache, 16 kept for the reply
    assert done.usage.completion_tokens <= 16
    log = worker_log.read_text()
    assert "qwen-short: The prompt has 186 tokens but only 48 fit" in log
