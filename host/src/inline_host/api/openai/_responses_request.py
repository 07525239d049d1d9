"""A Responses API request read into the chat completion it is (``_chat.run_request`` makes
its run).

``instructions`` is the system message; ``input`` a string (one user message) or a list of
items: messages with ``input_text`` / ``output_text`` parts, ``function_call`` items as the
assistant's tool calls (one turn's together), ``function_call_output`` items as tool results;
``reasoning`` items of an earlier output are left out (chat templates drop earlier thinking).
Function tools become the chat's tools; ``text.format`` its ``response_format``. What a
stateless server cannot do, and any field the chat request has no room for, is a 400 naming
the field.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from ._responses_schemas import REFUSED, SERVED, ResponsesRequest
from ._schemas import ChatRequest, OpenAIError

__all__ = ("chat_request", "chat_tools", "messages_of", "parse_request")

_decode_json = msgspec.json.Decoder()
#: The chat request's fields, to refuse what the chat path cannot do rather than ignore it.
CHAT_FIELDS: Final = frozenset(ChatRequest.__struct_fields__)


def _bad(message: str, param: str | None) -> OpenAIError:
    return OpenAIError(400, message, param=param)


def parse_request(raw: bytes) -> ResponsesRequest:
    """The body, its keys checked (see ``_responses_schemas``); raises ``OpenAIError``."""
    try:
        body = _decode_json.decode(raw)
    except msgspec.DecodeError as exc:
        raise _bad(f"The body is not valid JSON: {exc}", None) from None
    if not isinstance(body, dict):
        raise _bad("The body must be a JSON object", None)
    for key in body:
        if key in REFUSED:
            raise _bad(f"'{key}': {REFUSED[key]}", key)
        if key not in SERVED:
            raise _bad(f"Unknown parameter: '{key}'.", key)
    try:
        req = msgspec.convert(body, ResponsesRequest)
    except msgspec.ValidationError as exc:
        message, _, at = str(exc).rpartition(" - at `")
        param = at.rstrip("`").removeprefix("$.") if message else None
        raise _bad(message or str(exc), param) from None
    _refuse_state(req)
    return req


def _refuse_state(req: ResponsesRequest) -> None:
    """What a stateless server cannot do, refused by name."""
    stateless = "this server keeps no responses: send the whole conversation in 'input'"
    if req.store:
        raise _bad(f"'store' must be false: {stateless}", "store")
    if req.previous_response_id is not None:
        raise _bad(f"'previous_response_id' is not supported: {stateless}",
                   "previous_response_id")  # fmt: skip
    if req.conversation is not None:
        raise _bad(f"'conversation' is not supported: {stateless}", "conversation")
    if req.background:
        raise _bad("'background' must be false: responses are answered on the request",
                   "background")  # fmt: skip
    if req.include:
        raise _bad(f"'include' is not supported (got {req.include!r})", "include")
    if req.truncation not in (None, "disabled"):
        raise _bad("'truncation' must be 'disabled': the prompt is never cut to fit",
                   "truncation")  # fmt: skip
    if req.service_tier not in (None, "auto", "default"):
        raise _bad(f"'service_tier' {req.service_tier!r} is not served (only 'auto')",
                   "service_tier")  # fmt: skip


def _text_of(content: Any, where: str, kinds: tuple[str, ...]) -> str:
    """A message's content: a string, or text parts of ``kinds`` joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(f"{where} must be a string or a list of content parts", where)
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in kinds:
            raise _bad(f"{where}[{j}]: a part of type {kind!r} is not supported (only "
                       f"{' and '.join(kinds)})", f"{where}[{j}].type")  # fmt: skip
        text = part.get("text")
        if not isinstance(text, str):
            raise _bad(f"{where}[{j}].text must be a string", f"{where}[{j}].text")
        texts.append(text)
    return "".join(texts)


