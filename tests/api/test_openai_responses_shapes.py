"""The Responses API's pieces without a server: the request read into the chat request it is,
the refusals naming their field, the streamed events accumulated by the official SDK's own
stream state into the response answered whole, the owners of model folders, and the sizes a
pipeline folder makes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from inline_host.api.openai._listing import owner_of
from inline_host.api.openai._responses import Events, output_items, response_object
from inline_host.api.openai._responses_request import chat_request, parse_request
from inline_host.api.openai._schemas import OpenAIError
from inline_host.api.openai._sizes import folder_multiple
from inline_sdk.chat import Completion, ToolCall, Usage
from openai import omit
from openai._models import construct_type
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent

TOOL = {"type": "function", "name": "get_weather", "description": "The weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}  # fmt: skip


def body(**fields: Any) -> bytes:
    return json.dumps({"model": "m", "input": "hi", **fields}).encode()


def test_a_request_is_the_chat_request_it_says() -> None:
    req = parse_request(body(
        instructions="Be brief.", tools=[TOOL], max_output_tokens=9, temperature=0,
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
               {"type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": "Let me check.", "annotations": []}]},
               {"type": "function_call", "call_id": "c1", "name": "get_weather",
                "arguments": "{\"city\": \"Paris\"}", "id": "fc_c1", "status": "completed"},
               {"type": "reasoning", "id": "rs_1", "summary": []},
               {"type": "function_call_output", "call_id": "c1", "output": "sunny"}],
    ))  # fmt: skip
    chat, tools = chat_request(req)
    assert [m["role"] for m in chat.messages] == ["system", "user", "assistant", "tool"]
    assistant = chat.messages[2]
    assert assistant["content"] == "Let me check."
    assert assistant["tool_calls"][0]["function"]["name"] == "get_weather"
    assert chat.messages[3] == {"role": "tool", "content": "sunny", "tool_call_id": "c1"}
    function = {k: TOOL[k] for k in ("name", "description", "parameters")}
    assert tools == [{"type": "function", "function": function}]
    assert chat.max_completion_tokens == 9 and chat.temperature == 0


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"store": True}, "store"),
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"conversation": "c"}, "conversation"),
        ({"tools": [{"type": "file_search"}]}, "tools[0].type"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
        ({"prompt": {"id": "p"}}, "prompt"),
        ({"nonsense": 1}, "nonsense"),
        ({"temperature": "hot"}, "temperature"),
        ({"truncation": "auto"}, "truncation"),
        ({"text": {"format": {"type": "grammar"}}}, "text.format.type"),
    ],
)
def test_refusals_name_their_field(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(OpenAIError) as bad:
        chat_request(parse_request(body(**fields)))
    assert bad.value.status == 400 and bad.value.param == param


def _events(raw: bytes) -> list[dict[str, Any]]:
    out = []
    for block in raw.decode().split("\n\n"):
        if block:
            kind, data = block.split("\n")
            out.append(json.loads(data.removeprefix("data: ")))
            assert kind == f"event: {out[-1]['type']}"
    return out


def plain(items: list[Any]) -> list[dict[str, Any]]:
    """Output items as data, without what the SDK's parsing adds (``parsed...``)."""
    out = []
    for item in items:
        data = item.to_dict()
        data.pop("parsed_arguments", None)
        for part in data.get("content") or []:
            part.pop("parsed", None)
        out.append(data)
    return out


def test_the_stream_accumulates_to_the_whole_response() -> None:
    req = parse_request(body(tools=[TOOL]))
    done = Completion(text="Let me check.", thinking="Hmm.", finish_reason="tool_calls",
                      tool_calls=(ToolCall(id="call_1", name="get_weather",
                                           arguments='{"city": "Paris"}'),),
                      usage=Usage(prompt_tokens=5, completion_tokens=7))  # fmt: skip
    events = Events(req, "run_1", 100)
    raw = events.start() + events.piece("thinking", "Hm") + events.piece("thinking", "m.")
    raw += events.piece("text", "Let me") + events.end(done)
    state = ResponseStreamState(input_tools=[TOOL], text_format=omit)  # type: ignore[list-item]
    seen = []
    for data in _events(raw):
        event = construct_type(type_=ResponseStreamEvent, value=data)
        seen += state.handle_event(event)  # type: ignore[arg-type]
    assert [e.sequence_number for e in seen] == list(range(len(seen)))
    final = state._completed_response
    assert final is not None and final.status == "completed"
    whole = output_items("run_1", done)
    expected = construct_type(type_=Response, value=msgspec.to_builtins(
        response_object(req, "run_1", 100, "completed", whole)))  # fmt: skip
    assert plain(final.output) == plain(expected.output)  # type: ignore[union-attr]
    assert final.output_text == "Let me check."
    assert final.usage is not None and final.usage.total_tokens == 12


def test_owner_of_a_folder(tmp_path: Path) -> None:
    assert owner_of(tmp_path / "none") == "local"
    folder = tmp_path / "m"
    folder.mkdir()
    assert owner_of(folder) == "local"
    (folder / "inline.json").write_text('{"source": "hf:Qwen/Qwen3-0.6B"}')
    assert owner_of(folder) == "Qwen"
    (folder / "inline.json").write_text('{"source": "file:/x/y"}')
    assert owner_of(folder) == "local"
    (folder / "inline.json").write_text("[1]")
    assert owner_of(folder) == "local"


def test_the_sizes_a_pipeline_folder_makes(tmp_path: Path) -> None:
    def folder(cls: str, blocks: int, denoiser: str, patch: int | None) -> Path:
        root = tmp_path / f"{cls}-{blocks}-{patch}"
        (root / "vae").mkdir(parents=True)
        (root / denoiser).mkdir()
        (root / "model_index.json").write_text(json.dumps({"_class_name": cls}))
        (root / "vae" / "config.json").write_text(json.dumps({"block_out_channels": [8] * blocks}))
        config = {} if patch is None else {"patch_size": patch}
        (root / denoiser / "config.json").write_text(json.dumps(config))
        return root

    assert folder_multiple(folder("StableDiffusionPipeline", 4, "unet", None)) == 8
    assert folder_multiple(folder("PixArtAlphaPipeline", 4, "transformer", 2)) == 16
    assert folder_multiple(folder("FluxPipeline", 4, "transformer", 1)) == 16
    assert folder_multiple(folder("StableDiffusionPipeline", 2, "unet", None)) == 2
