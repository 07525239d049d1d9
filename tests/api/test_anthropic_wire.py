"""``/anthropic``'s wire without a server: requests read strictly (errors named as Anthropic's
API names them), Anthropic's turns as a chat node's messages, and the streamed events as the
official SDK's own accumulator reads them."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from anthropic.lib.streaming._messages import accumulate_event
from inline_host.api.anthropic import AnthropicError
from inline_host.api.anthropic._events import Events
from inline_host.api.anthropic._messages import Plan, content, plan, stop_of, tool_uses, usage_of
from inline_host.api.anthropic._schemas import MessagesRequest, invalid

_decode = msgspec.json.Decoder(MessagesRequest)
HI = [{"role": "user", "content": "Hi"}]


def read(body: dict[str, Any]) -> MessagesRequest:
    try:
        return _decode.decode(json.dumps(body))
    except msgspec.ValidationError as exc:
        raise invalid(exc) from None


def refused(body: dict[str, Any], declared: frozenset[str] = frozenset()) -> str:
    with pytest.raises(AnthropicError) as caught:
        plan(read(body), {"model": "m"}, declared)
    assert caught.value.status == 400 and caught.value.type == "invalid_request_error"
    return caught.value.message


def test_fields_are_named_as_anthropic_names_them() -> None:
    assert refused({"model": "m", "messages": HI}) == "max_tokens: Field required"
    base = {"model": "m", "max_tokens": 8, "messages": HI}
    assert refused({**base, "seed": 1}) == "seed: Extra inputs are not permitted"
    assert refused({**base, "mcp_servers": []}) == "mcp_servers: not supported by this server"
    block = {"type": "text", "text": "x", "colour": 1}
    message = refused({**base, "messages": [{"role": "user", "content": [block]}]})
    assert message == "messages.0.content.0.colour: Extra inputs are not permitted"
    unknown = {"role": "user", "content": [{"type": "search_result"}]}
    assert refused({**base, "messages": [unknown]}).startswith("messages.0.content.0.type: ")
    assert refused({**base, "max_tokens": "8"}) == "max_tokens: Expected `int`, got `str`"
    assert refused({**base, "top_k": 3}).startswith("top_k: not supported")
    assert refused({**base, "temperature": 1.5}) == "temperature: must be between 0 and 1"
    server_tool = {"type": "web_search_20250305", "name": "web_search"}
    assert refused({**base, "tools": [server_tool]}).startswith("tools.0.type: 'web_search_")
    tool = {"name": "t", "input_schema": {}, "defer_loading": True}
    assert refused({**base, "tools": [tool]}) == (
        "tools.0.defer_loading: Extra inputs are not permitted"
    )
    think = {"type": "enabled", "budget_tokens": 1024}
    assert "budget_tokens" in refused({**base, "thinking": think})  # not below max_tokens
    picture = {"type": "image", "source": {"type": "url", "url": "http://x"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": [picture]}
    message = refused({**base, "messages": [{"role": "user", "content": [result]}]})
    assert message.startswith("messages.0.content.0.content.0: image blocks are not supported")


def test_turns_become_a_chat_nodes_messages() -> None:
    use = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
    req = read({
        "model": "m", "max_tokens": 4096,
        "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}],
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hm", "signature": "s"},
                {"type": "text", "text": "Let me check."}, use]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
                 "content": [{"type": "text", "text": "no such city"}]},
                {"type": "text", "text": "And tomorrow?"}]},
        ],
        "tools": [{"name": "get_weather", "description": "The weather",
                   "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "stop_sequences": ["###"], "temperature": 0.5, "metadata": {"user_id": "u"},
    })  # fmt: skip
    how = plan(req, {"model": "m"}, frozenset({"thinking_budget"}))
    call = {"id": "toolu_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}  # fmt: skip
    assert how.params["messages"] == [
        {"role": "system", "content": "Be brief.\n\nBe kind."},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "Sunny"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: no such city"},
        {"role": "user", "content": "And tomorrow?"},
    ]
    function = {
        "name": "get_weather",
        "description": "The weather",
        "parameters": {"type": "object"},
    }
    assert how.params["tools"] == [{"type": "function", "function": function}]
    assert how.params["thinking_budget"] == 2048 and how.params["max_new_tokens"] == 4096
    assert how.params["stop"] == ["###"] and how.params["temperature"] == 0.5
    assert how.thinking and how.one_tool and not how.omit_thinking
    # without the node's thinking_budget, no budget goes; tool_choice none leaves the tools out
    bare = plan(read({**msgspec.to_builtins(req), "tool_choice": {"type": "none"}}),
                {"model": "m"}, frozenset())  # fmt: skip
    assert "thinking_budget" not in bare.params and "tools" not in bare.params


OUTPUTS = {
    "text": "Let me check.",
    "thinking": "The user wants the weather.",
    "tool_calls": json.dumps([
        {"id": "call_a1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"id": "call_b2", "name": "get_time", "arguments": "{}"}]),
    "finish_reason": "tool_calls",
    "usage": json.dumps({"prompt_tokens": 40, "completion_tokens": 12}),
}  # fmt: skip


def sse(data: bytes) -> list[dict[str, Any]]:
    """Each event's data, checking that every event names its own type."""
    out = []
    for chunk in data.decode().split("\n\n"):
        if chunk:
            name, body = chunk.split("\n")
            event = json.loads(body.removeprefix("data: "))
            assert name == f"event: {event['type']}"
            out.append(event)
    return out


def test_the_stream_reads_in_the_sdk_as_the_message_does() -> None:
    how = Plan({}, thinking=True)
    events = Events("msg_run_1", "qwen", how)
    wire = events.start() + events.piece("thinking", "The user ")  # as the run streams them
    wire += events.piece("thinking", "wants the weather.") + events.piece("text", "Let me")
    wire += events.rest(OUTPUTS)  # what did not stream: " check."
    wire += events.end(tool_uses(OUTPUTS, how), stop_of(OUTPUTS), usage_of(OUTPUTS))
    snapshot = None
    json_bufs: dict[int, bytes] = {}
    parsed = sse(wire)
    for event in parsed:
        if event["type"] != "ping":
            snapshot = accumulate_event(event=event, current_snapshot=snapshot,
                                        json_bufs=json_bufs)  # fmt: skip
    assert snapshot is not None
    blocks = [b.model_dump(exclude_none=True) for b in snapshot.content]
    expected = [msgspec.to_builtins(b) for b in content(OUTPUTS, how)]
    assert blocks == expected
    assert [b["type"] for b in blocks] == ["thinking", "text", "tool_use", "tool_use"]
    assert blocks[2]["id"] == "toolu_a1" and blocks[2]["input"] == {"city": "Paris"}
    assert snapshot.stop_reason == "tool_use"
    assert (snapshot.usage.input_tokens, snapshot.usage.output_tokens) == (40, 12)
    types = [e["type"] for e in parsed]
    assert types[:2] == ["message_start", "ping"]
    assert types[-2:] == ["message_delta", "message_stop"]
    deltas = [e["delta"]["type"] for e in parsed if e["type"] == "content_block_delta"]
    assert deltas[:3] == ["thinking_delta", "thinking_delta", "signature_delta"]
    one = plan(read({"model": "m", "max_tokens": 8, "messages": HI, "tools": [
        {"name": "t", "input_schema": {}}], "tool_choice": {"type": "auto",
        "disable_parallel_tool_use": True}}), {}, frozenset())  # fmt: skip
    assert [u.name for u in tool_uses(OUTPUTS, one)] == ["get_weather"]
