"""``/anthropic/v1`` driven by the official ``anthropic`` package on the tiny local models: sync
and async, streamed and not, with thinking and tools; ``count_tokens``, the error shapes, auth,
and each reply a durable run in ``/v1/runs``."""

from __future__ import annotations

import json
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from tests.api.conftest import Server

from .conftest import TOKEN, TextModels

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "packs" / "text" / "src"))
from inline_text import ReplyParser

# the session builds venvs and tiny models first: slow on a loaded machine
pytestmark = pytest.mark.timeout(2400)

WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]
HELLO = [{"role": "user", "content": "Hello there, how are you today?"}]
HELLO_TEXT = "Hello! The sky is blue and the sea is calm."
GREEDY = {"temperature": 0}  # the SDK has no temperature argument any more: sent as extra_body
THINK = {"type": "enabled", "budget_tokens": 1024}


def client(server: Server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url + "/anthropic", api_key=TOKEN, max_retries=0)


def aclient(server: Server) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url=server.url + "/anthropic", api_key=TOKEN, max_retries=0
    )


def tools_of(text_models: TextModels) -> list[dict[str, Any]]:
    """The tiny model's tools (OpenAI function specs) as Anthropic's."""
    return [
        {"name": f["name"], "description": f["description"], "input_schema": f["parameters"]}
        for f in (t["function"] for t in text_models.report["tools"])
    ]


def blocks_of(message: Any) -> list[tuple[Any, ...]]:
    """A message's content blocks, compared by what they say."""
    keys = ("type", "text", "thinking", "signature", "id", "name", "input")
    return [tuple(getattr(b, k, None) for k in keys) for b in message.content]


def parsed(raw: str) -> ReplyParser:
    parser = ReplyParser(emit=lambda _s, _t: None)
    parser.feed(raw)
    parser.finish()
    return parser


def test_a_reply_matches_transformers_with_usage(server: Server, text_models: TextModels) -> None:
    done = client(server).messages.create(
        model="qwen-tiny", max_tokens=512, messages=HELLO, extra_body=GREEDY
    )
    base = text_models.baseline(
        folder=str(text_models.root / "llm/qwen-tiny"),
        kind="causal",
        messages=HELLO,
        tools=None,
        max_new_tokens=512,
    )
    assert parsed(base["text"]).text == HELLO_TEXT
    assert done.type == "message" and done.role == "assistant" and done.model == "qwen-tiny"
    assert done.id.startswith("msg_run_")
    (block,) = done.content  # no thinking block: the request did not ask for thinking
    assert block.type == "text" and block.text == HELLO_TEXT
    assert done.stop_reason == "end_turn" and done.stop_sequence is None
    assert done.usage.input_tokens == base["prompt_tokens"]
    assert done.usage.output_tokens == len(base["ids"])


def test_thinking_blocks_from_the_thinking_output(server: Server, text_models: TextModels) -> None:
    done = client(server).messages.create(
        model="qwen-tiny", max_tokens=2048, messages=HELLO, thinking=THINK, extra_body=GREEDY
    )
    expected = parsed(text_models.report["plain_reply"])
    thinking, text = done.content
    assert thinking.type == "thinking" and thinking.thinking == expected.reasoning
    assert thinking.thinking and thinking.signature  # a digest of the text: no provider signed
    assert text.type == "text" and text.text == HELLO_TEXT
    with pytest.raises(anthropic.BadRequestError) as small:  # Anthropic's own rule
        client(server).messages.create(
            model="qwen-tiny",
            max_tokens=512,
            messages=HELLO,
            thinking={"type": "enabled", "budget_tokens": 100},
        )
    assert "budget_tokens" in small.value.message


