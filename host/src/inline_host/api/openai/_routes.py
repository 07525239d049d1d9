"""``/openai/v1``: OpenAI's chat completions and models over runs of the packs' chat nodes.

Each chat completion is a durable run (a one-node graph with the chat node that runs its model:
a local ``llm`` folder's, or a hosted model's, found by what the descriptors declare), visible in
``/v1/runs`` with its takes. A streamed completion follows the run's events: each ``delta`` of
the node's ``text`` (and ``thinking``) output becomes a content (reasoning) chunk (what streams
within a few milliseconds of the last write is joined: ``_pieces``); the tool calls and the
finish reason follow once the node is done, then ``data: [DONE]``. A completion whose run failed
for the client's mistake (missing model files, a hosted model's key not stored) is a 4xx
(``_failures``); a retry of the request, or a repeat of its ``Idempotency-Key``, follows the run
of the first try (``_attempts``). A completion whose client went (a dropped stream, a closed
connection) is cancelled once no retry of it listens any more (``_listeners``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from functools import partial
from typing import Any

import msgspec
from inline_core import DocumentInvalid
from litestar import Controller, Request, Response, get, post
from litestar.background_tasks import BackgroundTask
from litestar.di import NamedDependency, Provide
from litestar.params import FromPath
from litestar.response import Stream

from ...runs import Conflict, RunService
from .._models import ChatModel, ModelsService
from ._attempts import Attempt, Attempts, provide_attempts, submit_once
from ._chat import DONE, NODE_ID, Chunks, outputs_of, run_request, tool_calls, usage
from ._failures import NO_RETRY, run_failed
from ._listeners import Listeners, client_gone, provide_listeners, until_answered
from ._pieces import streamed as _streamed
from ._schemas import (
    ChatCompletion,
    ChatRequest,
    Choice,
    Delta,
    Message,
    ModelCard,
    ModelList,
    OpenAIError,
    openai_error,
)

_decode_request = msgspec.json.Decoder(ChatRequest)
_decode_json = msgspec.json.Decoder()


async def _models(models: ModelsService) -> list[ModelCard]:
    """The causal LM folders of ``models/llm/``, the hosted text models, then the encoder
    folders of ``models/embeddings/``."""
    usable = [m for m in await models.chat_models() if m.available]  # a hosted one's key stored
    cards = [ModelCard(id=m.id, created=m.created, owned_by=m.owned_by) for m in usable]
    named = {c.id for c in cards}
    encoders = [m for m in await models.embedding_models() if m.id not in named]
    return cards + [ModelCard(id=m.id, created=m.created) for m in encoders]


async def _parse(raw: bytes, models: ModelsService) -> tuple[ChatRequest, ChatModel]:
    try:
        req = _decode_request.decode(raw)
    except msgspec.ValidationError as exc:
        message, _, at = str(exc).rpartition(" - at `")
        param = at.rstrip("`").removeprefix("$.") if message else None
        raise OpenAIError(400, message or str(exc), param=param) from None
    except msgspec.DecodeError as exc:
        raise OpenAIError(400, f"The body is not valid JSON: {exc}") from None
    chat = await models.chat_model(req.model)  # the packs installed from the CLI picked up
    if chat is None:
        raise OpenAIError(
            404,
            f"The model '{req.model}' does not exist (no causal LM folder models/llm/{req.model}"
            ", and no hosted model of that id)",
            code="model_not_found",
            param="model",
        )
    return req, chat


async def _submit(
    service: RunService,
    chat: ChatModel,
    req: ChatRequest,
    raw: bytes,
    attempts: Attempts,
    attempt: Attempt,
) -> str:
    tools = _decode_json.decode(raw).get("tools") if req.tools else None
    request = run_request(req, chat.node, chat.params, tools)
    try:
        (run_id,) = await submit_once(service, attempts, attempt, [request])
    except DocumentInvalid as exc:  # the node refused the params (the text pack is the judge);
        raise OpenAIError(400, str(exc)) from None  # RequestInvalid is one of these
    except Conflict as exc:
        raise OpenAIError(400, str(exc), code="idempotency_key_reused") from None
    return run_id


def _outputs(service: RunService, run_id: str, model: str) -> dict[str, str]:
    """The target's text outputs, from the run's takes (one per output port)."""
    state = service.state(run_id)
    if state is not None and state.status == "error":
        raise run_failed(service, state, model)
    if state is None or state.status != "done":
        kind = "cancelled" if state is not None and state.status == "cancelled" else "server_error"
        what = state.status if state is not None else "gone"
        raise OpenAIError(500, f"The completion's run {run_id} is {what}", type=kind,
                          headers=NO_RETRY)  # fmt: skip
    out = outputs_of(service, state)
    if "text" not in out:
        raise OpenAIError(500, f"The completion's outputs are gone (run {run_id})",
                          type="server_error")  # fmt: skip
    return out


class OpenAIController(Controller):
    """OpenAI-compatible routes (auth as for ``/v1``)."""

    path = "/openai/v1"
    exception_handlers = {OpenAIError: openai_error}  # noqa: RUF012
    dependencies = {  # noqa: RUF012
        "attempts": Provide(provide_attempts, sync_to_thread=False),
        "listeners": Provide(provide_listeners, sync_to_thread=False),
    }

    @get("/models")
    async def list_models(self, models: NamedDependency[ModelsService]) -> ModelList:
        """Every causal LM folder of ``models/llm/``, every hosted text model and every encoder
        folder of ``models/embeddings/``."""
        return ModelList(data=await _models(models))

    @get("/models/{model_id:str}")
    async def get_model(
        self, models: NamedDependency[ModelsService], model_id: FromPath[str]
    ) -> ModelCard:
        for card in await _models(models):
            if card.id == model_id:
                return card
        raise OpenAIError(404, f"The model '{model_id}' does not exist", code="model_not_found")

    @post("/chat/completions", status_code=200)
    async def chat_completions(
        self,
        request: Request[Any, Any, Any],
        service: NamedDependency[RunService],
        models: NamedDependency[ModelsService],
        attempts: NamedDependency[Attempts],
        listeners: NamedDependency[Listeners],
    ) -> Response[Any]:
        raw = await request.body()
        req, chat = await _parse(raw, models)
        attempt = Attempt.of("chat/completions", request, raw)
        run_id = await _submit(service, chat, req, raw, attempts, attempt)
        completion_id, created = f"chatcmpl-{run_id}", int(time.time())
        lease = listeners.join([run_id])
        if req.stream:
            chunks = Chunks(completion_id, created, req.model)
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            leave = partial(listeners.leave, service, lease)
            return Stream(
                _stream(service, run_id, chunks, include_usage, req.model, leave),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Inline-Run-Id": run_id},
                # after the body, also when the client went before it began
                background=BackgroundTask(leave),
            )
        try:
            answered = await until_answered(service, [run_id], request)
        finally:
            await listeners.leave(service, lease)
        if not answered:
            raise client_gone()
        out = _outputs(service, run_id, req.model)
        calls = tool_calls(out)
        message = Message(
            role="assistant",
            content=out.get("text", "") or (None if calls else ""),
            tool_calls=calls if calls else msgspec.UNSET,
            reasoning_content=out["thinking"] if out.get("thinking") else msgspec.UNSET,
        )
        body = ChatCompletion(
            id=completion_id,
            created=created,
            model=req.model,
            choices=[
                Choice(index=0, message=message, finish_reason=out.get("finish_reason", "stop"))
            ],
            usage=usage(out),
        )
        return Response(body, headers={"X-Inline-Run-Id": run_id})


async def _stream(
    service: RunService,
    run_id: str,
    chunks: Chunks,
    include_usage: bool,
    model: str,
    leave: Callable[[], Awaitable[object]],
) -> AsyncIterator[bytes]:
    """The stream's writes; at its end, or once the client went (Litestar cancels the body of
    a response whose client disconnected), this request stops listening to the run."""
    try:
        async with aclosing(_chunks(service, run_id, chunks, include_usage, model)) as writes:
            async for data in writes:
                yield data
    finally:
        await leave()


async def _chunks(
    service: RunService, run_id: str, chunks: Chunks, include_usage: bool, model: str
) -> AsyncGenerator[bytes, None]:
    yield chunks.chunk(Delta(role="assistant", content=""))
    streamed = {"text": "", "thinking": ""}
    async for pieces in _streamed(service, run_id, NODE_ID):
        written: list[bytes] = []
        for port, piece in pieces:
            if port == "text":
                streamed["text"] += piece
                written.append(chunks.chunk(Delta(content=piece)))
            elif port == "thinking":
                streamed["thinking"] += piece
                written.append(chunks.chunk(Delta(reasoning_content=piece)))
        if written:
            yield b"".join(written)  # one write
    try:
        out = _outputs(service, run_id, model)
    except OpenAIError as exc:
        yield b"data: " + msgspec.json.encode(exc.body()) + b"\n\n"
        yield DONE
        return
    tail: list[bytes] = []  # the rest goes out in one write
    # a host or pack that did not stream: the rest of each output in one piece
    for port in ("thinking", "text"):
        final = out.get(port, "")
        if final.startswith(streamed[port]) and len(final) > len(streamed[port]):
            rest = final[len(streamed[port]) :]
            delta = Delta(reasoning_content=rest) if port == "thinking" else Delta(content=rest)
            tail.append(chunks.chunk(delta))
    tail += chunks.tool_call_chunks(tool_calls(out))
    tail.append(chunks.chunk(Delta(), finish=out.get("finish_reason", "stop")))
    if include_usage:
        tail.append(chunks.usage_chunk(usage(out)))
    tail.append(DONE)
    yield b"".join(tail)
