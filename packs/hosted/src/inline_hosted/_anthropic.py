"""``anthropic/complete``: Claude through Anthropic's official SDK, streamed Messages."""

from __future__ import annotations

import json
from typing import Annotated, Any

from inline_sdk import Context, Param
from inline_sdk.chat import ChatCompletion, Completion

from ._common import (
    Messages,
    ResponseFormat,
    Seed,
    Stop,
    Streamed,
    System,
    Tools,
    TopP,
    UpstreamError,
    base_url,
    cancellable,
    function_specs,
    json_format,
    refused,
    retry_after_of,
    text_of,
    tool_calls_of,
    user_messages,
    with_retries,
)

NODE = "anthropic/complete"
PROVIDER = "Anthropic"
BASE_URL_ENV = "INLINE_ANTHROPIC_BASE_URL"
FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
}


def _status_of(exc: BaseException) -> tuple[int | None, str, float | None] | None:
    import anthropic

    if isinstance(exc, anthropic.APIStatusError):
        body = exc.body if isinstance(exc.body, dict) else {}
        err = body.get("error") if isinstance(body.get("error"), dict) else body
        message = str(err.get("message") or exc.message) if isinstance(err, dict) else exc.message
        return exc.status_code, message, retry_after_of(exc.response.headers)
    if isinstance(exc, anthropic.APIConnectionError):
        return None, f"cannot reach the API: {exc}", None
    return None


def to_anthropic(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """OpenAI-style messages as Anthropic's (system text, messages with content blocks)."""
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "system":
            system.append(text_of(m.get("content")))
        elif role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": str(m.get("tool_call_id") or ""),
                "content": text_of(m.get("content")),
            }
            out.append({"role": "user", "content": [block]})
        elif role == "assistant" and m.get("tool_calls"):
            blocks: list[dict[str, Any]] = []
            if text_of(m.get("content")):
                blocks.append({"type": "text", "text": text_of(m.get("content"))})
            for call in tool_calls_of(m, i, NODE):
                blocks.append(
                    {"type": "tool_use", "id": call["id"], "name": call["name"],
                     "input": call["arguments"]}
                )  # fmt: skip
            out.append({"role": "assistant", "content": blocks})
        elif role in ("user", "assistant"):
            out.append({"role": role, "content": text_of(m.get("content"))})
        else:
            raise refused(NODE, f"$.messages[{i}].role", f"unknown role {role!r}")
    return "\n\n".join(s for s in system if s), out


class AnthropicComplete(
    ChatCompletion, type=NODE, title="Claude (Anthropic)", icon="cloud", concurrency=8
):
    """Claude through Anthropic's official SDK (a ``ChatCompletion``)."""

    def complete(
        self,
        ctx: Context,
        prompt: str | None,
        *,
        model: Annotated[str, Param("Model")] = "claude-sonnet-4-5",
        messages: Messages = [],  # noqa: B006
        system: System = "",
        max_new_tokens: Annotated[int, Param("Max new tokens", min=1, max=128000)] = 512,
        temperature: Annotated[float, Param("Temperature", min=0, max=1, step=0.05)] = 0.7,
        top_p: TopP = 1.0,
        seed: Seed = -1,
        tools: Tools = [],  # noqa: B006
        stop: Stop = [],  # noqa: B006
        response_format: ResponseFormat = {},  # noqa: B006
        thinking_budget: Annotated[
            int, Param("Thinking budget (tokens, 0: off)", min=0, advanced=True)
        ] = 0,
        api_key_secret: Annotated[
            str, Param("API key secret", advanced=True)
        ] = "ANTHROPIC_API_KEY",
    ) -> Completion:
        """Complete the conversation with Claude; text and thinking stream as they come.

        The current Messages API (SDK 2) takes no seed, temperature or top_p: they are accepted for
        the shape ``text/complete`` shares, and not sent."""
        import anthropic

        key = ctx.secret(api_key_secret)
        sys_text, convo = to_anthropic(user_messages(messages, prompt, NODE))
        if system:
            sys_text = f"{system}\n\n{sys_text}" if sys_text else system
        kwargs: dict[str, Any] = {"model": model, "max_tokens": max_new_tokens, "messages": convo}
        if sys_text:
            kwargs["system"] = sys_text
        if thinking_budget > 0:
            kwargs["thinking"] = {"type": "enabled", "budget_tokens": thinking_budget}
        if stop:
            kwargs["stop_sequences"] = list(stop)
        wanted = json_format(NODE, response_format)
        if wanted is not None and wanted[1] is None:
            raise refused(NODE, "$.response_format", "Claude's structured output takes a JSON "
                          "schema: send {'type': 'json_schema', 'json_schema': {'schema': "
                          "{...}}}, not json_object")  # fmt: skip
        if wanted is not None:  # structured output, decoded by Anthropic against the schema
            kwargs["output_config"] = {"format": {"type": "json_schema", "schema": wanted[1]}}
        if tools:
            kwargs["tools"] = [
                {
                    "name": f["name"],
                    "description": f["description"],
                    "input_schema": f["parameters"],
                }
                for f in function_specs(tools)
            ]
        client = anthropic.Anthropic(api_key=key, base_url=base_url(BASE_URL_ENV), max_retries=0)
        out = Streamed(ctx)

        def attempt() -> str:
            with client.messages.stream(**kwargs) as stream:
                for event in stream:
                    ctx.check_cancelled()
                    if event.type != "content_block_delta":
                        continue
                    delta = event.delta
                    if delta.type == "text_delta":
                        out.add_text(delta.text)
                    elif delta.type == "thinking_delta":
                        out.add_thinking(delta.thinking)
                final = stream.get_final_message()
            usage = getattr(final, "usage", None)
            out.count(getattr(usage, "input_tokens", None), getattr(usage, "output_tokens", None))
            for block in final.content:
                if block.type == "tool_use":
                    out.add_tool_call(block.id, block.name, json.dumps(block.input))
            return FINISH.get(str(final.stop_reason), "stop")

        try:
            reason = cancellable(
                ctx,
                lambda: with_retries(ctx, attempt, _status_of, PROVIDER, lambda: not out.started),
            )
        except UpstreamError:
            raise
        except anthropic.AnthropicError as exc:
            raise UpstreamError(PROVIDER, None, str(exc)) from None
        return out.result(reason)
