"""The hosted nodes in their own venv, driven through the providers' real SDKs against local
fakes that speak the real wire formats: streamed text, tool calls, retries, errors, secrets."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from ._fakes import (
    ANTHROPIC_TEXT,
    ANTHROPIC_THINKING,
    GEMINI_TEXT,
    GEMINI_THOUGHT,
    FakeUpstream,
)
from .conftest import PNG

HERE = Path(__file__).resolve().parent
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def drive(
    python: Path,
    upstream: FakeUpstream,
    node_type: str,
    params: dict[str, Any],
    secrets: dict[str, str],
    prompt: str = "",
) -> dict[str, Any]:
    env = {
        **os.environ,
        "INLINE_ANTHROPIC_BASE_URL": upstream.url,
        "INLINE_GEMINI_BASE_URL": upstream.url,
        "INLINE_CALL_TIMEOUT": "60",
    }
    proc = subprocess.run(
        [str(python), str(HERE / "_drive.py"), node_type, json.dumps(params),
         json.dumps(secrets), prompt],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_anthropic_streams_text_and_thinking_and_reports_tool_calls(
    hosted_python: Path, upstream: FakeUpstream
):
    upstream.fail = [529, 429]  # overloaded, then rate limited: retried with backoff
    out = drive(hosted_python, upstream, "anthropic/complete",
                {"model": "claude-test", "tools": TOOLS, "system": "Be brief."},
                {"ANTHROPIC_API_KEY": "sk-ant-test-1"}, "Weather in Paris?")  # fmt: skip
    assert "error" not in out, out
    streams = out["streams"]
    assert [t for p, t in streams if p == "text"] == ANTHROPIC_TEXT
    assert [t for p, t in streams if p == "thinking"] == ANTHROPIC_THINKING
    o = out["outputs"]
    assert o["text"] == "".join(ANTHROPIC_TEXT)
    assert o["thinking"] == "".join(ANTHROPIC_THINKING)
    calls = json.loads(o["tool_calls"])
    assert calls == [
        {"id": "toolu_01", "name": "get_weather",
         "arguments": json.dumps({"city": "Paris", "unit": "C"})}
    ]  # fmt: skip
    assert o["finish_reason"] == "tool_calls"
    assert len(upstream.requests) == 3  # two refusals, then the answer
    last = upstream.requests[-1]
    headers = {k.lower(): v for k, v in last["headers"].items()}
    # the SDK sends the key as x-api-key (1.x) or a bearer token (2.x)
    assert "sk-ant-test-1" in (headers.get("x-api-key", ""), headers.get("authorization", "")[7:])
    assert last["body"]["model"] == "claude-test"
    assert last["body"]["system"] == "Be brief."
    assert last["body"]["messages"][-1] == {"role": "user", "content": "Weather in Paris?"}
    assert last["body"]["tools"][0]["name"] == "get_weather"
    assert last["body"]["tools"][0]["input_schema"]["properties"] == {"city": {"type": "string"}}


def test_anthropic_tool_results_go_back_as_blocks(hosted_python: Path, upstream: FakeUpstream):
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "toolu_01", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "toolu_01", "content": "sunny"},
    ]  # fmt: skip
    out = drive(hosted_python, upstream, "anthropic/complete", {"messages": messages},
                {"ANTHROPIC_API_KEY": "k"})  # fmt: skip
    assert "error" not in out, out
    sent = upstream.requests[-1]["body"]["messages"]
    assert sent[1]["content"][0] == {
        "type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}
    }  # fmt: skip
    assert sent[2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": "sunny"}]}  # fmt: skip


def test_gemini_streams_and_reports_function_calls(hosted_python: Path, upstream: FakeUpstream):
    upstream.fail = [503]
    out = drive(hosted_python, upstream, "google/gemini-complete",
                {"model": "gemini-test", "tools": TOOLS, "seed": 11},
                {"GEMINI_API_KEY": "g-key-1"}, "Weather in Paris?")  # fmt: skip
    assert "error" not in out, out
    streams = out["streams"]
    assert [t for p, t in streams if p == "text"] == GEMINI_TEXT
    assert [t for p, t in streams if p == "thinking"] == GEMINI_THOUGHT
    o = out["outputs"]
    assert o["text"] == "".join(GEMINI_TEXT)
    assert json.loads(o["tool_calls"]) == [
        {"id": "fc_7", "name": "get_weather", "arguments": json.dumps({"city": "Paris"})}
    ]
    assert o["finish_reason"] == "tool_calls"
    last = upstream.requests[-1]
    assert "gemini-test:streamGenerateContent" in last["path"] and "alt=sse" in last["path"]
    headers = {k.lower(): v for k, v in last["headers"].items()}
    assert headers["x-goog-api-key"] == "g-key-1"
    body = last["body"]
    assert body["generationConfig"]["seed"] == 11
    decl = body["tools"][0]["functionDeclarations"][0]
    assert decl["name"] == "get_weather"
    assert body["contents"][-1] == {"role": "user", "parts": [{"text": "Weather in Paris?"}]}


def test_gemini_image_returns_the_inline_picture(hosted_python: Path, upstream: FakeUpstream):
    out = drive(hosted_python, upstream, "google/gemini-image", {"size": "2K", "seed": 5},
                {"GEMINI_API_KEY": "g"}, "a red bicycle")  # fmt: skip
    assert "error" not in out, out
    image = out["outputs"]["image"]
    assert bytes.fromhex(image["hex"]) == PNG and image["ext"] == "png"
    assert image["params"] == {"model": "gemini-3-pro-image-preview", "size": "2K", "seed": 5,
                               "prompt": "a red bicycle"}  # fmt: skip
    body = upstream.requests[-1]["body"]
    assert upstream.requests[-1]["path"].split("?")[0].endswith(":generateContent")
    config = body["generationConfig"]
    assert config["imageConfig"] == {"aspectRatio": "1:1", "imageSize": "2K"}
    assert config["seed"] == 5 and config["responseModalities"] == ["IMAGE"]


def test_errors_name_the_provider_status_and_message(hosted_python: Path, upstream: FakeUpstream):
    upstream.fail = [401]
    out = drive(hosted_python, upstream, "anthropic/complete", {},
                {"ANTHROPIC_API_KEY": "k"}, "hi")  # fmt: skip
    assert out["error"]["type"] == "UpstreamError"
    assert out["error"]["message"] == "Anthropic API error (401): fake upstream says 401"
    assert len(upstream.requests) == 1  # 401 is not retried
    upstream.fail = [400]
    out = drive(hosted_python, upstream, "google/gemini-complete", {}, {"GEMINI_API_KEY": "k"},
                "hi")  # fmt: skip
    assert out["error"]["message"].startswith("Gemini API error (400): ")
    assert "fake upstream says 400" in out["error"]["message"]


def test_a_missing_secret_is_named(hosted_python: Path, upstream: FakeUpstream):
    out = drive(hosted_python, upstream, "anthropic/complete", {"api_key_secret": "MY_CLAUDE"},
                {}, "hi")  # fmt: skip
    assert out["error"]["type"] == "SecretMissing"
    assert "'MY_CLAUDE' is not set" in out["error"]["message"]
    assert "inline secrets set MY_CLAUDE" in out["error"]["message"]
    out = drive(hosted_python, upstream, "google/gemini-image", {}, {}, "cat")
    assert "'GEMINI_API_KEY' is not set" in out["error"]["message"]
    assert upstream.requests == []
