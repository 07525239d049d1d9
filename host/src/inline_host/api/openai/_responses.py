"""``POST /openai/v1/responses``: OpenAI's Responses API, stateless, over runs of the chat nodes.

A request becomes a chat completion's run (``_responses_request`` reads it into the chat
request it is, ``_chat.run_request`` makes its run): ``instructions`` is the system message,
``input`` a string or a list of message, ``function_call`` and ``function_call_output`` items;
function tools are the chat's tools. Nothing is
stored: ``store`` must be false and ``previous_response_id`` / ``conversation`` are refused
(send the whole conversation in ``input``). A field this server does not serve is a 400 naming
it, never ignored. The response's id is ``resp_<runId>``; its output is a ``reasoning`` item
(the node's thinking), a ``message`` (its text) and one ``function_call`` per tool call.

Streamed, the run's ``delta`` events become the Responses events (``response.created``,
``response.in_progress``, ``response.output_item.added``, ``response.content_part.added``,
``response.reasoning_text.delta`` / ``response.output_text.delta``, their ``.done``, then per
tool call ``response.function_call_arguments.delta`` / ``.done``, and ``response.completed``,
``response.incomplete`` or ``response.failed``), each with its ``sequence_number``. Retries,
listeners and failures are the chat completions' own (``_attempts``, ``_listeners``,
``_failures``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from functools import partial
from typing import Any, Final

import msgspec
from inline_sdk.chat import Completion, read_completion
from litestar import Request, Response
from litestar.background_tasks import BackgroundTask
from litestar.response import Stream

from ...runs import RunService
from .._models import ModelsService
from ._attempts import Attempt, Attempts
from ._chat import ARGUMENT_PIECE, NODE_ID, run_outputs, run_request
from ._completions import chat_model_or_404, submit_runs
from ._failures import NO_RETRY
from ._listeners import Listeners, client_gone, until_answered
from ._pieces import streamed
from ._responses_request import chat_request, parse_request
from ._responses_schemas import (
    FunctionCallItem,
    IncompleteDetails,
    MessageItem,
    OutputItem,
    OutputText,
    ReasoningItem,
    ReasoningText,
    ResponseError,
    ResponseObject,
    ResponsesRequest,
    ResponseUsage,
)
from ._schemas import OpenAIError

__all__ = ("Events", "create_response", "output_items", "response_object")

ROUTE: Final = "responses"


def _usage(done: Completion) -> ResponseUsage:
    used = done.usage
    return ResponseUsage(input_tokens=used.prompt_tokens, output_tokens=used.completion_tokens,
                         total_tokens=used.prompt_tokens + used.completion_tokens)  # fmt: skip


def _incomplete(done: Completion) -> IncompleteDetails | None:
    return IncompleteDetails(reason="max_output_tokens") if done.finish_reason == "length" else None


def output_items(run_id: str, done: Completion) -> list[OutputItem]:
    """The response's output: its reasoning, its message (unless it only calls tools), its
    tool calls."""
    items: list[OutputItem] = []
    if done.thinking:
        items.append(ReasoningItem(id=f"rs_{run_id}_{len(items)}", status="completed",
                                   content=[ReasoningText(text=done.thinking)]))  # fmt: skip
    if done.text or not done.tool_calls:
        status = "incomplete" if done.finish_reason == "length" else "completed"
        items.append(MessageItem(id=f"msg_{run_id}_{len(items)}", status=status,
                                 content=[OutputText(text=done.text)]))  # fmt: skip
    items += [_call_item(c.id, c.name, c.arguments, "completed") for c in done.tool_calls]
    return items


def _call_item(call_id: str, name: str, arguments: str, status: str) -> FunctionCallItem:
    return FunctionCallItem(id=f"fc_{call_id}", call_id=call_id, name=name, arguments=arguments,
                            status=status)  # fmt: skip


def response_object(
    req: ResponsesRequest,
    run_id: str,
    created: int,
    status: str,
    output: list[OutputItem],
    **fields: Any,
) -> ResponseObject:
    """The response object of ``req``'s run (``fields``: usage, error, incomplete_details...)."""
    return ResponseObject(
        id=f"resp_{run_id}",
        created_at=created,
        model=req.model,
        status=status,
        output=output,
        tools=list(req.tools or []),
        tool_choice=req.tool_choice if req.tool_choice is not None else "auto",
        parallel_tool_calls=req.parallel_tool_calls is not False,
        instructions=req.instructions,
        max_output_tokens=req.max_output_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        metadata=dict(req.metadata or {}),
        user=req.user,
        **fields,
    )