def test_tools_give_a_tool_use_block_and_the_turn_goes_back(
    server: Server, text_models: TextModels
) -> None:
    api = client(server)
    tools = tools_of(text_models)
    done = api.messages.create(
        model="qwen-tiny", max_tokens=80, messages=WEATHER, tools=tools, extra_body=GREEDY
    )
    assert done.stop_reason == "tool_use"
    text, use = done.content
    assert text.type == "text" and text.text == "Let me check."
    assert use.type == "tool_use" and use.id.startswith("toolu_")
    assert use.name == "get_weather" and use.input == {"city": "Paris"}
    # the same request through /openai: the same prompt, the same tokens
    via_openai = httpx.post(
        server.url + "/openai/v1/chat/completions",
        json={
            "model": "qwen-tiny",
            "messages": WEATHER,
            "temperature": 0,
            "max_tokens": 80,
            "tools": text_models.report["tools"],
        },
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=120,
    ).json()
    assert done.usage.input_tokens == via_openai["usage"]["prompt_tokens"]
    assert done.usage.output_tokens == via_openai["usage"]["completion_tokens"]
    # the tool's result goes back as Anthropic sends it: tool_use, then tool_result
    turn = [
        *WEATHER,
        {"role": "assistant", "content": done.content},  # as Anthropic's docs pass it back
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": use.id, "content": "Sunny, 21 C"},
                {"type": "text", "text": "Thanks!"},
            ],
        },
    ]
    again = api.messages.create(
        model="qwen-tiny", max_tokens=8, messages=turn, tools=tools, extra_body=GREEDY
    )
    assert again.usage.input_tokens > done.usage.input_tokens
    counted = api.messages.count_tokens(model="qwen-tiny", messages=turn, tools=tools)
    assert counted.input_tokens == again.usage.input_tokens
    # tool_choice none leaves the tools out; one the node cannot force is refused
    none = api.messages.create(
        model="qwen-tiny",
        max_tokens=80,
        messages=WEATHER,
        tools=tools,
        tool_choice={"type": "none"},
        extra_body=GREEDY,
    )
    assert all(b.type != "tool_use" for b in none.content)
    with pytest.raises(anthropic.BadRequestError) as forced:
        api.messages.create(
            model="qwen-tiny",
            max_tokens=80,
            messages=WEATHER,
            tools=tools,
            tool_choice={"type": "any"},
        )
    assert "tool_choice" in forced.value.message and "'any'" in forced.value.message


def test_stop_sequences_and_max_tokens(server: Server) -> None:
    api = client(server)
    short = api.messages.create(model="qwen-tiny", max_tokens=3, messages=HELLO, extra_body=GREEDY)
    assert short.stop_reason == "max_tokens" and short.usage.output_tokens == 3
    stopped = api.messages.create(
        model="qwen-tiny", max_tokens=512, messages=HELLO, stop_sequences=["sky"], extra_body=GREEDY
    )
    (block,) = stopped.content
    assert block.type == "text" and block.text == "Hello! The"
    # text/complete reports a stop string met as it reports the end of the turn (README)
    assert stopped.stop_reason == "end_turn"


def test_streamed_deltas_assemble_to_the_reply(server: Server, text_models: TextModels) -> None:
    api = client(server)
    done = api.messages.create(
        model="qwen-tiny", max_tokens=2048, messages=HELLO, thinking=THINK, extra_body=GREEDY
    )
    pieces: list[str] = []
    kinds: list[str] = []
    with api.messages.stream(
        model="qwen-tiny", max_tokens=2048, messages=HELLO, thinking=THINK, extra_body=GREEDY
    ) as stream:
        for ev in stream:
            kinds.append(ev.type)
            if ev.type == "text":
                pieces.append(ev.text)
        final = stream.get_final_message()
    assert "".join(pieces) == HELLO_TEXT
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert blocks_of(final) == blocks_of(done) and len(done.content) == 2
    assert final.usage.input_tokens == done.usage.input_tokens > 0
    assert final.usage.output_tokens == done.usage.output_tokens > 0
    assert final.stop_reason == "end_turn" and final.id.startswith("msg_run_")
    # tools: the input streams as input_json_delta fragments, the SDK assembles it
    with api.messages.stream(
        model="qwen-tiny",
        max_tokens=80,
        messages=WEATHER,
        tools=tools_of(text_models),
        extra_body=GREEDY,
    ) as stream:
        fragments = [ev.partial_json for ev in stream if ev.type == "input_json"]
        final = stream.get_final_message()
    assert len(fragments) > 1 and json.loads("".join(fragments)) == {"city": "Paris"}
    assert [b.type for b in final.content] == ["text", "tool_use"]
    assert final.content[1].input == {"city": "Paris"}
    assert final.stop_reason == "tool_use"


