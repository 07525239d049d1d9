"""The hosted nodes through a real server: the picture becomes a take, a missing secret is
named, and a secret's value never reaches a log, the run state, a take, an error or /v1/health."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..api._helpers import body, node, run_to_end
from ..api.conftest import Server, start_server
from ..e2e.conftest import inline_exe
from ._fakes import ANTHROPIC_TEXT, ANTHROPIC_THINKING, GEMINI_TEXT, FakeUpstream
from .conftest import PNG

ANTHROPIC_KEY = "sk-ant-never-shown-4b1d"
GEMINI_KEY = "AIza-never-shown-77c3"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream(PNG) as upstream:
        yield upstream


def set_secret(data_dir: Path, name: str, value: str) -> None:
    proc = subprocess.run([inline_exe(), "secrets", "set", name], input=value + "\n", text=True,
                          capture_output=True, env={**os.environ, "INLINE_DATA_DIR": str(data_dir)},
                          timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert value not in proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def server(
    hosted_data: Path,
    builtin_dir: Path,
    fake: FakeUpstream,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    set_secret(hosted_data, "ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    set_secret(hosted_data, "GEMINI_API_KEY", GEMINI_KEY)
    inputs = tmp_path_factory.mktemp("hosted-inputs")
    srv = start_server(hosted_data, inputs, {
        "INLINE_BUILTIN_PACKS": str(builtin_dir), "INLINE_ANTHROPIC_BASE_URL": fake.url,
        "INLINE_GEMINI_BASE_URL": fake.url, "INLINE_WORKER_ECHO": "1",
    })  # fmt: skip
    yield srv
    srv.stop()


def test_secrets_cli_lists_names_and_writes_0600(hosted_data: Path, server: Server):
    env = {**os.environ, "INLINE_DATA_DIR": str(hosted_data)}
    listed = subprocess.run([inline_exe(), "secrets", "list"], env=env, capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    assert [line.split()[0] for line in listed.stdout.splitlines()] == [
        "ANTHROPIC_API_KEY", "GEMINI_API_KEY"
    ]  # fmt: skip
    assert "ANTHROPIC_API_KEY  for anthropic, granted to hosted" in listed.stdout
    assert (hosted_data / "secrets.json").stat().st_mode & 0o777 == 0o600
    set_secret(hosted_data, "SCRATCH", "x")
    removed = subprocess.run([inline_exe(), "secrets", "remove", "SCRATCH"], env=env,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert removed.returncode == 0
    again = subprocess.run([inline_exe(), "secrets", "remove", "SCRATCH"], env=env,
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert again.returncode == 1 and "no secret named 'SCRATCH'" in again.stderr
    bad = subprocess.run([inline_exe(), "secrets", "set", "bad name"], env=env, input="v",
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert bad.returncode == 1 and "is not a secret name" in bad.stderr


def test_hosted_models_answer_openai_clients_and_the_typed_client(
    server: Server, fake: FakeUpstream
):
    """``/openai/v1`` lists the hosted models whose key is stored and runs them on the hosted
    nodes: streamed text, thinking and tool calls in OpenAI's shape, from the real upstream
    wire formats (the fakes), through the official OpenAI SDK and our own client."""
    import json

    import openai
    from inline_client import Client

    api = openai.OpenAI(base_url=server.url + "/openai/v1", api_key="unused", max_retries=0)
    listed = {m.id: m.owned_by for m in api.models.list()}
    assert listed["anthropic/claude-sonnet-4-5"] == "anthropic"
    assert listed["google/gemini-2.5-flash"] == "google"
    weather = [{"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]  # fmt: skip
    ask = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"}]

    done = api.chat.completions.create(model="anthropic/claude-sonnet-4-5", messages=ask,
                                       tools=weather, max_tokens=64)  # fmt: skip
    (choice,) = done.choices
    assert choice.message.content == "".join(ANTHROPIC_TEXT)
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris", "unit": "C"}
    assert done.model == "anthropic/claude-sonnet-4-5"
    sent = fake.requests[-1]
    assert sent["path"].startswith("/v1/messages")
    assert sent["body"]["model"] == "claude-sonnet-4-5" and sent["body"]["max_tokens"] == 64
    assert sent["body"]["system"] == "Be brief."
    assert sent["body"]["tools"][0]["name"] == "get_weather"

    stream = api.chat.completions.create(model="google/gemini-2.5-flash", messages=ask,
                                         tools=weather, stream=True)  # fmt: skip
    pieces, calls, finish = [], [], None
    for chunk in stream:
        for c in chunk.choices:
            if c.delta.content:
                pieces.append(c.delta.content)
            calls += c.delta.tool_calls or []
            finish = c.finish_reason or finish
    # what the upstream sent, in order (pieces arriving within 20 ms of a write share a chunk)
    assert "".join(pieces) == "".join(GEMINI_TEXT)
    assert [c.function.name for c in calls if c.function and c.function.name] == ["get_weather"]
    assert finish == "tool_calls"
    assert fake.requests[-1]["path"].endswith(
        "/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    )

    with Client(server.url) as inline:
        chunks = list(inline.complete("anthropic/claude-haiku-4-5", ask, max_new_tokens=32))
    assert "".join(c.content for c in chunks) == "".join(ANTHROPIC_TEXT)
    assert "".join(c.thinking for c in chunks) == "".join(ANTHROPIC_THINKING)
    assert chunks[-1].finish_reason == "tool_calls"
    assert [t.name for c in chunks for t in c.tool_calls] == ["get_weather"]
    assert fake.requests[-1]["body"]["model"] == "claude-haiku-4-5"

    with pytest.raises(openai.NotFoundError) as unknown:  # a provider we do not run
        api.chat.completions.create(model="mistral/large", messages=ask)
    assert unknown.value.code == "model_not_found"


def test_response_format_goes_to_the_providers_in_their_own_shape(
    server: Server, fake: FakeUpstream
):
    """Structured output is the provider's own for hosted models: Gemini's JSON mode with the
    schema, Claude's ``output_config.format``; what a provider cannot take is a 400 naming the
    field, never a silent ignore."""
    import openai

    api = openai.OpenAI(base_url=server.url + "/openai/v1", api_key="unused", max_retries=0)
    schema = {"type": "object", "properties": {"city": {"type": "string"},
              "unit": {"enum": ["C", "F"]}}, "required": ["city", "unit"],
              "additionalProperties": False}  # fmt: skip
    strict = {"type": "json_schema", "json_schema": {"name": "w", "schema": schema, "strict": True}}
    ask = [{"role": "user", "content": "Weather in Paris, as JSON?"}]

    api.chat.completions.create(model="google/gemini-2.5-flash", messages=ask,
                                response_format=strict)  # type: ignore[arg-type]  # fmt: skip
    config = fake.requests[-1]["body"]["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"] == schema
    api.chat.completions.create(model="google/gemini-2.5-flash", messages=ask, max_tokens=33,
                                response_format={"type": "json_object"})  # fmt: skip
    config = fake.requests[-1]["body"]["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert "responseJsonSchema" not in config

    api.chat.completions.create(model="anthropic/claude-sonnet-4-5", messages=ask,
                                response_format=strict)  # type: ignore[arg-type]  # fmt: skip
    sent = fake.requests[-1]["body"]
    assert sent["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
    before = len(fake.requests)
    with pytest.raises(openai.BadRequestError) as loose:
        api.chat.completions.create(model="anthropic/claude-sonnet-4-5", messages=ask,
                                    response_format={"type": "json_object"})  # fmt: skip
    assert "response_format" in loose.value.message and "json_schema" in loose.value.message
    assert len(fake.requests) == before  # refused before anything went upstream
    # a field the provider's node does not take: OpenAI's 400 naming it, at submit
    for field, value in (("logprobs", True), ("presence_penalty", 0.5)):
        with pytest.raises(openai.BadRequestError) as lacking:
            api.chat.completions.create(model="google/gemini-2.5-flash", messages=ask,
                                        **{field: value})  # type: ignore[call-overload]  # fmt: skip
        assert lacking.value.param == field
        assert f"'{field}' is not supported by this model" in lacking.value.message
    assert len(fake.requests) == before


def test_hosted_runs_take_their_secret_and_never_show_it(
    server: Server, fake: FakeUpstream, hosted_data: Path
):
    seen: list[str] = []
    with server.client() as c:
        ask = {"model": "claude-test", "messages": [{"role": "user", "content": "Weather?"}]}
        text = run_to_end(c, server.ws, body("c", node("c", "anthropic/complete", ask)))
        assert text["error"] is None, text
        sent = fake.requests[-1]
        auth = {k.lower(): v for k, v in sent["headers"].items()}
        assert ANTHROPIC_KEY in (auth.get("x-api-key"), auth.get("authorization", "")[7:])
        seen.append(str(text))

        picture = node("g", "google/gemini-image", {"size": "2K", "seed": 9}, prompt=("p", "text"))
        prompt = node("p", "input/text", {"text": "a red bicycle"})
        image = run_to_end(c, server.ws, body("g", prompt, picture))
        assert image["error"] is None, image
        (take,) = image["takes"]
        assert take["kind"] == "image" and take["nodeId"] == "g"
        data = c.get(f"/v1/takes/{take['id']}/bytes").content
        # the upstream's picture, with the host's iTXt chunk (node, params, graph) added
        assert data[:33] == PNG[:33] and PNG[33:] in data
        assert take["params"]["seed"] == 9 and take["params"]["size"] == "2K"
        seen.append(str(image))
        seen.append(c.get(f"/v1/takes/{take['id']}").text)
        seen.append(data.decode("latin-1"))

        unset = {"api_key_secret": "NOT_STORED", "messages": [{"role": "user", "content": "hi"}]}
        token = (server.data_dir / "operator-token").read_text().strip()
        operator = server.client(headers={"Authorization": f"Bearer {token}"})
        with operator:  # naming another secret than the node's own is the operator's to do
            missing = run_to_end(
                operator, server.ws, body("m", node("m", "anthropic/complete", unset))
            )
        assert missing["error"]["nodeId"] == "m"
        assert "The secret 'NOT_STORED' is not set" in missing["error"]["message"]
        assert "inline secrets set NOT_STORED" in missing["error"]["message"]

        # an upstream that quotes the key in its error: the message names provider and status,
        # and the key is masked before it leaves the worker
        fake.echo_key = True
        fake.fail = [401]
        try:
            other = {"model": "claude-other", "messages": [{"role": "user", "content": "x"}]}
            failed = run_to_end(c, server.ws, body("f", node("f", "anthropic/complete", other)))
        finally:
            fake.echo_key = False
        message = failed["error"]["message"]
        assert "Anthropic API error (401): fake upstream says 401 (key ***)" in message
        seen.append(str(failed))

        health = c.get("/v1/health")
        assert health.status_code == 200
        seen.append(health.text)
        seen.append(c.get("/v1/takes").text)
    server.stop()
    logs = [server.log, *sorted((hosted_data / "logs").glob("*.log"))]
    seen += [p.read_text(errors="replace") for p in logs if p.is_file()]
    for blob in seen:
        assert ANTHROPIC_KEY not in blob and GEMINI_KEY not in blob
    for db in hosted_data.glob("inline.db*"):
        data = db.read_bytes()
        assert ANTHROPIC_KEY.encode() not in data and GEMINI_KEY.encode() not in data


def test_worker_env_is_an_allow_list(monkeypatch: pytest.MonkeyPatch):
    from inline_registry import worker_env

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "from-env")
    monkeypatch.setenv("INLINE_TOKEN", "host-token")
    monkeypatch.setenv("INLINE_ANTHROPIC_BASE_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("INLINE_GEMINI_BASE_URL", "http://127.0.0.1:2")
    env = worker_env()
    assert "AWS_SECRET_ACCESS_KEY" not in env and "ANTHROPIC_API_KEY" not in env
    assert "INLINE_TOKEN" not in env
    assert env["INLINE_ANTHROPIC_BASE_URL"] == "http://127.0.0.1:1"
    assert env["INLINE_GEMINI_BASE_URL"] == "http://127.0.0.1:2"
    assert env["PATH"] == os.environ["PATH"] and env["HF_HUB_OFFLINE"] == "1"
