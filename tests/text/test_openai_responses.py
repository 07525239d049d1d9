"""``/openai/v1/responses`` driven by the official ``openai`` package on the tiny local models:
``responses.create`` and ``responses.stream`` (sync and async) with a tool call and the tool's
result sent back, the same tokens as the chat completion of the same request, the fields a
stateless server refuses, and each response a durable run in ``/v1/runs``."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.api.conftest import Server

from .conftest import TOKEN, TextModels

# the session builds venvs and tiny models first: slow on a loaded machine
pytestmark = pytest.mark.timeout(2400)

WEATHER = "What is the weather in Paris?"
HELLO = "Hello there, how are you today?"
HELLO_TEXT = "Hello! The sky is blue and the sea is calm."


def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/openai/v1", api_key=TOKEN, max_retries=0)


def aclient(server: Server) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.url + "/openai/v1", api_key=TOKEN, max_retries=0)


def tools_of(text_models: TextModels) -> list[dict[str, Any]]:
    """The tiny model's tools (chat function specs) as the Responses API's flat ones."""
    return [{"type": "function", **t["function"]} for t in text_models.report["tools"]]


def said(output: list[Any]) -> list[tuple[Any, ...]]:
    """Output items, compared by what they say."""
    out: list[tuple[Any, ...]] = []
    for item in output:
        if item.type == "message":
            out.append(("message", "".join(c.text for c in item.content)))
        elif item.type == "reasoning":
            out.append(("reasoning", "".join(c.text for c in item.content or [])))
        else:
            out.append((item.type, item.name, item.arguments))  # a call's id is its run's
    return out


def test_create_with_a_tool_call_and_its_result(server: Server, text_models: TextModels) -> None:
    api = client(server)
    tools = tools_of(text_models)
    done = api.responses.create(model="qwen-tiny", input=WEATHER, tools=tools,  # type: ignore[arg-type]
                                temperature=0, max_output_tokens=80)  # fmt: skip
    chat = api.chat.completions.create(
        model="qwen-tiny", messages=[{"role": "user", "content": WEATHER}],
        tools=text_models.report["tools"], temperature=0, max_tokens=80,
    )  # fmt: skip
    assert done.id.startswith("resp_run_") and done.object == "response"
    assert done.status == "completed" and done.model == "qwen-tiny"
    message, call = (i for i in done.output if i.type != "reasoning")
    assert message.type == "message" and message.role == "assistant"
    assert done.output_text == chat.choices[0].message.content == "Let me check."
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"}
    (chat_call,) = chat.choices[0].message.tool_calls or []
    assert call.arguments == chat_call.function.arguments  # type: ignore[union-attr]
    assert call.call_id.startswith("call_") and call.status == "completed"
    # the same run of text/complete as the chat completion: the same tokens
    assert done.usage is not None and chat.usage is not None
    assert done.usage.input_tokens == chat.usage.prompt_tokens
    assert done.usage.output_tokens == chat.usage.completion_tokens
    assert done.usage.total_tokens == chat.usage.total_tokens
    assert [t.name for t in done.tools] == ["get_weather"]  # type: ignore[union-attr]
    # the tool's result sent back with the conversation so far (the SDK's own output items)
    history: list[Any] = [{"role": "user", "content": WEATHER}]
    history += [item.model_dump(exclude_none=True) for item in done.output]
    history.append({"type": "function_call_output", "call_id": call.call_id, "output": "sunny"})
    after = api.responses.create(model="qwen-tiny", input=history, tools=tools,  # type: ignore[arg-type]
                                 temperature=0, max_output_tokens=40)  # fmt: skip
    assert after.status in ("completed", "incomplete") and after.output
    assert after.usage is not None and after.usage.input_tokens > done.usage.input_tokens


def test_stream_with_a_tool_call(server: Server, text_models: TextModels) -> None:
    api = client(server)
    tools = tools_of(text_models)
    request: dict[str, Any] = {"model": "qwen-tiny", "input": WEATHER, "tools": tools,
                               "temperature": 0, "max_output_tokens": 80}  # fmt: skip
    whole = api.responses.create(**request)
    with api.responses.stream(**request) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "response.output_item.added" in kinds and "response.output_item.done" in kinds
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Let me check." == final.output_text
    args = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(args) > 1 and json.loads("".join(args)) == {"city": "Paris"}  # in fragments
    (done_args,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done_args.arguments == "".join(args)
    # the streamed response says what the whole one says
    assert said(final.output) == said(whole.output)
    assert final.usage == whole.usage and final.status == "completed"
    assert final.id == events[0].response.id  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_async_instructions_and_reasoning(server: Server) -> None:
    api = aclient(server)
    done = await api.responses.create(
        model="qwen-tiny", instructions="You are terse.", input=HELLO, temperature=0
    )
    chat = await api.chat.completions.create(
        model="qwen-tiny", temperature=0,
        messages=[{"role": "system", "content": "You are terse."},
                  {"role": "user", "content": HELLO}],
    )  # fmt: skip
    assert done.output_text == chat.choices[0].message.content
    assert done.instructions == "You are terse."
    thinking = getattr(chat.choices[0].message, "reasoning_content", None)
    reasoning = [i for i in done.output if i.type == "reasoning"]
    if thinking:  # the node's thinking output, as a reasoning item before the message
        assert said(reasoning) == [("reasoning", thinking)] and done.output[0] is reasoning[0]
    plain = await api.responses.create(model="qwen-tiny", input=HELLO, temperature=0)
    assert plain.output_text == HELLO_TEXT
    deltas: list[str] = []
    thoughts: list[str] = []
    async with api.responses.stream(model="qwen-tiny", input=HELLO, temperature=0) as stream:
        async for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
            elif event.type == "response.reasoning_text.delta":
                thoughts.append(event.delta)
        final = await stream.get_final_response()
    assert "".join(deltas) == HELLO_TEXT == final.output_text
    assert said(final.output) == said(plain.output)
    if any(i.type == "reasoning" for i in plain.output):
        assert thoughts
    await api.close()


def test_length_is_incomplete(server: Server) -> None:
    short = client(server).responses.create(model="qwen-tiny", input=HELLO, temperature=0,
                                            max_output_tokens=3)  # fmt: skip
    assert short.status == "incomplete"
    assert short.incomplete_details is not None
    assert short.incomplete_details.reason == "max_output_tokens"
    assert short.usage is not None and short.usage.output_tokens == 3


def test_what_a_stateless_server_refuses(server: Server) -> None:
    api = client(server)

    def refused(**fields: Any) -> openai.BadRequestError:
        with pytest.raises(openai.BadRequestError) as bad:
            api.responses.create(**{"model": "qwen-tiny", "input": HELLO, **fields})
        assert bad.value.body is not None
        assert set(bad.value.body) == {"message", "type", "param", "code"}  # type: ignore[arg-type]
        return bad.value

    assert refused(previous_response_id="resp_x").param == "previous_response_id"
    assert "keeps no responses" in refused(store=True).message
    assert refused(store=True).param == "store"
    assert refused(conversation="conv_1").param == "conversation"
    assert refused(background=True).param == "background"
    assert refused(tools=[{"type": "web_search"}]).param == "tools[0].type"
    assert refused(extra_body={"frobnicate": 1}).param == "frobnicate"
    assert refused(max_output_tokens=0).param == "max_output_tokens"
    assert refused(tool_choice={"type": "file_search"}).param == "tool_choice"
    images = [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]
    assert refused(input=images).param == "input[0].content[0].type"  # type: ignore[arg-type]
    # store=false is what a stateless server does anyway
    fine = api.responses.create(model="qwen-tiny", input=HELLO, store=False, max_output_tokens=2)
    assert fine.store is False and fine.previous_response_id is None
    with pytest.raises(openai.NotFoundError) as missing:
        api.responses.create(model="nope", input=HELLO)
    assert missing.value.code == "model_not_found"
    assert missing.value.body["param"] == "model"  # type: ignore[index]
    r = httpx.post(server.url + "/openai/v1/responses", content=b"[1]",
                   headers={"Authorization": f"Bearer {TOKEN}",
                            "Content-Type": "application/json"})  # fmt: skip
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


def test_each_response_is_a_durable_run(server: Server) -> None:
    done = client(server).responses.create(model="qwen-tiny", input=HELLO, temperature=0)
    run_id = done.id.removeprefix("resp_")
    with server.client(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        state = http.get(f"/v1/runs/{run_id}").json()
        assert state["status"] == "done" and state["target"] == "complete"
        texts = [t for t in state["takes"] if t["kind"] == "text"]
        bodies = {http.get(f"/v1/takes/{t['id']}/bytes").text for t in texts}
        assert done.output_text in bodies