def test_raw_events_are_anthropics(server: Server) -> None:
    body = {
        "model": "qwen-tiny",
        "max_tokens": 2048,
        "messages": HELLO,
        "stream": True,
        "thinking": THINK,
        "temperature": 0,
    }
    headers = {"x-api-key": TOKEN, "anthropic-version": "2023-06-01"}  # the header Anthropic's
    with httpx.stream(
        "POST", server.url + "/anthropic/v1/messages", json=body, headers=headers, timeout=120
    ) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    events = [(a[7:], json.loads(b[6:])) for a, b in zip(lines[::2], lines[1::2], strict=True)]
    assert all(name == data["type"] for name, data in events)
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "ping"] and names[-2:] == [
        "message_delta",
        "message_stop",
    ]
    blocks = [d["content_block"]["type"] for n, d in events if n == "content_block_start"]
    assert blocks == ["thinking", "text"]
    deltas = [d["delta"]["type"] for n, d in events if n == "content_block_delta"]
    assert deltas.index("signature_delta") < deltas.index("text_delta")
    assert names.count("content_block_stop") == 2
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["role"] == "assistant"
    last = events[-2][1]
    assert last["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert last["usage"]["output_tokens"] > 0 and last["usage"]["input_tokens"] > 0


@pytest.mark.anyio
async def test_async_streamed_and_not(server: Server) -> None:
    api = aclient(server)
    done = await api.messages.create(
        model="qwen-tiny", max_tokens=512, messages=HELLO, extra_body=GREEDY
    )
    assert [b.text for b in done.content if b.type == "text"] == [HELLO_TEXT]
    async with api.messages.stream(
        model="qwen-tiny", max_tokens=512, messages=HELLO, extra_body=GREEDY
    ) as stream:
        text = "".join([piece async for piece in stream.text_stream])
        final = await stream.get_final_message()
    assert text == HELLO_TEXT and final.usage.output_tokens == done.usage.output_tokens
    counted = await api.messages.count_tokens(model="qwen-tiny", messages=HELLO)
    assert counted.input_tokens == done.usage.input_tokens
    await api.close()


def test_count_tokens_is_the_prompt_the_model_reads(
    server: Server, text_models: TextModels
) -> None:
    api = client(server)
    tools = tools_of(text_models)
    system = [{"type": "text", "text": "You are a helpful assistant."}]
    counted = api.messages.count_tokens(
        model="qwen-tiny", messages=WEATHER, tools=tools, system=system
    )
    done = api.messages.create(
        model="qwen-tiny",
        max_tokens=4,
        messages=WEATHER,
        tools=tools,
        system=system,
        extra_body=GREEDY,
    )
    assert counted.input_tokens == done.usage.input_tokens > 0
    # the whole prompt, even past what a small model card lets the model read
    short = api.messages.count_tokens(model="qwen-short", messages=WEATHER, tools=tools)
    assert short.input_tokens == 186


def test_errors_in_anthropics_shape(server: Server) -> None:
    api = client(server)
    with pytest.raises(anthropic.NotFoundError) as missing:
        api.messages.create(model="nope", max_tokens=8, messages=HELLO)
    assert missing.value.body["error"]["type"] == "not_found_error"
    assert missing.value.body["type"] == "error"
    with pytest.raises(anthropic.NotFoundError):
        api.messages.create(model="t5-tiny", max_tokens=8, messages=HELLO)
    with pytest.raises(anthropic.BadRequestError) as unknown:
        api.messages.create(
            model="qwen-tiny", max_tokens=8, messages=HELLO, extra_body={"frobnicate": 1}
        )
    assert "frobnicate: Extra inputs are not permitted" in unknown.value.message
    assert unknown.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError) as image:
        picture = {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        }
        api.messages.create(
            model="qwen-tiny",
            max_tokens=8,
            messages=[
                {"role": "user", "content": [picture, {"type": "text", "text": "What is it?"}]}
            ],
        )
    assert "messages.0.content.0: image blocks are not supported" in image.value.message
    with pytest.raises(anthropic.BadRequestError) as top_k:
        api.messages.create(
            model="qwen-tiny", max_tokens=8, messages=HELLO, extra_body={"top_k": 5}
        )
    assert "top_k" in top_k.value.message
    with pytest.raises(anthropic.BadRequestError) as prefill:
        api.messages.create(
            model="qwen-tiny",
            max_tokens=8,
            messages=[*HELLO, {"role": "assistant", "content": "Hi"}],
        )
    assert "messages.1" in prefill.value.message and "prefill" in prefill.value.message
    with pytest.raises(anthropic.AuthenticationError) as auth:
        anthropic.Anthropic(
            base_url=server.url + "/anthropic", api_key="wrong", max_retries=0
        ).messages.create(model="qwen-tiny", max_tokens=8, messages=HELLO)
    assert auth.value.body["error"]["type"] == "authentication_error"

    url = server.url + "/anthropic/v1/messages"
    key = {"x-api-key": TOKEN}
    r = httpx.post(url, json={"model": "qwen-tiny", "messages": HELLO}, headers=key)
    assert r.status_code == 400
    assert r.json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"},
    }
    r = httpx.post(url, content=b"{not json", headers={**key, "content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(
        url,
        json={
            "model": "qwen-tiny",
            "max_tokens": 8,
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "hi", "colour": "red"}]}
            ],
        },
        headers=key,
    )
    assert (
        r.json()["error"]["message"]
        == "messages.0.content.0.colour: Extra inputs are not permitted"
    )
    r = httpx.post(
        url,
        json={"model": "qwen-tiny", "max_tokens": 8, "messages": HELLO, "container": "c1"},
        headers=key,
    )
    assert r.json()["error"]["message"] == "container: not supported by this server"
    # refused before any route: a body a cross-site page could send, no route, a wrong method
    r = httpx.post(url, content=b"{}", headers=key)
    assert r.status_code == 415 and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(server.url + "/anthropic/v1/nope", json={}, headers=key)
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    r = httpx.get(url, headers=key)
    assert r.status_code == 405 and r.json()["type"] == "error"
    r = httpx.post(url, json={}, headers={"x-api-key": "wrong"})
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.BadRequestError):
        api.messages.count_tokens(model="qwen-tiny", messages=[])


