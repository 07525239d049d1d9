"""Answering completions from their runs: chat completions (``/chat/completions``) and text
completions (``/completions``, a prompt in, text out, for the same local models).

A request becomes one run per choice (``n``), submitted together (a retry attaches to the runs
of its first try: ``_attempts``) and released together (``_listeners``). Unanswered, each choice
is its run's outputs; streamed, the runs' pieces go out as they come, each chunk naming its
choice, and a choice's finish (its tool calls, its finish reason) as soon as its run ends. With
``stream_options.include_usage`` the last chunk before ``[DONE]`` carries the usage, the same as
the unstreamed answer's: the prompt once, and every choice's completion.

A text completion runs the same chat node with its chat template off (``template``): the prompt
is read as it is and the reply is the text as decoded, with no thinking or tool calls split
out. A prompt may be a list of prompts: choice ``i * n + j`` is prompt ``i``'s choice ``j``.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import aclosing
from functools import partial
from typing import Any, Final, TypeVar

import msgspec
from inline_core import DocumentInvalid
from litestar import Request, Response
from litestar.background_tasks import BackgroundTask
from litestar.response import Stream

from ...runs import Conflict, RunService
from .._models import ChatModel, ModelsService
from ._attempts import Attempt, Attempts, submit_once
from ._chat import (
    CHAT_FIELDS,
    COMPLETION_FIELDS,
    DONE,
    NODE_ID,
    Chunks,
    check_fields,
    choice_graphs,
    choice_logprobs,
    choices_of,
    run_outputs,
    run_requests,
    sampling_params,
    tool_calls,
    total_usage,
)
from ._listeners import Listeners, client_gone, until_answered
from ._pieces import merged
from ._schemas import (
    ChatCompletion,
    ChatRequest,
    Choice,
    CompletionRequest,
    Delta,
    Message,
    OpenAIError,
    TextChoice,
    TextCompletion,
    ToolCall,
    Usage,
)

__all__ = (
    "answer_chat",
    "answer_text",
    "await_runs",
    "chat_model_or_404",
    "decode_body",
    "submit_runs",
)

T = TypeVar("T")
#: The most prompts one ``/completions`` request may hold.
MAX_PROMPTS: Final = 16
_decode_json = msgspec.json.Decoder()
_encode = msgspec.json.Encoder()
Leave = Callable[[], Awaitable[object]]


def decode_body(raw: bytes, kind: type[T], fields: frozenset[str]) -> tuple[T, dict[str, Any]]:
    """The request ``raw`` holds, as ``kind`` and as sent; 400 naming the field for a field
    this server does not act on (``check_fields``) or a value of the wrong type."""
    try:
        body = _decode_json.decode(raw)
    except msgspec.DecodeError as exc:
        raise OpenAIError(400, f"The body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise OpenAIError(400, "The body must be a JSON object")
    check_fields(body, fields)
    try:
        return msgspec.convert(body, kind), body
    except msgspec.ValidationError as exc:
        message, _, at = str(exc).rpartition(" - at `")
        param = at.rstrip("`").removeprefix("$.") if message else None
        raise OpenAIError(400, message or str(exc), param=param) from None


async def chat_model_or_404(models: ModelsService, model: str) -> ChatModel:
    """The chat model ``model`` names; OpenAI's 404 ``model_not_found`` when none."""
    chat = await models.chat_model(model)  # the packs installed from the CLI picked up
    if chat is None:
        raise OpenAIError(
            404,
            f"The model '{model}' does not exist (no causal LM folder models/llm/{model}"
            ", and no hosted model of that id)",
            code="model_not_found",
            param="model",
        )
    return chat


