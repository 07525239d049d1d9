"""The rest of the chat-completions request through the official ``openai`` package, against a
real server on the tiny models: fields refused by name, ``stop`` held back from the stream,
``seed``, ``max_completion_tokens``, usage in the stream, ``n`` choices, ``user``, and
``response_format`` by constrained decoding (a strict schema on the untrained model gives valid
JSON every time, streamed and not)."""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from tests.api.conftest import Server

from .conftest import TOKEN, TextModels

pytestmark = pytest.mark.timeout(2400)

HELLO = [{"role": "user", "content": "Hello there, how are you today?"}]
# nested objects, enums, arrays, a bounded string and integer: a finite reply, whatever the model
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "kind": {"type": "string", "enum": ["cat", "dog", "bird"]},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "maxItems": 3},
        "owner": {
            "type": "object",
            "properties": {
                "age": {"type": "integer", "minimum": 0, "maximum": 120},
                "city": {"type": "string", "enum": ["Paris", "Rome"]},
            },
            "required": ["age", "city"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "kind", "ok", "tags", "owner"],
    "additionalProperties": False,
}
STRICT = {"type": "json_schema", "json_schema": {"name": "pet", "schema": SCHEMA, "strict": True}}


def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/openai/v1", api_key=TOKEN, max_retries=0)


def aclient(server: Server) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.url + "/openai/v1", api_key=TOKEN, max_retries=0)


def test_unserved_fields_are_refused_by_name(server: Server) -> None:
    api = client(server)
    refused: list[tuple[dict[str, Any], str]] = [
        ({"extra_body": {"logit_bias": {"5": 10}}}, "logit_bias"),
        ({"extra_body": {"no_such_field": 1}}, "no_such_field"),
        ({"extra_body": {"top_k": 4}}, "top_k"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"response_format": {"type": "yaml"}}, "response_format.type"),  # type: ignore[dict-item]
        ({"n": 0}, "n"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"presence_penalty": 3.0}, "presence_penalty"),
    ]
    for extra, param in refused:
        with pytest.raises(openai.BadRequestError) as bad:
            api.chat.completions.create(model="qwen-tiny", messages=HELLO, max_tokens=2, **extra)
        assert bad.value.param == param, (extra, bad.value.body)
        assert bad.value.type == "invalid_request_error"
        assert param.split(".")[0] in bad.value.message
    # a field at the value that asks for nothing is as good as left out; user is accepted
    done = api.chat.completions.create(model="qwen-tiny", messages=HELLO, max_tokens=2,
                                       temperature=0, logprobs=False, user="u-1")  # fmt: skip
    assert done.choices[0].finish_reason == "length"


def _streamed(api: openai.OpenAI, **kw: Any) -> tuple[list[str], list[Any]]:
    pieces, chunks = [], []
    for chunk in api.chat.completions.create(stream=True, **kw):
        chunks.append(chunk)
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
    return pieces, chunks


def test_stop_string_never_reaches_the_client(server: Server) -> None:
    api = client(server)
    # the taught reply is "Hello! The sky is blue and the sea is calm."
    for stop in (["sky"], ["blue and"], "e sea", ["zzz", "is c"]):
        kw: dict[str, Any] = {"model": "qwen-tiny", "messages": HELLO, "temperature": 0,
                              "stop": stop}  # fmt: skip
        done = api.chat.completions.create(**kw)
        text = done.choices[0].message.content or ""
        pieces, _ = _streamed(api, **kw)
        assert "".join(pieces) == text
        for s in [stop] if isinstance(stop, str) else stop:
            assert s not in text
            # no piece ever held the start of the stop string that later matched
            assert s not in "".join(pieces)
        assert "Hello! The sky is blue and the sea is calm.".startswith(text)
        assert done.choices[0].finish_reason == "stop"