def _string(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or (key != "arguments" and not value):
        raise _bad(f"{where}.{key} must be a non-empty string", f"{where}.{key}")
    return value


def messages_of(req: ResponsesRequest) -> list[dict[str, Any]]:
    """The chat messages of ``instructions`` and ``input`` (see the module docstring)."""
    out: list[dict[str, Any]] = []
    if req.instructions:
        out.append({"role": "system", "content": req.instructions})
    if isinstance(req.input, str):
        return [*out, {"role": "user", "content": req.input}]
    for i, item in enumerate(req.input):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise _bad(f"{where} must be an object", where)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise _bad(f"{where}.role {role!r} is not supported", f"{where}.role")
            kinds = ("output_text",) if role == "assistant" else ("input_text",)
            text = _text_of(item.get("content"), f"{where}.content", kinds)
            out.append({"role": "system" if role == "developer" else role, "content": text})
        elif kind == "function_call":
            call = {"id": _string(item, "call_id", where), "type": "function",
                    "function": {"name": _string(item, "name", where),
                                 "arguments": _string(item, "arguments", where)}}  # fmt: skip
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)  # one turn's calls together
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = _text_of(output, f"{where}.output", ("input_text",))
            out.append({"role": "tool", "content": text,
                        "tool_call_id": _string(item, "call_id", where)})  # fmt: skip
        elif kind == "reasoning":
            continue  # earlier thinking: chat templates leave it out of the prompt
        else:
            raise _bad(f"{where}: an input item of type {kind!r} is not supported", f"{where}.type")
    if not out:
        raise _bad("'input' must not be empty", "input")
    return out


def chat_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """The Responses function tools as chat tools (built-in tools are refused by name)."""
    if not tools:
        return None
    out = []
    for i, tool in enumerate(tools):
        kind = tool.get("type")
        if kind != "function":
            raise _bad(f"tools[{i}]: a tool of type {kind!r} is not supported here (only "
                       "'function')", f"tools[{i}].type")  # fmt: skip
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise _bad(f"tools[{i}].name must be a non-empty string", f"tools[{i}].name")
        function: dict[str, Any] = {"name": name}
        for key in ("description", "parameters", "strict"):
            if tool.get(key) is not None:
                function[key] = tool[key]
        out.append({"type": "function", "function": function})
    return out


def _chat_tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    if choice is None or isinstance(choice, str):
        if choice not in (None, "auto", "none", "required"):
            raise _bad(f"'tool_choice' {choice!r} is not one of auto, none, required",
                       "tool_choice")  # fmt: skip
        return choice
    if choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise _bad("'tool_choice' must be auto, none, required or {type: function, name}",
               "tool_choice")  # fmt: skip


def _text_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    """``text.format`` as the chat's ``response_format`` (None: plain text)."""
    fmt = (text or {}).get("format")
    if fmt is None or (isinstance(fmt, dict) and fmt.get("type") == "text"):
        return None
    if not isinstance(fmt, dict):
        raise _bad("'text.format' must be an object", "text.format")
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if fmt.get("type") == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    raise _bad(f"'text.format.type' {fmt.get('type')!r} is not supported", "text.format.type")


def chat_request(req: ResponsesRequest) -> tuple[ChatRequest, list[dict[str, Any]] | None]:
    """The chat request ``req`` is, and its tools in the chat's shape."""
    tools = chat_tools(req.tools)
    if req.max_output_tokens is not None and req.max_output_tokens < 1:
        raise _bad("'max_output_tokens' must be at least 1", "max_output_tokens")
    body: dict[str, Any] = {"model": req.model, "messages": messages_of(req)}
    wanted: dict[str, tuple[Any, str]] = {  # chat field -> (value, the request's field)
        "tools": (tools, "tools"),
        "tool_choice": (_chat_tool_choice(req.tool_choice), "tool_choice"),
        "max_completion_tokens": (req.max_output_tokens, "max_output_tokens"),
        "temperature": (req.temperature, "temperature"),
        "top_p": (req.top_p, "top_p"),
        "response_format": (_text_format(req.text), "text.format"),
        "reasoning_effort": ((req.reasoning or {}).get("effort"), "reasoning.effort"),
        "user": (req.user, "user"),
    }
    if req.parallel_tool_calls is not None and req.tools:
        wanted["parallel_tool_calls"] = (req.parallel_tool_calls, "parallel_tool_calls")
    if (req.reasoning or {}).get("summary") is not None:
        raise _bad("'reasoning.summary' is not supported: the model's own reasoning is "
                   "answered whole", "reasoning.summary")  # fmt: skip
    for field, (value, named) in wanted.items():
        if value is None:
            continue
        if field not in CHAT_FIELDS:
            raise _bad(f"'{named}' is not supported by this server", named)
        body[field] = value
    try:
        return msgspec.convert(body, ChatRequest), tools
    except msgspec.ValidationError as exc:
        raise _bad(f"Invalid request: {exc}", None) from None
