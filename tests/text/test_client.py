"""``inline-client`` against a real server: complete, rewrite, generate (Z-Image), runs, typed
events, takes, GraphInvalid, cancel between tokens; and the rewrite bucketing warning."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from inline_client import (
    AsyncClient,
    Cancelled,
    Client,
    Delta,
    GraphInvalid,
    Progress,
    RunDone,
    Snapshot,
)

from tests.api.conftest import Server

from .conftest import TOKEN, TextModels

# the session builds venvs and tiny models first: slow on a loaded machine
pytestmark = pytest.mark.timeout(2400)

WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]
HELLO = [{"role": "user", "content": "Hello there, how are you today?"}]


def complete_graph(model: str, **params: Any) -> dict[str, Any]:
    node = {"id": "c", "type": "text/complete", "params": {"model": model, **params}}
    return {"schemaVersion": 1, "nodes": [node]}


def test_complete_streams_chunks_with_tool_calls(server: Server, text_models: TextModels) -> None:
    with Client(server.url, token=TOKEN) as inline:
        chunks = list(
            inline.complete("qwen-tiny", WEATHER, tools=text_models.report["tools"], temperature=0)
        )
    assert "".join(c.content for c in chunks) == "Let me check."
    assert "".join(c.thinking for c in chunks) == (
        "The user wants the weather. I will call the tool."
    )
    assert all(c.finish_reason is None for c in chunks[:-1])
    last = chunks[-1]
    assert last.finish_reason == "tool_calls" and not last.has_text
    (call,) = last.tool_calls
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    assert any(c.has_text for c in chunks)


@pytest.mark.anyio
async def test_async_complete_plain(server: Server) -> None:
    async with AsyncClient(server.url, token=TOKEN) as inline:
        chunks = [c async for c in inline.complete("qwen-tiny", HELLO, temperature=0)]
    assert "".join(c.content for c in chunks) == "Hello! The sky is blue and the sea is calm."
    assert chunks[-1].finish_reason == "stop" and chunks[-1].tool_calls == []


def test_run_events_deltas_concatenate_to_the_take(server: Server) -> None:
    with Client(server.url, token=TOKEN) as inline:
        # a warm tiny model can finish before the subscription: then its snapshot is of a done
        # run, with no deltas to follow; such a run is submitted again (a new seed, a new cache
        # key), a bounded number of times, until one is caught running
        for _ in range(5):
            seed = random.randrange(1 << 30)  # a new cache key: the run really runs
            graph = complete_graph("qwen-tiny", messages=HELLO, temperature=0, seed=seed)
            run = inline.run(graph, "c")
            events = list(run.events())
            if not (isinstance(events[0], Snapshot) and events[0].state.status == "done"):
                break
        snapshot = events[0]
        assert isinstance(snapshot, Snapshot)
        assert isinstance(events[-1], RunDone)
        # what streamed before this subscription is in the snapshot's partial outputs
        partial = (snapshot.state.nodes.get("c") or {}).get("partial") or {}
        deltas = [e for e in events if isinstance(e, Delta)]
        state = run.wait()
        assert state.status == "done"
        takes = run.takes()
        texts = {inline.take_bytes(t.id).decode() for t in takes if t.kind == "text"}
        content = partial.get("text", "") + "".join(d.text for d in deltas if d.output == "text")
        thinking = partial.get("thinking", "") + "".join(
            d.text for d in deltas if d.output == "thinking"
        )
        assert content == "Hello! The sky is blue and the sea is calm." and content in texts
        assert thinking == "A greeting. Be brief." and thinking in texts
        assert len(deltas) > 5  # token by token
        assert inline.take(takes[0].id) == takes[0]


def test_graph_invalid_carries_every_error(server: Server) -> None:
    graph = {
        "schemaVersion": 1,
        "nodes": [
            {"id": "a", "type": "text/nope", "params": {}},
            {"id": "c", "type": "text/complete", "params": {"temperature": 9}},
        ],
    }
    with Client(server.url, token=TOKEN) as inline, pytest.raises(GraphInvalid) as caught:
        inline.run(graph, "c")
    assert caught.value.status == 422
    assert {e.get("nodeId") for e in caught.value.errors} >= {"a", "c"}


def test_cancel_between_tokens(server: Server) -> None:
    with Client(server.url, token=TOKEN) as inline:
        run = inline.run(
            complete_graph(
                "qwen-random", messages=[{"role": "user", "content": "go"}], max_new_tokens=100000
            ),
            "c",
        )
        for event in run.events():
            if isinstance(event, Progress) and event.phase == "generate":
                run.cancel()
            if isinstance(event, Cancelled):
                break
        state = run.wait(check=False)
        assert state.status == "cancelled"
        # the worker is fine afterwards
        again = list(inline.complete("qwen-tiny", HELLO, temperature=0))
        assert again[-1].finish_reason == "stop"


def test_rewrite_matches_transformers_and_buckets(
    server: Server, text_models: TextModels, worker_log: Path
) -> None:
    text = "a long text about the sea and the sky"
    base = text_models.baseline(folder=str(text_models.root / "llm/t5-tiny"), kind="seq2seq",
                                text="summarize: " + text, max_new_tokens=12)  # fmt: skip
    with Client(server.url, token=TOKEN) as inline:
        out = inline.rewrite("t5-tiny", text, prefix="summarize: ", max_new_tokens=12)
        assert out == base["text"].strip()  # padded to a bucket of 32, the padding masked
        long = " ".join(["the sea and the sky"] * 200)
        inline.rewrite("t5-tiny", long, max_new_tokens=4)
    assert "t5-tiny: The text has" in worker_log.read_text()
    assert "it was cut to its first 512 tokens" in worker_log.read_text()


def test_generate_with_z_image(server: Server, zimage_models: Path) -> None:
    with Client(server.url, token=TOKEN) as inline:
        image = inline.generate(
            "alibaba/z-image-turbo", "a red fox in snow", width=256, height=256, steps=2, seed=7
        )
    assert image.image[:8] == b"\x89PNG\r\n\x1a\n"
    assert (image.width, image.height) == (256, 256)
    assert image.params["seed"] == 7 and image.params["steps"] == 2
    assert image.take.kind == "image"