def test_each_reply_is_a_durable_run(server: Server) -> None:
    done = client(server).messages.create(
        model="qwen-tiny", max_tokens=512, messages=HELLO, extra_body=GREEDY
    )
    run_id = done.id.removeprefix("msg_")
    with server.client(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        state = http.get(f"/v1/runs/{run_id}").json()
        assert state["status"] == "done" and state["target"] == "complete"
        bodies = {http.get(f"/v1/takes/{t['id']}/bytes").text for t in state["takes"]}
        assert HELLO_TEXT in bodies


def test_a_dropped_stream_cancels_its_run(server: Server) -> None:
    """The client of a streamed reply goes: nobody listens to its run any more, so it is
    cancelled rather than left to run. The tiny model is quicker than the grace a retry gets, so
    the reply waits behind another one (``text/complete`` takes one call at once)."""
    fresh = f"Session {uuid.uuid4()}."  # nothing cached: both replies run
    ahead = {"model": "qwen-random", "max_tokens": 4000, "temperature": 0, "system": fresh,
             "messages": HELLO}  # fmt: skip
    headers = {"x-api-key": TOKEN}
    url = server.url + "/anthropic/v1/messages"
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(httpx.post, url, json=ahead, headers=headers, timeout=300)
        time.sleep(0.5)  # the first reply has the node's slot
        dropped = {**ahead, "max_tokens": 3999, "stream": True}
        with httpx.stream("POST", url, json=dropped, headers=headers, timeout=120) as r:
            run_id = r.headers["x-inline-run-id"]
            assert next(r.iter_lines()) == "event: message_start"  # it began: go
        assert first.result().json()["stop_reason"] == "max_tokens"
    with server.client(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        for _ in range(300):
            state = http.get(f"/v1/runs/{run_id}").json()
            if state["status"] not in ("queued", "running"):
                break
            time.sleep(0.1)  # polling another process's run; not synchronisation in-process
    assert state["status"] == "cancelled"