def test_same_seed_same_reply_with_sampling(server: Server) -> None:
    api = client(server)

    def reply(seed: int, tokens: int) -> str:
        done = api.chat.completions.create(model="qwen-random", messages=HELLO, temperature=1.0,
                                           seed=seed, max_tokens=tokens)  # fmt: skip
        return done.choices[0].message.content or ""

    # different lengths are different runs (no cache answers): the same draws give a prefix
    long, short = reply(7, 16), reply(7, 8)
    assert long.startswith(short) and len(short) > 0
    assert reply(8, 16) != long


def test_max_completion_tokens_and_usage_in_the_last_chunk(server: Server) -> None:
    api = client(server)
    kw: dict[str, Any] = {"model": "qwen-random", "messages": HELLO, "temperature": 0.8,
                          "seed": 3, "max_completion_tokens": 5}  # fmt: skip
    done = api.chat.completions.create(**kw)
    assert done.choices[0].finish_reason == "length"
    assert done.usage is not None and done.usage.completion_tokens == 5
    _, chunks = _streamed(api, stream_options={"include_usage": True}, **kw)
    assert chunks[-1].choices == [] and chunks[-1].usage == done.usage
    assert all(c.usage is None for c in chunks[:-1])
    _, plain = _streamed(api, **kw)
    assert all(c.usage is None for c in plain)


def test_n_choices_streamed_and_not(server: Server) -> None:
    api = client(server)
    kw: dict[str, Any] = {"model": "qwen-random", "messages": HELLO, "temperature": 1.0,
                          "seed": 11, "max_tokens": 6, "n": 3}  # fmt: skip
    done = api.chat.completions.create(**kw)
    assert [c.index for c in done.choices] == [0, 1, 2]
    texts = [c.message.content or "" for c in done.choices]
    assert len(set(texts)) > 1  # each choice its own seed
    assert done.usage is not None and done.usage.completion_tokens == 18
    one = api.chat.completions.create(**{**kw, "n": 1, "max_tokens": 3})
    assert texts[0].startswith(one.choices[0].message.content or "")
    streamed: dict[int, str] = {0: "", 1: "", 2: ""}
    finished: dict[int, str | None] = {}
    usage = None
    for chunk in api.chat.completions.create(stream=True, stream_options={"include_usage": True},
                                             **kw):  # fmt: skip
        usage = chunk.usage or usage
        for choice in chunk.choices:
            streamed[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finished[choice.index] = choice.finish_reason
    assert [streamed[i] for i in range(3)] == texts
    assert finished == {0: "length", 1: "length", 2: "length"}
    assert usage == done.usage
    # the choices were decoded together, one batch of 3 (the streamed ones were cache hits)
    health = httpx.get(server.url + "/v1/health", headers={"Authorization": f"Bearer {TOKEN}"})
    batches = health.json()["workers"]["text"]["runtime"]["choicesBatching"]
    assert batches["sizes"].get("3", 0) >= 1 and batches["fallbacks"] == 0, batches


def _text_worker(server: Server) -> dict[str, Any] | None:
    health = httpx.get(server.url + "/v1/health", headers={"Authorization": f"Bearer {TOKEN}"})
    return health.json()["workers"].get("text")


def test_n_choices_each_keep_their_own_grammar(server: Server) -> None:
    """On a fresh worker too: the choices' calls arrive at once and load the model once."""
    api = client(server)
    worker = _text_worker(server)
    if worker is not None:  # a fresh worker for this request: its choices are its first calls
        os.kill(worker["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 60
        while (now := _text_worker(server)) is not None and now["pid"] == worker["pid"]:
            assert time.monotonic() < deadline, "the host never saw its text worker die"
            time.sleep(0.05)  # polling another process's state, not synchronisation
    done = api.chat.completions.create(model="qwen-random", messages=HELLO, temperature=1.0,
                                       seed=21, max_tokens=400, n=3,
                                       response_format=STRICT)  # type: ignore[arg-type]  # fmt: skip
    values = [_valid(c.message.content or "") for c in done.choices]
    assert len({json.dumps(v, sort_keys=True) for v in values}) > 1  # each its own draw
    assert all(c.finish_reason == "stop" for c in done.choices)


def _valid(text: str) -> dict[str, Any]:
    value = json.loads(text)
    jsonschema.validate(value, SCHEMA)
    return value


def test_strict_json_schema_is_valid_every_time(server: Server) -> None:
    api = client(server)
    for seed in range(6):
        kw: dict[str, Any] = {
            "model": "qwen-random", "messages": HELLO, "temperature": 1.0, "seed": seed,
            "max_tokens": 400, "response_format": STRICT,
        }  # fmt: skip
        done = api.chat.completions.create(**kw)
        assert done.choices[0].finish_reason == "stop", done.choices[0].message.content
        value = _valid(done.choices[0].message.content or "")
        assert value["kind"] in ("cat", "dog", "bird")
        pieces, _ = _streamed(api, **{**kw, "seed": seed + 100})
        _valid("".join(pieces))


@pytest.mark.anyio
async def test_strict_json_schema_async_streamed_and_not(server: Server) -> None:
    api = aclient(server)
    kw: dict[str, Any] = {"model": "qwen-random", "messages": HELLO, "temperature": 1.0,
                          "seed": 42, "max_tokens": 400, "response_format": STRICT}  # fmt: skip
    done = await api.chat.completions.create(**kw)
    _valid(done.choices[0].message.content or "")
    pieces = []
    async for chunk in await api.chat.completions.create(stream=True, **{**kw, "n": 2}):
        pieces += [(c.index, c.delta.content or "") for c in chunk.choices]
    for i in (0, 1):
        _valid("".join(text for index, text in pieces if index == i))
    await api.close()


def test_json_object_and_a_refused_schema(server: Server) -> None:
    api = client(server)
    json_object: Any = {"type": "json_object"}
    done = api.chat.completions.create(model="qwen-tiny", messages=HELLO, temperature=0,
                                       max_tokens=200, response_format=json_object)  # fmt: skip
    text = done.choices[0].message.content or ""
    assert text.startswith("{")
    if done.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}
    body = {"model": "qwen-tiny", "messages": HELLO, "response_format": bad}
    r = httpx.post(server.url + "/openai/v1/chat/completions", headers=auth, timeout=120,
                   json=body)  # fmt: skip
    assert r.status_code == 400, r.text
    assert "response_format" in r.json()["error"]["message"]


BOUNDED_TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]},
                       "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
        "required": ["zone"], "additionalProperties": False}}},
]  # fmt: skip


