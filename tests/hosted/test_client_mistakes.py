"""Client mistakes are 4xx on ``/openai``, never 5xx, and retries never multiply runs.

A real server, driven by the official ``openai`` client with its default retries (two): a run
that fails for missing weights answers 404 ``model_not_found`` naming the files and the fetch
command, a hosted model whose key is not stored 400 ``secret_missing`` naming the secret, an
unknown model 404 before any run; a node's bug stays a 500 and its retries attach to the first
try's run; a repeated ``Idempotency-Key`` answers the first try's images. Runs are counted in the
server's store.
"""

from __future__ import annotations

import base64
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from inline_host.api.openai._attempts import Attempt, Attempts

from ..api.conftest import Server, start_server
from ._fakes import FakeUpstream
from .conftest import PNG

ROOT = Path(__file__).resolve().parents[2]
WEIGHTLESS = ROOT / "tests" / "packs" / "weightless"
ASK = [{"role": "user", "content": "Weather?"}]


@pytest.fixture(scope="module")
def server(
    hosted_data: Path,
    builtin_dir: Path,
    upstream: FakeUpstream,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    """No weights, no secrets stored: a data dir of its own, over the hosted pack's venvs."""
    data = tmp_path_factory.mktemp("mistakes-data")
    (data / "packs").symlink_to(hosted_data / "packs", target_is_directory=True)
    srv = start_server(data, tmp_path_factory.mktemp("mistakes-inputs"), {
        "INLINE_BUILTIN_PACKS": str(builtin_dir), "INLINE_PACK_PATHS": str(WEIGHTLESS),
        "INLINE_ANTHROPIC_BASE_URL": upstream.url, "INLINE_GEMINI_BASE_URL": upstream.url,
    })  # fmt: skip
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream(PNG) as fake:
        yield fake


@pytest.fixture
def api(server: Server) -> openai.OpenAI:
    """The official client, retrying as it does by default."""
    return openai.OpenAI(base_url=f"{server.url}/openai/v1", api_key="unused")


def runs(server: Server) -> int:
    """How many runs the server's store holds."""
    with sqlite3.connect(server.data_dir / "inline.db") as db:
        return int(db.execute("SELECT count(*) FROM runs").fetchone()[0])


def test_missing_weights_are_a_404_naming_the_files_and_make_one_run(
    api: openai.OpenAI, server: Server
):
    before = runs(server)
    with pytest.raises(openai.NotFoundError) as err:
        api.images.generate(model="weightless/picture", prompt="a red fox")
    assert err.value.status_code == 404
    assert err.value.code == "model_not_found" and err.value.param == "model"
    assert "diffusion_models/weightless.safetensors" in err.value.message
    assert "inline models pull weightless/picture" in err.value.message
    assert set(err.value.body) == {"message", "type", "param", "code"}  # type: ignore[arg-type]
    assert runs(server) == before + 1


def test_a_hosted_model_without_its_key_is_a_400_naming_the_secret(
    api: openai.OpenAI, server: Server, upstream: FakeUpstream
):
    before = runs(server)
    with pytest.raises(openai.BadRequestError) as chat:
        api.chat.completions.create(model="anthropic/claude-sonnet-4-5", messages=ASK)  # type: ignore[arg-type]
    assert chat.value.code == "secret_missing" and chat.value.param == "model"
    assert "inline secrets set ANTHROPIC_API_KEY" in chat.value.message
    assert runs(server) == before + 1
    with pytest.raises(openai.BadRequestError) as image:
        api.images.generate(model="google/gemini-image", prompt="a red bicycle")
    assert image.value.code == "secret_missing"
    assert "inline secrets set GEMINI_API_KEY" in image.value.message
    assert runs(server) == before + 2
    assert upstream.requests == []  # nothing left for the provider without a key


def test_unknown_models_are_404_model_not_found_before_any_run(api: openai.OpenAI, server: Server):
    before = runs(server)
    with pytest.raises(openai.NotFoundError) as chat:
        api.chat.completions.create(model="nobody/nothing", messages=ASK)  # type: ignore[arg-type]
    assert chat.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError) as image:
        api.images.generate(model="no-such-model", prompt="a red fox")
    assert image.value.code == "model_not_found" and "weightless/noise" in image.value.message
    assert runs(server) == before