async def submit_runs(
    service: RunService, attempts: Attempts, attempt: Attempt, docs: list[dict[str, Any]]
) -> list[str]:
    """Submit the runs of one request (once per attempt); a refusal as OpenAI's 400."""
    try:
        return await submit_once(service, attempts, attempt, docs)
    except DocumentInvalid as exc:  # the node refused the params (the pack is the judge);
        raise refusal(exc) from None  # RequestInvalid is one of these
    except Conflict as exc:
        raise OpenAIError(400, str(exc), code="idempotency_key_reused") from None


#: The chat node params whose request field has another name.
FIELD_OF_PARAM: Final = {"tool_name": "tool_choice", "max_new_tokens": "max_tokens"}
PARAM_PATH: Final = re.compile(r"\$\.graph\.nodes\[\d+\]\.params\.(\w+)")


def refusal(exc: DocumentInvalid) -> OpenAIError:
    """A refused run as OpenAI's 400, ``param`` naming the request field behind the node param
    at fault; a field the model's node does not take (a hosted model's ``logprobs``) says so."""
    issue = exc.issues[0]
    found = PARAM_PATH.fullmatch(issue.path)
    if found is None:
        return OpenAIError(400, str(exc))
    key = found[1]
    field = FIELD_OF_PARAM.get(key, key)
    if issue.message.startswith("Unknown param"):
        return OpenAIError(400, f"'{field}' is not supported by this model (its node takes "
                           f"no '{key}')", param=field)  # fmt: skip
    return OpenAIError(400, str(exc), param=field)


async def _answered(
    request: Request[Any, Any, Any],
    service: RunService,
    listeners: Listeners,
    run_ids: list[str],
    model: str,
) -> list[dict[str, str]]:
    """Every run's outputs once all ended (the client gone: 499)."""
    await await_runs(request, service, listeners, run_ids)
    return [run_outputs(service, run_id, model) for run_id in run_ids]


async def await_runs(
    request: Request[Any, Any, Any], service: RunService, listeners: Listeners, run_ids: list[str]
) -> None:
    """Until every run ended, listened for meanwhile; ``client_gone`` (499) if the client left."""
    lease = listeners.join(run_ids)
    try:
        answered = await until_answered(service, run_ids, request)
    finally:
        await listeners.leave(service, lease)
    if not answered:
        raise client_gone()


def _streaming(
    service: RunService, listeners: Listeners, run_ids: list[str],
    writes: Callable[[], AsyncGenerator[bytes, None]],
) -> Stream:  # fmt: skip
    """The server-sent events ``writes`` makes; the request stops listening to its runs at
    the stream's end, or once the client went (Litestar cancels the body then), or when the
    client went before the body began."""
    lease = listeners.join(run_ids)
    leave = partial(listeners.leave, service, lease)
    return Stream(
        _released(writes, leave),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Inline-Run-Id": ",".join(run_ids)},
        background=BackgroundTask(leave),
    )


async def _released(
    writes: Callable[[], AsyncGenerator[bytes, None]], leave: Leave
) -> AsyncIterator[bytes]:
    try:
        async with aclosing(writes()) as each:
            async for data in each:
                yield data
    finally:
        await leave()


def _error_event(exc: OpenAIError) -> bytes:
    return b"data: " + _encode.encode(exc.body()) + b"\n\n" + DONE


# --- chat completions -------------------------------------------------------------------------


