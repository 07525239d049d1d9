"""``/anthropic/v1``: Anthropic's Messages API over runs of the packs' chat nodes.

The same chat models as ``/openai/v1`` (a local ``llm`` folder's, a hosted model's: found by
what the descriptors declare), and the same machinery: each reply is a durable run of one chat
node (its id is ``msg_<runId>``, in ``/v1/runs`` with its takes); a retry of a request (the SDK's
``x-stainless-retry-count``, or a repeated ``Idempotency-Key``) attaches to the run of its first
try; a run whose client went is cancelled once no retry listens; a failed run is answered by
what it was (a 404 for missing model files, a 400 for the client's mistake, a 500 for ours), in
Anthropic's error shape and with ``x-should-retry: false``. A streamed reply follows the run's
``delta`` events as Anthropic's server-sent events (``_events``). ``count_tokens`` runs the node
that counts the model's tokens (``_count``), where there is one.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from functools import partial
from typing import Annotated, Any, TypeVar

import msgspec
from inline_core import DocumentInvalid
from inline_sdk import Descriptor
from inline_sdk.chat import read_completion
from litestar import Controller, MediaType, Request, Response, get, post
from litestar.background_tasks import BackgroundTask
from litestar.di import NamedDependency, Provide
from litestar.exceptions import HTTPException
from litestar.params import FromPath, QueryParameter
from litestar.response import Stream

from ...runs import Conflict, QueueFull, RunService, StorageFailing
from .._models import ChatModel, ModelsService
from ..openai import (
    NO_RETRY,
    NODE_ID,
    Attempt,
    Attempts,
    Listeners,
    chat_graph,
    failure_kind,
    outputs_of,
    provide_attempts,
    provide_listeners,
    streamed,
    submit_once,
    until_answered,
)
from ._count import COUNT_OUTPUT, counting_node, read_count
from ._events import Events
from ._messages import (
    content,
    count_params,
    declared_params,
    plan,
    stop_of,
    tool_uses,
    usage_of,
)
from ._models_list import ModelInfo, ModelPage, model_info, model_page
from ._schemas import (
    AnthropicError,
    CountTokensRequest,
    MessageOut,
    MessagesRequest,
    TokenCount,
    anthropic_error,
    invalid,
)

log = logging.getLogger("inline.api")
T = TypeVar("T")

_decode_messages = msgspec.json.Decoder(MessagesRequest)
_decode_count = msgspec.json.Decoder(CountTokensRequest)


def _decode(decoder: msgspec.json.Decoder[T], raw: bytes) -> T:
    try:
        return decoder.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise invalid(exc) from None


async def _model(models: ModelsService, name: str) -> tuple[ChatModel, Descriptor | None]:
    """The chat model ``name`` names, and its node's descriptor as declared."""
    chat = await models.chat_model(name)  # the packs installed from the CLI picked up
    if chat is None:
        raise AnthropicError(
            404,
            f"model: the model '{name}' does not exist (no causal LM folder models/llm/{name}, "
            "and no hosted model of that id)",
        )
    declared = await models.declared()
    return chat, next((d for d in declared if d.type == chat.node), None)


async def _submit(
    service: RunService, attempts: Attempts, attempt: Attempt, doc: dict[str, Any]
) -> str:
    try:
        (run_id,) = await submit_once(service, attempts, attempt, [doc])
    except DocumentInvalid as exc:  # the node refused the params (the pack is the judge)
        raise AnthropicError(400, str(exc)) from None
    except Conflict as exc:  # an Idempotency-Key reused for another body
        raise AnthropicError(400, str(exc)) from None
    return run_id


def _run_failed(service: RunService, run_id: str, model: str) -> AnthropicError:
    state = service.state(run_id)
    if state is None or state.status != "error":
        what = state.status if state is not None else "gone"
        return AnthropicError(500, f"The reply's run {run_id} is {what}", headers=NO_RETRY)
    message = state.error.message if state.error is not None else "the run failed"
    match failure_kind(service, state):
        case "model_missing":
            said = f"model: the model '{model}' cannot run here, its files are missing: {message}"
            return AnthropicError(404, said, headers=NO_RETRY)
        case "secret_missing":
            said = f"model: the model '{model}' needs a secret this server does not hold: {message}"
            return AnthropicError(400, said, headers=NO_RETRY)
        case "rate_limited":
            return AnthropicError(429, message, headers=NO_RETRY)
        case "mistake":
            return AnthropicError(400, message, headers=NO_RETRY)
        case _:
            return AnthropicError(500, f"Run {run_id} failed: {message}", headers=NO_RETRY)