def test_tool_choice_forces_a_call_on_the_untrained_model(server: Server) -> None:
    api = client(server)
    base: dict[str, Any] = {"model": "qwen-random", "messages": HELLO, "temperature": 1.0,
                            "max_tokens": 200, "tools": BOUNDED_TOOLS}  # fmt: skip
    for seed in range(3):
        done = api.chat.completions.create(seed=seed, tool_choice="required", **base)
        (call,) = done.choices[0].message.tool_calls or []
        assert done.choices[0].finish_reason == "tool_calls"
        assert call.function.name in ("get_weather", "get_time")  # type: ignore[union-attr]
        named = api.chat.completions.create(
            seed=seed, tool_choice={"type": "function", "function": {"name": "get_time"}}, **base
        )
        (call,) = named.choices[0].message.tool_calls or []
        assert call.function.name == "get_time"  # type: ignore[union-attr]
        assert json.loads(call.function.arguments)["zone"] in ("UTC", "CET")  # type: ignore[union-attr]
    with pytest.raises(openai.BadRequestError) as bad:
        api.chat.completions.create(
            tool_choice={"type": "function", "function": {"name": "nope"}}, **base
        )
    assert bad.value.param == "tool_choice"


def test_tool_choice_none_parallel_calls_and_reasoning_effort(
    server: Server, text_models: TextModels
) -> None:
    api = client(server)
    weather = [{"role": "user", "content": "What is the weather in Paris?"}]
    kw: dict[str, Any] = {"model": "qwen-tiny", "messages": weather, "temperature": 0,
                          "max_tokens": 80, "tools": text_models.report["tools"]}  # fmt: skip
    called = api.chat.completions.create(parallel_tool_calls=False, **kw)
    assert len(called.choices[0].message.tool_calls or []) == 1
    unused = api.chat.completions.create(tool_choice="none", **kw)
    assert not unused.choices[0].message.tool_calls
    assert unused.choices[0].finish_reason != "tool_calls"
    # the chat template hears reasoning_effort: off ("none") renders an empty think block
    plain = api.chat.completions.create(model="qwen-tiny", messages=HELLO, max_tokens=1)
    high = api.chat.completions.create(model="qwen-tiny", messages=HELLO, max_tokens=1,
                                       reasoning_effort="high")  # fmt: skip
    off = api.chat.completions.create(model="qwen-tiny", messages=HELLO, max_tokens=1,
                                      reasoning_effort="none")  # fmt: skip
    assert plain.usage and high.usage and off.usage
    assert high.usage.prompt_tokens == plain.usage.prompt_tokens < off.usage.prompt_tokens