async def answer_chat(
    request: Request[Any, Any, Any],
    service: RunService,
    models: ModelsService,
    attempts: Attempts,
    listeners: Listeners,
) -> Response[Any]:
    """``POST /openai/v1/chat/completions``."""
    raw = await request.body()
    req, body = decode_body(raw, ChatRequest, CHAT_FIELDS)
    chat = await chat_model_or_404(models, req.model)
    docs = run_requests(req, chat.node, chat.params, body.get("tools"))
    run_ids = await submit_runs(
        service, attempts, Attempt.of("chat/completions", request, raw), docs
    )
    completion_id, created = f"chatcmpl-{run_ids[0]}", int(time.time())
    one_call = req.parallel_tool_calls is False
    if req.stream:
        chunks = Chunks(completion_id, created, req.model)
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        writes = partial(_chat_chunks, service, run_ids, chunks, include_usage, req.model,
                         one_call, bool(req.logprobs))  # fmt: skip
        return _streaming(service, listeners, run_ids, writes)
    outs = await _answered(request, service, listeners, run_ids, req.model)
    choices = []
    for i, out in enumerate(outs):
        calls = _calls(out, one_call)
        message = Message(
            role="assistant",
            content=out.get("text", "") or (None if calls else ""),
            tool_calls=calls if calls else msgspec.UNSET,
            reasoning_content=out["thinking"] if out.get("thinking") else msgspec.UNSET,
        )
        scored = choice_logprobs(out) if req.logprobs else None
        choices.append(Choice(index=i, message=message, finish_reason=_finish(out),
                              logprobs=scored))  # fmt: skip
    done = ChatCompletion(id=completion_id, created=created, model=req.model, choices=choices,
                          usage=total_usage(outs))  # fmt: skip
    return Response(done, headers={"X-Inline-Run-Id": ",".join(run_ids)})


def _in_order(outs: Mapping[int, dict[str, str]]) -> list[dict[str, str]]:
    return [outs[i] for i in sorted(outs)]


def _calls(out: Mapping[str, str], one_call: bool) -> list[ToolCall]:
    """The tool calls of a choice (only the first with ``parallel_tool_calls: false``)."""
    calls = tool_calls(out)
    return calls[:1] if one_call else calls


def _finish(out: Mapping[str, str]) -> str:
    return out.get("finish_reason") or "stop"


async def _chat_chunks(
    service: RunService,
    run_ids: list[str],
    chunks: Chunks,
    include_usage: bool,
    model: str,
    one_call: bool,
    logprobs: bool = False,
) -> AsyncGenerator[bytes, None]:
    yield b"".join(chunks.chunk(Delta(role="assistant", content=""), index=i)
                   for i in range(len(run_ids)))  # fmt: skip
    streamed = [{"text": "", "thinking": ""} for _ in run_ids]
    outs: dict[int, dict[str, str]] = {}
    async for i, pieces in merged(service, run_ids, NODE_ID):
        written: list[bytes] = []
        for port, piece in pieces:
            if port in ("text", "thinking"):
                streamed[i][port] += piece
                delta = Delta(content=piece) if port == "text" else Delta(reasoning_content=piece)
                written.append(chunks.chunk(delta, index=i))
        if pieces:
            if written:
                yield b"".join(written)  # one write
            continue
        try:  # choice i ended
            out = run_outputs(service, run_ids[i], model)
        except OpenAIError as exc:
            yield _error_event(exc)
            return
        outs[i] = out
        tail: list[bytes] = []
        # a host or pack that did not stream: the rest of each output in one piece
        for port in ("thinking", "text"):
            final, sent = out.get(port, ""), streamed[i][port]
            if final.startswith(sent) and len(final) > len(sent):
                rest = final[len(sent) :]
                delta = Delta(reasoning_content=rest) if port == "thinking" else Delta(content=rest)
                tail.append(chunks.chunk(delta, index=i))
        tail += chunks.tool_call_chunks(_calls(out, one_call), index=i)
        # a choice's logprobs come whole with its last chunk (the node scores as it ends)
        scored = choice_logprobs(out) if logprobs else None
        tail.append(chunks.chunk(Delta(), finish=_finish(out), index=i, logprobs=scored))
        if len(outs) == len(run_ids):  # the last: the rest goes out in the same write
            if include_usage:
                tail.append(chunks.usage_chunk(total_usage(_in_order(outs))))
            tail.append(DONE)
        yield b"".join(tail)


# --- text completions -------------------------------------------------------------------------