def _completion(service: RunService, run_id: str, model: str) -> Completion:
    """The run's completion once it is done; raises ``OpenAIError`` for a run that is not."""
    out = run_outputs(service, run_id, model, "response")
    try:
        return read_completion(out)
    except msgspec.DecodeError as exc:  # a chat node's bug
        raise OpenAIError(500, f"Run {run_id} answered outputs that do not read as a "
                          f"completion: {exc}", type="server_error",
                          headers=NO_RETRY) from None  # fmt: skip


async def create_response(
    request: Request[Any, Any, Any],
    service: RunService,
    models: ModelsService,
    attempts: Attempts,
    listeners: Listeners,
) -> Response[Any]:
    """Answer ``POST /openai/v1/responses`` (see the module docstring)."""
    raw = await request.body()
    req = parse_request(raw)
    chat = await chat_model_or_404(models, req.model)
    chat_req, tools = chat_request(req)
    doc = run_request(chat_req, chat.node, chat.params, tools)
    (run_id,) = await submit_runs(service, attempts, Attempt.of(ROUTE, request, raw), [doc])
    created = int(time.time())
    lease = listeners.join([run_id])
    headers = {"X-Inline-Run-Id": run_id}
    if req.stream:
        leave = partial(listeners.leave, service, lease)
        events = Events(req, run_id, created)
        return Stream(
            _stream(service, run_id, events, leave),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", **headers},
            background=BackgroundTask(leave),  # also when the client went before it began
        )
    try:
        answered = await until_answered(service, [run_id], request)
    finally:
        await listeners.leave(service, lease)
    if not answered:
        raise client_gone()
    done = _completion(service, run_id, req.model)
    incomplete = _incomplete(done)
    body = response_object(
        req, run_id, created, "incomplete" if incomplete else "completed",
        output_items(run_id, done), usage=_usage(done), incomplete_details=incomplete,
        completed_at=int(time.time()),
    )  # fmt: skip
    return Response(body, headers=headers)


