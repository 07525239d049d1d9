"""``/anthropic/v1`` on the hosted models through a real server, driven by the official
``anthropic`` package: the hosted nodes call the fake upstreams (Anthropic's and Gemini's real
wire formats), and the reply comes back in Anthropic's shape, streamed or not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest

from ..api.conftest import Server, start_server
from ._fakes import ANTHROPIC_TEXT, ANTHROPIC_THINKING, GEMINI_TEXT, FakeUpstream
from .conftest import PNG
from .test_api import ANTHROPIC_KEY, GEMINI_KEY, set_secret

WEATHER = [{"role": "user", "content": "Weather in Paris?"}]
TOOLS = [
    {
        "name": "get_weather",
        "description": "The weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]
CLAUDE = "anthropic/claude-sonnet-4-5"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream(PNG) as upstream:
        yield upstream


@pytest.fixture(scope="module")
def server(
    hosted_data: Path,
    builtin_dir: Path,
    fake: FakeUpstream,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    set_secret(hosted_data, "ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    set_secret(hosted_data, "GEMINI_API_KEY", GEMINI_KEY)
    inputs = tmp_path_factory.mktemp("hosted-anthropic-inputs")
    env = {
        "INLINE_BUILTIN_PACKS": str(builtin_dir),
        "INLINE_ANTHROPIC_BASE_URL": fake.url,
        "INLINE_GEMINI_BASE_URL": fake.url,
    }
    srv = start_server(hosted_data, inputs, env)
    yield srv
    srv.stop()


def client(server: Server) -> anthropic.Anthropic:
    # no token on loopback: any key will do
    return anthropic.Anthropic(base_url=server.url + "/anthropic", api_key="unused", max_retries=0)


def test_claude_through_the_hosted_node(server: Server, fake: FakeUpstream) -> None:
    api = client(server)
    done = api.messages.create(
        model=CLAUDE,
        max_tokens=2048,
        system="Be brief.",
        messages=WEATHER,
        tools=TOOLS,
        thinking={"type": "enabled", "budget_tokens": 1024},
        stop_sequences=["###"],
    )
    thinking, text, use = done.content
    assert thinking.type == "thinking" and thinking.thinking == "".join(ANTHROPIC_THINKING)
    assert text.type == "text" and text.text == "".join(ANTHROPIC_TEXT)
    assert use.type == "tool_use" and use.id == "toolu_01" and use.name == "get_weather"
    assert use.input == {"city": "Paris", "unit": "C"}
    assert done.stop_reason == "tool_use" and done.model == CLAUDE
    assert (done.usage.input_tokens, done.usage.output_tokens) == (12, 30)
    sent = fake.requests[-1]["body"]
    assert sent["model"] == "claude-sonnet-4-5" and sent["max_tokens"] == 2048
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 1024}  # thinking_budget
    assert sent["system"] == "Be brief." and sent["stop_sequences"] == ["###"]
    assert sent["tools"] == [{**TOOLS[0]}]

    with api.messages.stream(model=CLAUDE, max_tokens=64, messages=WEATHER, tools=TOOLS) as s:
        streamed = "".join(s.text_stream)
        final = s.get_final_message()
    assert streamed == "".join(ANTHROPIC_TEXT)
    # thinking not asked for: no thinking block (and none sent for upstream)
    assert [b.type for b in final.content] == ["text", "tool_use"]
    assert "thinking" not in fake.requests[-1]["body"]
    assert final.content[1].input == {"city": "Paris", "unit": "C"}  # type: ignore[union-attr]
    assert final.usage.output_tokens == 30 and final.stop_reason == "tool_use"


def test_gemini_and_what_hosted_models_cannot_do(server: Server, fake: FakeUpstream) -> None:
    api = client(server)
    done = api.messages.create(model="google/gemini-2.5-flash", max_tokens=64, messages=WEATHER)
    assert [b.text for b in done.content if b.type == "text"] == ["".join(GEMINI_TEXT)]
    with pytest.raises(anthropic.BadRequestError) as count:
        api.messages.count_tokens(model=CLAUDE, messages=WEATHER)
    assert "count_tokens is not supported for the model" in count.value.message
    with pytest.raises(anthropic.NotFoundError):
        api.messages.create(model="mistral/large", max_tokens=8, messages=WEATHER)


def test_an_upstream_failure_mid_stream_is_an_error_event(
    server: Server, fake: FakeUpstream
) -> None:
    api = client(server)
    fake.fail = [401]  # never retried: the run fails after the stream began
    stream = api.messages.stream(model=CLAUDE, max_tokens=16, messages=WEATHER)
    with pytest.raises(anthropic.APIStatusError) as failed, stream as events:
        list(events)
    body = failed.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "api_error"
    assert "Anthropic API error (401)" in body["error"]["message"]
    assert ANTHROPIC_KEY not in str(body)