def text_requests(req: CompletionRequest, chat: ChatModel) -> list[dict[str, Any]]:
    """The run requests of a text completion: per prompt, one per choice (raw prompt, no chat
    template)."""
    prompts = [req.prompt] if isinstance(req.prompt, str) else list(req.prompt)
    if not prompts or len(prompts) > MAX_PROMPTS:
        raise OpenAIError(400, f"prompt must be a string or a list of 1 to {MAX_PROMPTS} strings",
                          param="prompt")  # fmt: skip
    if not all(prompts):
        raise OpenAIError(400, "prompt must not be empty", param="prompt")
    if "/" in chat.id:  # a hosted chat model: its provider has no raw completion
        raise OpenAIError(400, f"'{chat.id}' is a hosted chat model: /completions serves the "
                          "causal LM folders of models/llm/", param="model")  # fmt: skip
    count = choices_of(req.n)
    base = {**chat.params, "template": False}
    base |= sampling_params(req.max_tokens, req.temperature, req.top_p, req.stop,
                            req.presence_penalty, req.frequency_penalty)  # fmt: skip
    docs = []
    for prompt in prompts:
        params = {**base, "messages": [{"role": "user", "content": prompt}]}
        docs += choice_graphs(chat.node, params, req.seed, count)
    return docs


async def answer_text(
    request: Request[Any, Any, Any],
    service: RunService,
    models: ModelsService,
    attempts: Attempts,
    listeners: Listeners,
) -> Response[Any]:
    """``POST /openai/v1/completions``."""
    raw = await request.body()
    req, _ = decode_body(raw, CompletionRequest, COMPLETION_FIELDS)
    chat = await chat_model_or_404(models, req.model)
    docs = text_requests(req, chat)
    run_ids = await submit_runs(service, attempts, Attempt.of("completions", request, raw), docs)
    completion_id, created = f"cmpl-{run_ids[0]}", int(time.time())
    head = TextCompletion(id=completion_id, created=created, model=req.model, choices=[])
    if req.stream:
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        writes = partial(_text_chunks, service, run_ids, head, include_usage, req.model,
                         choices_of(req.n))  # fmt: skip
        return _streaming(service, listeners, run_ids, writes)
    outs = await _answered(request, service, listeners, run_ids, req.model)
    choices = [TextChoice(index=i, text=out.get("text", ""), finish_reason=_finish(out))
               for i, out in enumerate(outs)]  # fmt: skip
    used = total_usage(outs, choices_of(req.n))
    done = msgspec.structs.replace(head, choices=choices, usage=used)
    return Response(done, headers={"X-Inline-Run-Id": ",".join(run_ids)})


def _text_chunk(
    head: TextCompletion, choices: list[TextChoice], usage: Usage | None = None
) -> bytes:
    chunk = msgspec.structs.replace(head, choices=choices, usage=usage)
    return b"data: " + _encode.encode(chunk) + b"\n\n"


async def _text_chunks(
    service: RunService,
    run_ids: list[str],
    head: TextCompletion,
    include_usage: bool,
    model: str,
    choices: int,
) -> AsyncGenerator[bytes, None]:
    streamed = ["" for _ in run_ids]
    outs: dict[int, dict[str, str]] = {}
    async for i, pieces in merged(service, run_ids, NODE_ID):
        if pieces:
            text = "".join(piece for port, piece in pieces if port == "text")
            if text:
                streamed[i] += text
                yield _text_chunk(head, [TextChoice(index=i, text=text)])
            continue
        try:  # choice i ended
            out = run_outputs(service, run_ids[i], model)
        except OpenAIError as exc:
            yield _error_event(exc)
            return
        outs[i] = out
        final = out.get("text", "")
        rest = final[len(streamed[i]) :] if final.startswith(streamed[i]) else ""
        tail = [_text_chunk(head, [TextChoice(index=i, text=rest, finish_reason=_finish(out))])]
        if len(outs) == len(run_ids):
            if include_usage:
                tail.append(_text_chunk(head, [], total_usage(_in_order(outs), choices)))
            tail.append(DONE)
        yield b"".join(tail)
