"""Mapping OpenAI chat requests onto runs of a chat node, and its outputs back (the node's
typed outputs, read with the SDK's own decoder: ``read_completion``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

import msgspec
from inline_sdk.chat import read_completion

from ...runs import RunService, RunState
from ._failures import NO_RETRY, run_failed
from ._schemas import (
    ChatChunk,
    ChatRequest,
    ChoiceLogprobs,
    ChunkChoice,
    CompletionRequest,
    Delta,
    FunctionCall,
    OpenAIError,
    TokenLogprob,
    ToolCall,
    ToolCallDelta,
    TopLogprob,
    Usage,
)

NODE_ID: Final = "complete"
#: Argument fragments of a streamed tool call are at most this many characters.
ARGUMENT_PIECE: Final = 16
#: A seed is a signed 64-bit integer (what crosses to a pack, and what OpenAI takes).
SEED_RANGE: Final = range(-(2**63), 2**63)


def _content(msg: dict[str, Any], i: int) -> str:
    content = msg.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):  # content parts: only text is understood
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text":
                raise OpenAIError(
                    400,
                    f"messages[{i}].content[{j}]: only text parts are supported",
                    param=f"messages[{i}].content",
                )
            texts.append(str(part.get("text", "")))
        return "".join(texts)
    raise OpenAIError(400, f"messages[{i}].content must be a string or a list of parts",
                      param=f"messages[{i}].content")  # fmt: skip


def _tool_calls(calls: Any, i: int) -> list[dict[str, Any]]:
    """An assistant message's ``tool_calls`` as OpenAI sends them, each checked:
    ``{id, type: "function", function: {name, arguments}}`` with strings throughout."""
    where = f"messages[{i}].tool_calls"
    if not isinstance(calls, list):
        raise OpenAIError(400, f"{where} must be a list of tool calls", param=where)
    out = []
    for j, call in enumerate(calls):
        at = f"{where}[{j}]"
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(call, dict) or not isinstance(fn, dict):
            raise OpenAIError(400, f"{at} must be an object with a 'function' object", param=at)
        if call.get("type", "function") != "function":
            raise OpenAIError(400, f"{at}.type must be 'function'", param=f"{at}.type")
        for key, value in (("id", call.get("id")), ("function.name", fn.get("name"))):
            if not isinstance(value, str) or not value:
                raise OpenAIError(
                    400, f"{at}.{key} must be a non-empty string", param=f"{at}.{key}"
                )
        arguments = fn.get("arguments", "")
        if not isinstance(arguments, str):
            raise OpenAIError(400, f"{at}.function.arguments must be a string (of JSON)",
                              param=f"{at}.function.arguments")  # fmt: skip
        function = {"name": fn["name"], "arguments": arguments}
        out.append({"id": call["id"], "type": "function", "function": function})
    return out


def messages_param(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The node's ``messages``: roles checked, content parts joined, tool calls checked (a
    conversation of system messages alone has nothing to answer)."""
    if not messages:
        raise OpenAIError(400, "messages must not be empty", param="messages")
    out = []
    for i, msg in enumerate(messages):
        role = msg.get("role") if isinstance(msg, dict) else None
        if role == "developer":
            role = "system"
        if role not in ("system", "user", "assistant", "tool"):
            raise OpenAIError(400, f"messages[{i}].role {role!r} is not supported",
                              param=f"messages[{i}].role")  # fmt: skip
        item: dict[str, Any] = {"role": role, "content": _content(msg, i)}
        calls = _tool_calls(msg["tool_calls"], i) if msg.get("tool_calls") is not None else []
        if role == "assistant" and calls:
            item["tool_calls"] = calls
        if role == "tool" and msg.get("tool_call_id") is not None:
            if not isinstance(msg["tool_call_id"], str):
                raise OpenAIError(400, f"messages[{i}].tool_call_id must be a string",
                                  param=f"messages[{i}].tool_call_id")  # fmt: skip
            item["tool_call_id"] = msg["tool_call_id"]
        out.append(item)
    if all(m["role"] == "system" for m in out):
        raise OpenAIError(400, "messages hold only system messages: add a user message to "
                          "answer", param="messages")  # fmt: skip
    return out


