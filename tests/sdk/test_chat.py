"""The chat-completion base (a typed ``Completion``, its JSON values read back with one decoder),
the architecture a model picker declares, and the one local placement rule every pack uses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import msgspec
import pytest
from inline_sdk import (
    Context,
    NodeDeclarationError,
    Output,
    Param,
    Port,
    llm_architecture,
    local_placement,
    node,
)
from inline_sdk.chat import (
    CHAT_PARAMS,
    ChatCompletion,
    Completion,
    TokenLogprob,
    ToolCall,
    TopLogprob,
    Usage,
    completion_outputs,
    is_chat_node,
    read_completion,
)


class Echo(ChatCompletion, type="acme/echo", title="Echo", concurrency=2):
    """A chat node that answers its prompt back, and calls a tool when asked to."""

    def complete(
        self,
        ctx: Context,
        prompt: str | None,
        *,
        model: Annotated[
            str, Param("Model", widget="select", options_from="llm", architecture="causal")
        ] = "",
        system: Annotated[str, Param("System")] = "",
        max_new_tokens: Annotated[int, Param("Max new tokens", min=1)] = 16,
        temperature: Annotated[float, Param("Temperature", min=0.0, max=2.0)] = 0.7,
        top_p: Annotated[float, Param("Top p", min=0.0, max=1.0)] = 1.0,
        seed: Annotated[int, Param("Seed", widget="seed")] = -1,
        messages: Annotated[list[dict[str, Any]], Param("Messages", internal=True)] = [],  # noqa: B006
        tools: Annotated[list[dict[str, Any]], Param("Tools", internal=True)] = [],  # noqa: B006
        stop: Annotated[list[str], Param("Stop", internal=True)] = [],  # noqa: B006
    ) -> Completion:
        calls = (ToolCall("call_1", "get_weather", '{"city": "Zürich"}'),) if tools else ()
        return Completion(
            text=prompt or "",
            thinking="short",
            tool_calls=calls,
            usage=Usage(prompt_tokens=len(messages) + 1, completion_tokens=max_new_tokens),
        )


def test_the_base_declares_the_chat_shape() -> None:
    d = Echo.spec.descriptor
    doc = json.loads(msgspec.json.encode(d))
    assert doc["outputKind"] == "text" and doc["concurrency"] == 2 and doc["category"] == "Text"
    assert doc["inputs"] == [{"id": "prompt", "label": "Prompt", "kind": "text", "required": False}]
    assert [(o["id"], o["kind"]) for o in doc["outputs"]] == [
        ("text", "text"), ("thinking", "text"), ("tool_calls", "text"),
        ("finish_reason", "text"), ("usage", "text"), ("logprobs", "text"),
    ]  # fmt: skip
    # messages, tools and stop are internal: accepted, not shown
    shown = ["model", "system", "max_new_tokens", "temperature", "top_p", "seed"]
    assert [p["key"] for p in doc["params"]] == shown
    assert set(CHAT_PARAMS) <= set(doc["paramsSchema"]["properties"])
    assert (
        is_chat_node(d) and d.architecture("model") == "causal" and d.architecture("seed") is None
    )
    # the declaration lands in the param's schema, and nowhere else
    assert doc["paramsSchema"]["properties"]["model"]["x-inline-architecture"] == "causal"
    assert "architecture" not in doc["params"][0]


def test_outputs_are_typed_json_read_back_with_one_decoder() -> None:
    spec = Echo.spec
    out = spec.invoke(None, {"prompt": "hé"}, spec.decode_params({"tools": [{"name": "x"}]}))
    assert out["finish_reason"] == "tool_calls"  # the base says so when there are calls
    assert json.loads(out["tool_calls"]) == [
        {"id": "call_1", "name": "get_weather", "arguments": '{"city": "Zürich"}'}
    ]
    assert json.loads(out["usage"]) == {"prompt_tokens": 1, "completion_tokens": 16}
    done = read_completion(out)
    assert done.text == "hé" and done.thinking == "short"
    assert done.tool_calls == (ToolCall("call_1", "get_weather", '{"city": "Zürich"}'),)
    assert done.usage == Usage(1, 16)
    plain = spec.invoke(None, {"prompt": None}, spec.decode_params({}))
    assert plain["finish_reason"] == "stop" and json.loads(plain["tool_calls"]) == []
    # a node from before the base (no usage output) reads as no usage, one before SDK 1.6 as no
    # logprobs; logprobs are typed JSON too, read back as they were written
    assert read_completion({"text": "t", "tool_calls": "[]"}).usage == Usage()
    assert read_completion({"text": "t"}).logprobs == () and json.loads(out["logprobs"]) == []
    scored = (TokenLogprob("hé", -0.25, tuple("hé".encode()), (TopLogprob("hé", -0.25),)),)
    written = completion_outputs(Completion(text="hé", logprobs=scored))
    assert read_completion(written._asdict()).logprobs == scored
    with pytest.raises(msgspec.ValidationError):
        read_completion({"tool_calls": '[{"id": 1}]'})


def test_a_chat_node_declares_the_chat_params_and_returns_a_completion() -> None:
    with pytest.raises(NodeDeclarationError, match="must declare the chat params") as caught:

        class Bare(ChatCompletion, type="acme/bare"):
            def complete(
                self, ctx: Context, prompt: str | None, *, model: Annotated[str, Param("M")] = ""
            ) -> Completion:
                return Completion()

    assert "messages" in str(caught.value) and "'model'" not in str(caught.value)
    with pytest.raises(NodeDeclarationError, match="must implement complete"):

        class Nothing(ChatCompletion, type="acme/nothing"):
            pass

    class Wrong(Echo, type="acme/wrong"):  # Echo's params, then a complete that answers text
        pass

    Wrong.complete = lambda self, ctx, prompt, **params: "text"  # type: ignore[method-assign]
    with pytest.raises(TypeError, match="complete returned str, not a Completion"):
        Wrong.spec.invoke(None, {}, Wrong.spec.decode_params({}))


def test_a_node_not_of_the_chat_shape_is_no_chat_node() -> None:
    @node("acme/say", title="Say", category="Text", output_kind="text")
    def say(
        ctx: Context,
        prompt: Annotated[str | None, Port("Prompt")] = None,
        *,
        model: Annotated[str, Param("Model", widget="select", options_from="llm")] = "",
    ) -> Annotated[str, Output("text", "Text")]:
        return ""

    assert not is_chat_node(say.descriptor)  # a prompt and a text, but no tool calls, no params
    shaped = msgspec.structs.replace(
        Echo.spec.descriptor, params_schema={"properties": {"model": {}}}
    )
    assert not is_chat_node(shaped)  # the chat ports without the chat params


def test_architecture_needs_an_llm_picker_and_a_known_value() -> None:
    with pytest.raises(NodeDeclarationError) as caught:

        @node("acme/bad", title="Bad", category="Text")
        def bad(
            ctx: Context,
            *,
            a: Annotated[str, Param("A", options_from="vae", architecture="causal")] = "",
            b: Annotated[str, Param("B", options_from="llm", architecture="diffusion")] = "",
        ) -> None:
            return None

    assert str(caught.value).count("architecture=") == 2


def test_llm_architecture_reads_the_config(tmp_path: Path) -> None:
    def folder(name: str, config: Any) -> Path:
        path = tmp_path / name
        path.mkdir()
        if config is not None:
            (path / "config.json").write_text(json.dumps(config))
        return path

    assert llm_architecture(folder("qwen", {"architectures": ["Qwen3ForCausalLM"]})) == "causal"
    assert llm_architecture(folder("t5", {"architectures": ["T5ForConditionalGeneration"],
                                          "is_encoder_decoder": True})) == "seq2seq"  # fmt: skip
    assert llm_architecture(folder("bare", {})) == "causal"  # a base model without a class
    assert llm_architecture(folder("bert", {"architectures": ["BertModel"]})) is None
    assert llm_architecture(folder("none", None)) is None
    assert llm_architecture(folder("list", [1])) is None


def test_local_placement_is_one_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INLINE_DEVICE", raising=False)
    monkeypatch.setenv("INLINE_PROFILE", "cpu")
    assert local_placement().device == "cpu" and local_placement().dtype == "float32"
    assert local_placement(8 * 1024**3).dtype is None  # too big to widen: the file's dtype
    monkeypatch.setenv("INLINE_DEVICE", "cuda:1")
    assert local_placement().device == "cpu"  # the cpu profile wins
    monkeypatch.delenv("INLINE_PROFILE")
    placed = local_placement()
    assert placed.device == "cuda:1" and placed.dtype in ("bfloat16", "float16")
