"""A run's streamed text, gathered for server-sent events: the first piece at once, then at
most one write per ``STREAM_INTERVAL``.

A model on a small machine yields tokens every few milliseconds; sending each as its own chunk
costs the server a write and the client a wakeup per token, both taken from the cores the
model decodes on. So after a write, what streams within the interval is joined (per output, in
order) and goes out in one write when the interval ends, or at once when the run ends. The first
piece of a reply never waits, and a slow model, whose tokens come further apart than the
interval, still streams token by token. The run's own ``delta`` events (``/v1``) are untouched,
and read as they were published (typed): no piece of text is decoded from the websocket's JSON.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import Final, Protocol

import anyio

from ...runs import DeltaEvent, Event, RunState, Subscriber

#: After a write, streamed text is gathered for at most this long (seconds) before the next.
STREAM_INTERVAL: Final = 0.02


class Subscriptions(Protocol):
    """What ``streamed`` needs of the run service: a run's subscription and its snapshot."""

    def subscribe(self, run_id: str) -> tuple[Subscriber | None, RunState | None] | None: ...

    def unsubscribe(self, run_id: str, sub: Subscriber) -> None: ...


def _add(pending: list[list[str]], port: str, text: str) -> None:
    """Append ``text`` of ``port``: joined to the last piece when that is the same output."""
    if pending and pending[-1][0] == port:
        pending[-1][1] += text
    else:
        pending.append([port, text])


async def streamed(
    service: Subscriptions, run_id: str, node_id: str, interval: float = STREAM_INTERVAL
) -> AsyncIterator[list[tuple[str, str]]]:
    """Until the run ends, lists of ``(output, text)`` to write at once: what ``node_id`` had
    streamed when this subscribed (a retry attaching to a run in flight, or pieces that came
    before the response started), then its ``delta`` events, gathered as above (nothing when
    the run had already ended)."""
    subscribed = service.subscribe(run_id)
    if subscribed is None:
        return
    sub, snapshot = subscribed
    if sub is None:  # the run is over
        return
    node = snapshot.nodes.get(node_id) if snapshot is not None else None
    so_far = [(port, text) for port, text in ((node and node.partial) or {}).items() if text]
    pending: list[list[str]] = []
    sent_at = -math.inf
    ended = False
    try:
        if so_far:  # at once, as a first piece is
            yield so_far
            sent_at = anyio.current_time()
        while not ended:
            batch: list[Event] = []
            if pending:  # something waits for the interval's end: wait no longer than that
                with anyio.move_on_after(sent_at + interval - anyio.current_time()):
                    batch = await sub.next_batch()
            else:
                batch = await sub.next_batch()
            for queued in batch:
                ended = ended or queued.terminal
                delta = queued.event
                if isinstance(delta, DeltaEvent) and delta.node_id == node_id and delta.text:
                    _add(pending, delta.output, delta.text)
            now = anyio.current_time()
            if pending and (ended or now - sent_at >= interval):
                yield [(port, text) for port, text in pending]
                pending, sent_at = [], now
    finally:
        service.unsubscribe(run_id, sub)


async def merged(
    service: Subscriptions, run_ids: list[str], node_id: str, interval: float = STREAM_INTERVAL
) -> AsyncIterator[tuple[int, list[tuple[str, str]]]]:
    """``streamed`` of several runs (the choices of one request) as they come: ``(i, pieces)``
    with ``i`` the index of the run in ``run_ids``, then ``(i, [])`` once run ``i`` ended."""
    if len(run_ids) == 1:  # the common case: no task group, no channel
        async for pieces in streamed(service, run_ids[0], node_id, interval):
            yield 0, pieces
        yield 0, []
        return
    send, receive = anyio.create_memory_object_stream[tuple[int, list[tuple[str, str]]]](
        len(run_ids)
    )

    async def follow(i: int, run_id: str) -> None:
        async for pieces in streamed(service, run_id, node_id, interval):
            await send.send((i, pieces))
        await send.send((i, []))

    async with anyio.create_task_group() as tg, receive:
        async with send:
            for i, run_id in enumerate(run_ids):
                tg.start_soon(follow, i, run_id, name=f"stream {run_id}")
            ended = 0
            while ended < len(run_ids):
                i, pieces = await receive.receive()
                ended += not pieces
                yield i, pieces
        tg.cancel_scope.cancel()