#: Fields read at any value, by route (each request struct's own); ``DEFAULT_ONLY`` ones too.
CHAT_FIELDS: Final = frozenset(ChatRequest.__struct_fields__)
COMPLETION_FIELDS: Final = frozenset(CompletionRequest.__struct_fields__)
#: Fields accepted only at the value that asks for nothing (what OpenAI does without them).
DEFAULT_ONLY: Final[Mapping[str, tuple[Any, ...]]] = {
    "logprobs": (False,),  # /completions' (an int there): /chat/completions serves it
    "top_logprobs": (0,),
    "logit_bias": ({},),
    "store": (False,),
    "echo": (False,),
    "best_of": (1,),
    "suffix": ("",),
}
#: The most ``top_logprobs`` a request may ask for (OpenAI's bound).
MAX_TOP_LOGPROBS: Final = 20
#: The most choices one request may ask for (``n``).
MAX_CHOICES: Final = 16
#: ``reasoning_effort`` values (handed to the chat template; one without thinking ignores it).
REASONING_EFFORTS: Final = ("none", "minimal", "low", "medium", "high")
RESPONSE_FORMATS: Final = ("text", "json_object", "json_schema")


def check_fields(body: Mapping[str, Any], fields: frozenset[str]) -> None:
    """Refuse, naming it, the first field of ``body`` this server does not act on (OpenAI's
    400): one it does not know, or one it knows only at its default (``DEFAULT_ONLY``). A null
    is as good as the field left out."""
    for name, value in body.items():
        if value is None or name in fields:
            continue
        if name in DEFAULT_ONLY:
            if value in DEFAULT_ONLY[name] and type(value) is type(DEFAULT_ONLY[name][0]):
                continue
            raise OpenAIError(400, f"'{name}' is not supported by this server (only "
                              f"{DEFAULT_ONLY[name][0]!r}).", param=name)  # fmt: skip
        raise OpenAIError(400, f"Unrecognized request argument supplied: {name}", param=name)


def sampling_params(
    max_tokens: int | None,
    temperature: float | None,
    top_p: float | None,
    stop: str | list[str] | None,
    presence_penalty: float | None = None,
    frequency_penalty: float | None = None,
    max_field: str = "max_tokens",
) -> dict[str, Any]:
    """The node params of the sampling fields both routes take, each checked (400 naming it)."""
    params: dict[str, Any] = {}
    if max_tokens is not None:
        if max_tokens < 1:
            raise OpenAIError(400, f"{max_field} must be at least 1", param=max_field)
        params["max_new_tokens"] = max_tokens
    if temperature is not None:
        if not 0 <= temperature <= 2:
            raise OpenAIError(400, "temperature must be between 0 and 2", param="temperature")
        params["temperature"] = temperature
    if top_p is not None:
        if not 0 <= top_p <= 1:
            raise OpenAIError(400, "top_p must be between 0 and 1", param="top_p")
        params["top_p"] = top_p
    for name, value in (("presence_penalty", presence_penalty),
                        ("frequency_penalty", frequency_penalty)):  # fmt: skip
        if value is not None and value != 0:
            if not -2 <= value <= 2:
                raise OpenAIError(400, f"{name} must be between -2 and 2", param=name)
            params[name] = value
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if len(stops) > 4:
        raise OpenAIError(400, "stop takes at most 4 sequences", param="stop")
    if any(s for s in stops):
        params["stop"] = [s for s in stops if s]
    return params


def choices_of(n: int | None) -> int:
    """How many choices ``n`` asks for (checked)."""
    if n is None:
        return 1
    if not 1 <= n <= MAX_CHOICES:
        raise OpenAIError(400, f"n must be between 1 and {MAX_CHOICES}", param="n")
    return n


#: Chat nodes whose ``n`` choices a hidden node of their pack decodes in one batch.
BATCHED_CHOICES: Final = {"text/complete": "text/complete-n"}


def seeded(params: Mapping[str, Any], seed: int | None, count: int) -> list[dict[str, Any]]:
    """``count`` copies of ``params``, choice ``i`` seeded ``seed + i`` (wrapped in the 64-bit
    range); without a seed each run draws its own (the planner draws a negative seed)."""
    if seed is None:
        return [dict(params) for _ in range(count)]
    if seed not in SEED_RANGE:
        raise OpenAIError(400, "seed must be a 64-bit integer (from -2**63 to 2**63 - 1)",
                          param="seed")  # fmt: skip
    low = SEED_RANGE.start
    return [{**params, "seed": (seed + i - low) % 2**64 + low} for i in range(count)]


def _response_format(value: dict[str, Any]) -> dict[str, Any] | None:
    """The node's ``response_format`` (None: plain text), its shape checked."""
    kind = value.get("type")
    if kind not in RESPONSE_FORMATS:
        raise OpenAIError(400, f"response_format.type must be one of {list(RESPONSE_FORMATS)}",
                          param="response_format.type")  # fmt: skip
    if kind == "text":
        return None
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
            raise OpenAIError(400, "response_format.json_schema must be an object with a "
                              "'schema' object", param="response_format.json_schema")  # fmt: skip
        return {"type": kind, "json_schema": {"schema": spec.get("schema") or {}}}
    return {"type": kind}