class Events:
    """The server-sent events of one streamed response, numbered in order; the output items
    as they were streamed (the final response carries exactly these)."""

    def __init__(self, req: ResponsesRequest, run_id: str, created: int) -> None:
        self.req, self.run_id, self.created = req, run_id, created
        self.sequence = 0
        self.items: list[OutputItem] = []
        self.open: str | None = None  # the port whose item is open: "thinking" or "text"
        self.open_text = ""
        self.streamed = {"text": "", "thinking": ""}

    def event(self, kind: str, **payload: Any) -> bytes:
        data = msgspec.json.encode({"type": kind, "sequence_number": self.sequence, **payload})
        self.sequence += 1
        return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"

    def _response(self, status: str, **fields: Any) -> ResponseObject:
        return response_object(self.req, self.run_id, self.created, status, list(self.items),
                               **fields)  # fmt: skip

    def start(self) -> bytes:
        now = self._response("in_progress")
        return self.event("response.created", response=now) + self.event(
            "response.in_progress", response=now
        )

    def _ids(self) -> tuple[int, str]:
        index = len(self.items)
        prefix = "rs" if self.open == "thinking" else "msg"
        return index, f"{prefix}_{self.run_id}_{index}"

    def _open(self, port: str) -> bytes:
        self.open, self.open_text = port, ""
        index, item_id = self._ids()
        at = {"item_id": item_id, "output_index": index, "content_index": 0}
        if port == "thinking":
            item: OutputItem = ReasoningItem(id=item_id, status="in_progress", content=[])
            part: Any = ReasoningText(text="")
        else:
            item = MessageItem(id=item_id, status="in_progress", content=[])
            part = OutputText(text="")
        return self.event("response.output_item.added", output_index=index, item=item) + (
            self.event("response.content_part.added", part=part, **at)
        )

    def piece(self, port: str, text: str) -> bytes:
        """A streamed piece of the node's ``text`` or ``thinking`` (other outputs: nothing)."""
        if port not in self.streamed or not text:
            return b""
        out = b""
        if self.open != port:
            out += self.close() + self._open(port)
        self.streamed[port] += text
        self.open_text += text
        index, item_id = self._ids()
        at = {"item_id": item_id, "output_index": index, "content_index": 0}
        if port == "thinking":
            return out + self.event("response.reasoning_text.delta", delta=text, **at)
        return out + self.event("response.output_text.delta", delta=text, logprobs=[], **at)

    def close(self, status: str = "completed") -> bytes:
        """The open item's ``.done`` events (nothing when none is open)."""
        if self.open is None:
            return b""
        index, item_id = self._ids()
        at = {"item_id": item_id, "output_index": index, "content_index": 0}
        text = self.open_text
        if self.open == "thinking":
            item: OutputItem = ReasoningItem(id=item_id, status="completed",
                                             content=[ReasoningText(text=text)])  # fmt: skip
            out = self.event("response.reasoning_text.done", text=text, **at)
            out += self.event("response.content_part.done", part=ReasoningText(text=text), **at)
        else:
            item = MessageItem(id=item_id, status=status, content=[OutputText(text=text)])
            out = self.event("response.output_text.done", text=text, logprobs=[], **at)
            out += self.event("response.content_part.done", part=OutputText(text=text), **at)
        out += self.event("response.output_item.done", output_index=index, item=item)
        self.items.append(item)
        self.open, self.open_text = None, ""
        return out

    def end(self, done: Completion) -> bytes:
        """What the run made beyond its streamed pieces, then its tool calls, then
        ``response.completed`` (``response.incomplete`` when it hit ``max_output_tokens``)."""
        out = b""
        # a host or pack that did not stream: the rest of each output in one piece
        for port, final in (("thinking", done.thinking), ("text", done.text)):
            so_far = self.streamed[port]
            if final.startswith(so_far) and len(final) > len(so_far):
                out += self.piece(port, final[len(so_far) :])
        said = self.open == "text" or any(isinstance(i, MessageItem) for i in self.items)
        if not said and not done.tool_calls:  # an empty reply is still a message
            out += self.close() + self._open("text")
        incomplete = _incomplete(done)
        out += self.close("incomplete" if incomplete else "completed")
        for call in done.tool_calls:
            out += self._call(call.id, call.name, call.arguments)
        status = "incomplete" if incomplete else "completed"
        final = self._response(status, usage=_usage(done), incomplete_details=incomplete,
                               completed_at=int(time.time()))  # fmt: skip
        return out + self.event(f"response.{status}", response=final)

    def _call(self, call_id: str, name: str, arguments: str) -> bytes:
        index = len(self.items)
        item_id = f"fc_{call_id}"
        added = _call_item(call_id, name, "", "in_progress")
        out = self.event("response.output_item.added", output_index=index, item=added)
        at = {"item_id": item_id, "output_index": index}
        for start in range(0, len(arguments), ARGUMENT_PIECE):
            piece = arguments[start : start + ARGUMENT_PIECE]
            out += self.event("response.function_call_arguments.delta", delta=piece, **at)
        out += self.event("response.function_call_arguments.done", item_id=item_id,
                          output_index=index, arguments=arguments)  # fmt: skip
        item = _call_item(call_id, name, arguments, "completed")
        self.items.append(item)
        return out + self.event("response.output_item.done", output_index=index, item=item)

    def failed(self, exc: OpenAIError) -> bytes:
        """``response.failed``, carrying why."""
        out = self.close("incomplete")
        error = ResponseError(code=exc.code or exc.type, message=exc.message)
        return out + self.event("response.failed", response=self._response("failed", error=error))


async def _stream(
    service: RunService, run_id: str, events: Events, leave: Callable[[], Awaitable[object]]
) -> AsyncIterator[bytes]:
    """The stream's writes; at its end, or once the client went, this request stops listening
    to the run."""
    try:
        async with aclosing(_events(service, run_id, events)) as writes:
            async for data in writes:
                yield data
    finally:
        await leave()


async def _events(service: RunService, run_id: str, events: Events) -> AsyncGenerator[bytes, None]:
    yield events.start()
    async for pieces in streamed(service, run_id, NODE_ID):
        written = b"".join(events.piece(port, text) for port, text in pieces)
        if written:
            yield written  # one write
    try:
        done = _completion(service, run_id, events.req.model)
    except OpenAIError as exc:
        yield events.failed(exc)
        return
    yield events.end(done)  # the rest in one write