def test_a_node_bug_stays_a_500_and_its_retries_attach_to_the_first_run(
    api: openai.OpenAI, server: Server
):
    before = runs(server)
    with pytest.raises(openai.InternalServerError) as err:
        api.images.generate(model="weightless/buggy", prompt="a red fox")
    assert err.value.code == "run_failed" and "a bug in the node" in err.value.message
    assert runs(server) == before + 1
    assert err.value.response.headers["x-should-retry"] == "false"  # a retry gets the same run
    # what the SDK sends when it retries anyway (a dropped connection): the same body, counted
    ask = {"model": "weightless/buggy", "prompt": "a dog"}
    with httpx.Client(base_url=f"{server.url}/openai/v1", timeout=60) as http:
        first = http.post("/images/generations", json=ask)
        retry = http.post("/images/generations", json=ask, headers={"x-stainless-retry-count": "1"})
        assert first.status_code == retry.status_code == 500
        assert retry.json() == first.json()  # the same run's error
        assert runs(server) == before + 2
        again = http.post("/images/generations", json=ask)  # a new request: a new run
        assert again.status_code == 500 and runs(server) == before + 3


def test_an_idempotency_key_answers_the_first_tries_images(api: openai.OpenAI, server: Server):
    def images(key: str | None, prompt: str = "noise") -> list[bytes]:
        headers = {"Idempotency-Key": key} if key else {}
        got = api.images.generate(model="weightless/noise", prompt=prompt, n=2,
                                  response_format="b64_json", extra_headers=headers)  # fmt: skip
        return [base64.b64decode(d.b64_json or "") for d in got.data or []]

    before = runs(server)
    first = images("key-1")
    assert len(first) == 2 and first[0] != first[1]  # two random seeds
    assert images("key-1") == first  # the first try's images, no new run
    assert runs(server) == before + 2
    assert images("key-1", prompt="other") != first  # the key covers one body only
    assert runs(server) == before + 4
    assert images(None) != first and images("key-2") != first  # another request: new runs
    assert runs(server) == before + 8


def test_a_keyless_retry_of_a_success_gets_its_result(server: Server):
    ask = {"model": "weightless/noise", "prompt": "once", "response_format": "b64_json"}
    with httpx.Client(base_url=f"{server.url}/openai/v1", timeout=60) as http:
        before = runs(server)
        first = http.post("/images/generations", json=ask)
        retry = http.post("/images/generations", json=ask, headers={"x-stainless-retry-count": "2"})
        assert first.status_code == retry.status_code == 200
        assert retry.json()["data"] == first.json()["data"]
        assert runs(server) == before + 1


def test_first_tries_are_kept_for_a_window_and_a_count():
    now = [0.0]
    attempts = Attempts(keep=2, window=10.0, clock=lambda: now[0])
    first, retry = Attempt("r", "body-a", None, False), Attempt("r", "body-a", None, True)
    attempts.remember(first, ["run_a"])
    assert attempts.find(first) is None  # a first try attaches to nothing
    assert attempts.find(retry) == ["run_a"]
    assert attempts.find(Attempt("other", "body-a", None, True)) is None  # per route
    keyed = Attempt("r", "body-a", "k", True)
    assert attempts.find(keyed) is None  # a key goes by clientRunId
    assert keyed.client_run_id(1) == Attempt("r", "body-a", "k", False).client_run_id(1)
    assert keyed.client_run_id(0) != keyed.client_run_id(1) and first.client_run_id(0) is None
    attempts.remember(Attempt("r", "body-b", None, False), ["run_b"])
    attempts.remember(Attempt("r", "body-c", None, False), ["run_c"])
    assert attempts.find(retry) is None  # the oldest of three went
    now[0] = 10.5
    assert attempts.find(Attempt("r", "body-c", None, True)) is None  # past the window