def test_presence_and_frequency_penalties_change_the_reply(server: Server) -> None:
    api = client(server)
    kw: dict[str, Any] = {"model": "qwen-random", "messages": HELLO, "temperature": 0,
                          "max_tokens": 40}  # fmt: skip
    plain = api.chat.completions.create(**kw).choices[0].message.content
    both = api.chat.completions.create(presence_penalty=2.0, frequency_penalty=2.0, **kw)
    assert both.choices[0].message.content != plain


def test_logprobs_are_each_token_s_and_sum_sensibly_streamed_and_not(server: Server) -> None:
    """``logprobs`` / ``top_logprobs``: one entry per token of the reply, each <= 0, the top ones
    sorted, the chosen token among them under greedy decoding, and its text the reply's; the
    stream carries the same entries with each choice's last chunk."""
    import math

    api = client(server)
    asked = dict(model="qwen-tiny", messages=HELLO, max_tokens=6, temperature=0, seed=4,
                 logprobs=True, top_logprobs=3)  # fmt: skip
    done = api.chat.completions.create(**asked)  # type: ignore[call-overload]
    choice = done.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content
    content = choice.logprobs.content
    assert len(content) == done.usage.completion_tokens  # type: ignore[union-attr]
    # every generated token is scored, a thinking model's thinking too (as vLLM does)
    said = "".join(t.token for t in content)
    thought = getattr(choice.message, "reasoning_content", None) or ""
    assert (choice.message.content or "") in said and thought.strip() in said, (said, choice)
    for t in content:
        assert t.logprob <= 0 and len(t.top_logprobs) == 3
        tops = [o.logprob for o in t.top_logprobs]
        assert tops == sorted(tops, reverse=True) and all(v <= 0 for v in tops)
        assert sum(math.exp(v) for v in tops) <= 1 + 1e-5
        assert t.top_logprobs[0].token == t.token  # greedy: the likeliest was chosen
        assert math.isclose(t.top_logprobs[0].logprob, t.logprob, abs_tol=1e-5)
        assert bytes(t.bytes or []).decode() == t.token
    streamed = [c for c in api.chat.completions.create(stream=True, **asked)]  # type: ignore[call-overload]
    scored = [ch.logprobs for c in streamed for ch in c.choices if ch.logprobs is not None]
    assert len(scored) == 1 and scored[0].content is not None
    assert [(t.token, round(t.logprob, 5)) for t in scored[0].content] == [
        (t.token, round(t.logprob, 5)) for t in content
    ]
    # without logprobs: none; top_logprobs alone is refused by name
    plain = api.chat.completions.create(model="qwen-tiny", messages=HELLO, max_tokens=2)
    assert plain.choices[0].logprobs is None
    with pytest.raises(openai.BadRequestError) as bad:
        api.chat.completions.create(model="qwen-tiny", messages=HELLO, max_tokens=2,
                                    top_logprobs=2)  # fmt: skip
    assert bad.value.param == "top_logprobs"