def _tool_choice(choice: Any, names: list[str]) -> dict[str, Any]:
    """The node params of ``tool_choice`` (``auto``, ``required`` or a named function) when
    tools are given."""
    if choice in (None, "auto"):
        return {}
    if choice == "required":
        return {"tool_choice": "required"}
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(choice, dict) or choice.get("type") != "function" or not name:
        raise OpenAIError(400, "tool_choice must be 'none', 'auto', 'required' or "
                          '{"type": "function", "function": {"name": ...}}',
                          param="tool_choice")  # fmt: skip
    if name not in names:
        raise OpenAIError(400, f"tool_choice names the function {name!r}, which is not among the "
                          f"tools {names}", param="tool_choice")  # fmt: skip
    return {"tool_name": name}


def run_requests(
    req: ChatRequest, node_type: str, base: Mapping[str, Any], raw_tools: Any = None
) -> list[dict[str, Any]]:
    """The ``/v1`` run requests of one chat completion on the chat node ``node_type``, one per
    choice (``n``), with ``base``, the params that select the model (``raw_tools``: the tools
    exactly as sent, so the chat template renders them as the client wrote them)."""
    count = choices_of(req.n)
    max_new = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    field = "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"
    params: dict[str, Any] = {**base, "messages": messages_param(req.messages)}
    params |= sampling_params(max_new, req.temperature, req.top_p, req.stop,
                              req.presence_penalty, req.frequency_penalty, field)  # fmt: skip
    if req.response_format is not None:
        response_format = _response_format(req.response_format)
        if response_format is not None:
            params["response_format"] = response_format
    if req.reasoning_effort is not None:  # a thinking model's thinking on or off
        if req.reasoning_effort not in REASONING_EFFORTS:
            raise OpenAIError(400, f"reasoning_effort must be one of {list(REASONING_EFFORTS)}",
                              param="reasoning_effort")  # fmt: skip
        params["reasoning_effort"] = req.reasoning_effort
    if req.tools and req.tool_choice != "none":
        params["tools"] = (
            raw_tools if isinstance(raw_tools, list) else msgspec.to_builtins(req.tools)
        )
        params |= _tool_choice(req.tool_choice, [t.function.name for t in req.tools])
    elif req.tool_choice not in (None, "none", "auto"):
        raise OpenAIError(400, "tool_choice needs tools", param="tool_choice")
    params |= _logprobs(req.logprobs, req.top_logprobs)
    return choice_graphs(node_type, params, req.seed, count)


def choice_graphs(
    node_type: str, params: Mapping[str, Any], seed: int | None, count: int
) -> list[dict[str, Any]]:
    """The run requests of ``count`` choices of the chat node ``node_type`` (see ``seeded``):
    where a batched node serves the choices of one request (``BATCHED_CHOICES``), its runs,
    which the worker decodes as one batch."""
    batched = BATCHED_CHOICES.get(node_type) if count > 1 else None
    if batched is not None:
        params = {**params, "choices": count}
    return [chat_graph(batched or node_type, p) for p in seeded(params, seed, count)]


def _logprobs(logprobs: bool | None, top: int | None) -> dict[str, Any]:
    """The node params of ``logprobs`` / ``top_logprobs`` (checked as OpenAI does)."""
    if top is not None and not 0 <= top <= MAX_TOP_LOGPROBS:
        raise OpenAIError(400, f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}",
                          param="top_logprobs")  # fmt: skip
    if not logprobs:
        if top:
            raise OpenAIError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
        return {}
    return {"logprobs": True, "top_logprobs": top or 0}


def choice_logprobs(outputs: Mapping[str, str]) -> ChoiceLogprobs:
    """The node's ``logprobs`` output as a choice's ``logprobs``."""
    return ChoiceLogprobs(
        content=[
            TokenLogprob(
                token=t.token,
                logprob=t.logprob,
                bytes=list(t.bytes),
                top_logprobs=[
                    TopLogprob(token=o.token, logprob=o.logprob, bytes=list(o.bytes))
                    for o in t.top_logprobs
                ],
            )
            for t in read_completion(outputs).logprobs
        ]
    )


def run_request(
    req: ChatRequest, node_type: str, base: Mapping[str, Any], raw_tools: Any = None
) -> dict[str, Any]:
    """The ``/v1`` run request of a one-choice chat completion (see ``run_requests``)."""
    return run_requests(req, node_type, base, raw_tools)[0]