def _outputs(service: RunService, run_id: str, model: str, port: str = "text") -> dict[str, str]:
    """The node's outputs (``port`` among them), once its run is done."""
    state = service.state(run_id)
    if state is None or state.status != "done":
        raise _run_failed(service, run_id, model)
    out = outputs_of(service, state)
    if port not in out:
        raise AnthropicError(500, f"The reply's outputs are gone (run {run_id})")
    if port == "text":
        try:
            read_completion(out)
        except msgspec.DecodeError as exc:  # a chat node's bug
            raise AnthropicError(500, f"Run {run_id} answered outputs that do not read as a "
                                 f"completion: {exc}", headers=NO_RETRY) from None  # fmt: skip
    return out


async def _wait(
    service: RunService, listeners: Listeners, run_id: str, request: Request[Any, Any, Any]
) -> None:
    lease = listeners.join([run_id])
    try:
        answered = await until_answered(service, [run_id], request)
    finally:
        await listeners.leave(service, lease)
    if not answered:  # nobody reads this answer (nginx's 499)
        raise AnthropicError(499, "The client closed the request before its answer.")


def _json(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
    return Response(body, status_code=status, media_type=MediaType.JSON, headers=headers)


def _queue_full(_: Request[Any, Any, Any], exc: QueueFull) -> Response[Any]:
    body = AnthropicError(529, str(exc)).body()
    return _json(529, body, {"Retry-After": str(exc.retry_after)})


def _storage(_: Request[Any, Any, Any], exc: StorageFailing) -> Response[Any]:
    body = AnthropicError(503, str(exc)).body()
    return _json(503, body, {"Retry-After": str(exc.retry_after)})


def http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    """A framework error (no such route, a wrong method, a body too large) in Anthropic's
    shape."""
    status = exc.status_code
    if status == 404:
        message = f"No route {request.method} {request.url.path}."
    elif status == 405:
        message = f"{request.method} is not allowed on {request.url.path}."
    elif status == 413:
        message = "The request body is too large."
    else:
        message = str(exc.detail or "The request was refused.")
    return _json(status, AnthropicError(status, message).body(), dict(exc.headers or {}))


def _unexpected(_: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    log.exception("unexpected error", exc_info=exc)
    return _json(500, AnthropicError(500, f"Internal error: {type(exc).__name__}").body())


class AnthropicController(Controller):
    """Anthropic-compatible routes (the token as ``x-api-key`` or a bearer token)."""

    path = "/anthropic/v1"
    exception_handlers = {  # noqa: RUF012
        AnthropicError: anthropic_error,
        QueueFull: _queue_full,
        StorageFailing: _storage,
        HTTPException: http_error,
        Exception: _unexpected,
    }
    dependencies = {  # noqa: RUF012
        "attempts": Provide(provide_attempts, sync_to_thread=False),
        "listeners": Provide(provide_listeners, sync_to_thread=False),
    }

    @get("/models", summary="Anthropic models: the chat models, paged")
    async def list_models(
        self,
        models: NamedDependency[ModelsService],
        after_id: Annotated[str | None, QueryParameter(description="Page after this id")] = None,
        before_id: Annotated[str | None, QueryParameter(description="Page before this id")] = None,
        limit: Annotated[int | None, QueryParameter(description="1 to 1000, 20 by default")] = None,
    ) -> ModelPage:
        """The chat models (local folders, hosted models whose key is stored)."""
        return await model_page(models, after_id, before_id, limit)

    @get("/models/{model_id:path}", summary="Anthropic models: one chat model")
    async def get_model(
        self, models: NamedDependency[ModelsService], model_id: FromPath[str]
    ) -> ModelInfo:
        """One chat model (a 404 in Anthropic's shape when there is none)."""
        return await model_info(models, model_id.lstrip("/"))

    @post("/messages", status_code=200, summary="Anthropic Messages: each reply a durable run")
    async def messages(
        self,
        request: Request[Any, Any, Any],
        service: NamedDependency[RunService],
        models: NamedDependency[ModelsService],
        attempts: NamedDependency[Attempts],
        listeners: NamedDependency[Listeners],
    ) -> Response[Any]:
        """A reply of the model, as a message or streamed as server-sent events."""
        raw = await request.body()
        req = _decode(_decode_messages, raw)
        chat, descriptor = await _model(models, req.model)
        how = plan(req, chat.params, declared_params(descriptor))
        attempt = Attempt.of("anthropic/messages", request, raw)
        run_id = await _submit(service, attempts, attempt, chat_graph(chat.node, how.params))
        message_id = f"msg_{run_id}"
        if req.stream:
            lease = listeners.join([run_id])
            leave = partial(listeners.leave, service, lease)
            return Stream(
                _stream(service, run_id, Events(message_id, req.model, how), req.model, leave),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Inline-Run-Id": run_id},
                # after the body, also when the client went before it began
                background=BackgroundTask(leave),
            )
        await _wait(service, listeners, run_id, request)
        out = _outputs(service, run_id, req.model)
        reason, sequence = stop_of(out)
        body = MessageOut(id=message_id, role="assistant", model=req.model,
                          content=content(out, how), stop_reason=reason, stop_sequence=sequence,
                          usage=usage_of(out))  # fmt: skip
        return Response(body, headers={"X-Inline-Run-Id": run_id})

    @post(
        "/messages/count_tokens",
        status_code=200,
        summary="Anthropic count_tokens: the model's own tokenizer",
    )
    async def count_tokens(
        self,
        request: Request[Any, Any, Any],
        service: NamedDependency[RunService],
        models: NamedDependency[ModelsService],
        attempts: NamedDependency[Attempts],
        listeners: NamedDependency[Listeners],
    ) -> Response[Any]:
        """The input tokens of a request, counted with the model's own tokenizer."""
        raw = await request.body()
        req = _decode(_decode_count, raw)
        chat, _ = await _model(models, req.model)
        counter = counting_node(await models.declared(), chat.node)
        if counter is None:
            raise AnthropicError(
                400,
                f"model: count_tokens is not supported for the model '{req.model}': no node "
                "here counts its tokens (a hosted model's provider is not asked)",
            )
        params = count_params(req, chat.params)
        attempt = Attempt.of("anthropic/count_tokens", request, raw)
        run_id = await _submit(service, attempts, attempt, chat_graph(counter, params))
        await _wait(service, listeners, run_id, request)
        count = read_count(_outputs(service, run_id, req.model, COUNT_OUTPUT)[COUNT_OUTPUT])
        if count is None:
            raise AnthropicError(500, f"Run {run_id} answered no token count", headers=NO_RETRY)
        return Response(TokenCount(input_tokens=count), headers={"X-Inline-Run-Id": run_id})


async def _stream(
    service: RunService,
    run_id: str,
    events: Events,
    model: str,
    leave: Callable[[], Awaitable[object]],
) -> AsyncIterator[bytes]:
    """The stream's writes; at its end, or once the client went (Litestar cancels the body of
    a response whose client disconnected), this request stops listening to the run."""
    try:
        async with aclosing(_events(service, run_id, events, model)) as writes:
            async for data in writes:
                yield data
    finally:
        await leave()


async def _events(
    service: RunService, run_id: str, events: Events, model: str
) -> AsyncGenerator[bytes, None]:
    yield events.start()
    async for pieces in streamed(service, run_id, NODE_ID):
        written = b"".join(events.piece(port, text) for port, text in pieces)
        if written:
            yield written  # one write
    try:
        out = _outputs(service, run_id, model)
    except AnthropicError as exc:
        yield events.failed(exc)
        return
    # the rest in one write
    yield events.rest(out) + events.end(tool_uses(out, events.how), stop_of(out), usage_of(out))
