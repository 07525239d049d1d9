"""The OpenAI stream's gathering of a run's deltas (``inline_host.api.openai._pieces``): the first
piece goes out at once, what came since the last write is joined per output in order, the end
flushes, and other nodes' deltas and other events are left out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from inline_host.api.openai._pieces import streamed
from inline_host.runs._events import Event, Subscriber

NODE = "complete"


class Service:
    """The two methods ``streamed`` uses, over one real subscriber."""

    def __init__(self) -> None:
        self.sub = Subscriber()
        self.unsubscribed = False

    def subscribe(self, run_id: str) -> tuple[Subscriber, Any]:
        return self.sub, None

    def unsubscribe(self, run_id: str, sub: Subscriber) -> None:
        self.unsubscribed = sub is self.sub

    def delta(self, text: str, output: str = "text", node: str = NODE) -> None:
        self.sub.push(Event({"type": "delta", "runId": "r", "nodeId": node, "output": output,
                             "text": text}))  # fmt: skip

    def event(self, kind: str) -> None:
        self.sub.push(Event({"type": kind, "runId": "r"}))


async def next_write(it: AsyncIterator[list[tuple[str, str]]]) -> list[tuple[str, str]]:
    with anyio.fail_after(10):
        return await it.__anext__()


@pytest.mark.anyio
async def test_first_piece_at_once_then_joined_until_the_end() -> None:
    service = Service()
    it = streamed(service, "r", NODE, interval=3600)  # nothing but the end flushes after the first
    service.delta("A")
    assert await next_write(it) == [("text", "A")]  # the first piece never waits
    service.delta(" greeting", "thinking")
    service.event("progress")
    service.delta(".", "thinking")
    service.delta("Hi", node="other")  # another node's
    service.delta("Hello")
    service.delta("!")
    service.event("run_done")
    assert await next_write(it) == [("thinking", " greeting."), ("text", "Hello!")]
    with pytest.raises(StopAsyncIteration):
        await next_write(it)
    assert service.unsubscribed


@pytest.mark.anyio
async def test_each_piece_goes_alone_when_they_come_slower_than_the_interval() -> None:
    service = Service()
    it = streamed(service, "r", NODE, interval=0)
    for piece in ("a", "b", "c"):
        service.delta(piece)
        assert await next_write(it) == [("text", piece)]
    service.event("cancelled")
    with pytest.raises(StopAsyncIteration):
        await next_write(it)


@pytest.mark.anyio
async def test_a_run_already_over_yields_nothing() -> None:
    class Ended(Service):
        def subscribe(self, run_id: str) -> tuple[None, Any]:
            return None, None

    assert [w async for w in streamed(Ended(), "r", NODE)] == []


@pytest.mark.anyio
async def test_what_streamed_before_it_subscribed_comes_first() -> None:
    """A retry attaching to a run in flight (or a response that started late) misses nothing:
    the node's text so far, from the snapshot, goes out at once, then the deltas."""
    from inline_host.runs._views import NodeState, RunState

    class Midway(Service):
        def subscribe(self, run_id: str) -> tuple[Subscriber, Any]:
            partial = {"thinking": "Hm", "text": "He"}
            node = NodeState(state="running", fraction=0.5, partial=partial)
            return self.sub, RunState(run_id="r", status="running", target=NODE, fraction=0.5,
                                      nodes={NODE: node}, takes=[], error=None)  # fmt: skip

    service = Midway()
    it = streamed(service, "r", NODE, interval=0)
    assert await next_write(it) == [("thinking", "Hm"), ("text", "He")]
    service.delta("llo")
    assert await next_write(it) == [("text", "llo")]
    service.event("run_done")
    with pytest.raises(StopAsyncIteration):
        await next_write(it)