def chat_graph(node_type: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The ``/v1`` run request of one call of the chat node ``node_type`` (its id ``NODE_ID``)."""
    return {
        "graph": {
            "schemaVersion": 1,
            "nodes": [{"id": NODE_ID, "type": node_type, "params": dict(params)}],
        },
        "target": NODE_ID,
    }


def outputs_of(service: RunService, state: RunState) -> dict[str, str]:
    """The text outputs of the run's ``NODE_ID`` (one take per output port), by port."""
    out: dict[str, str] = {}
    for take in state.takes:
        record = service.take(take.id)
        data = service.take_text(record) if record is not None else None
        if record is not None and data is not None and take.node_id == NODE_ID:
            out[record.port] = data.decode("utf-8")
    return out


def run_outputs(
    service: RunService, run_id: str, model: str, what: str = "completion"
) -> dict[str, str]:
    """The target's text outputs, from the run's takes (one per output port); the run's
    failure as its OpenAI error (``what`` the run answers: a completion, a response)."""
    state = service.state(run_id)
    if state is not None and state.status == "error":
        raise run_failed(service, state, model)
    if state is None or state.status != "done":
        kind = "cancelled" if state is not None and state.status == "cancelled" else "server_error"
        status = state.status if state is not None else "gone"
        raise OpenAIError(500, f"The {what}'s run {run_id} is {status}", type=kind,
                          headers=NO_RETRY)  # fmt: skip
    out = outputs_of(service, state)
    if "text" not in out:
        raise OpenAIError(500, f"The {what}'s outputs are gone (run {run_id})",
                          type="server_error", headers=NO_RETRY)  # fmt: skip
    return out


def tool_calls(outputs: Mapping[str, str]) -> list[ToolCall]:
    """The node's ``tool_calls`` output as OpenAI tool calls."""
    return [
        ToolCall(id=c.id, function=FunctionCall(name=c.name, arguments=c.arguments))
        for c in read_completion(outputs).tool_calls
    ]


def usage(outputs: Mapping[str, str]) -> Usage:
    """The node's ``usage`` output as OpenAI's."""
    used = read_completion(outputs).usage
    prompt, completion = used.prompt_tokens, used.completion_tokens
    return Usage(prompt_tokens=prompt, completion_tokens=completion,
                 total_tokens=prompt + completion)  # fmt: skip


def total_usage(outputs: Sequence[Mapping[str, str]], choices: int = 1) -> Usage:
    """The usage of a request's runs (in choice order, ``choices`` per prompt): each prompt
    once, every choice's completion."""
    used = [read_completion(out).usage for out in outputs]
    prompt = sum(u.prompt_tokens for u in used[::choices])
    completion = sum(u.completion_tokens for u in used)
    return Usage(prompt_tokens=prompt, completion_tokens=completion,
                 total_tokens=prompt + completion)  # fmt: skip


class Chunks:
    """Builds the stream's chunks for one completion (all with one id, created and model)."""

    def __init__(self, completion_id: str, created: int, model: str) -> None:
        self.id, self.created, self.model = completion_id, created, model

    def chunk(
        self,
        delta: Delta,
        finish: str | None = None,
        usage: Usage | None = None,
        index: int = 0,
        logprobs: ChoiceLogprobs | None = None,
    ) -> bytes:
        body = ChatChunk(
            id=self.id,
            created=self.created,
            model=self.model,
            choices=[
                ChunkChoice(index=index, delta=delta, finish_reason=finish, logprobs=logprobs)
            ],
            usage=usage,
        )
        return b"data: " + msgspec.json.encode(body) + b"\n\n"

    def usage_chunk(self, used: Usage) -> bytes:
        body = ChatChunk(id=self.id, created=self.created, model=self.model, choices=[],
                         usage=used)  # fmt: skip
        return b"data: " + msgspec.json.encode(body) + b"\n\n"

    def tool_call_chunks(self, calls: list[ToolCall], index: int = 0) -> Iterator[bytes]:
        """Each call as OpenAI streams it: index, id, type and name first, then its arguments
        in fragments."""
        for i, call in enumerate(calls):
            name = FunctionCall(name=call.function.name, arguments="")
            head = ToolCallDelta(index=i, id=call.id, type="function", function=name)
            yield self.chunk(Delta(tool_calls=[head]), index=index)
            args = call.function.arguments or ""
            for start in range(0, len(args), ARGUMENT_PIECE):
                piece = ToolCallDelta(
                    index=i, function=FunctionCall(arguments=args[start : start + ARGUMENT_PIECE])
                )
                yield self.chunk(Delta(tool_calls=[piece]), index=index)


DONE: Final = b"data: [DONE]\n\n"
