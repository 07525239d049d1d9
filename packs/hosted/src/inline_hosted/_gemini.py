"""``google/gemini-complete`` and ``google/gemini-image``: Gemini through Google's official
``google-genai`` SDK (streamGenerateContent for text, generateContent for pictures)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from inline_sdk import Context, Image, Output, Param, Port, node
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

NODE = "google/gemini-complete"

PROVIDER = "Gemini"
BASE_URL_ENV = "INLINE_GEMINI_BASE_URL"
EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp"}


def _status_of(exc: BaseException) -> tuple[int | None, str, float | None] | None:
    from google.genai import errors

    if isinstance(exc, errors.APIError):
        headers = getattr(exc.response, "headers", None)
        message = exc.message or str(exc.details or exc)
        if exc.status:
            message = f"{exc.status}: {message}"
        return exc.code, message, retry_after_of(headers)
    if type(exc).__module__.startswith(("httpx", "httpcore")):
        return None, f"cannot reach the API: {exc}", None
    return None


def _client(ctx: Context, secret: str) -> Any:
    from google import genai
    from google.genai import types

    options = types.HttpOptions(
        base_url=base_url(BASE_URL_ENV), retry_options=types.HttpRetryOptions(attempts=1)
    )
    return genai.Client(api_key=ctx.secret(secret), http_options=options)


def to_gemini(messages: list[dict[str, Any]]) -> tuple[str, list[Any]]:
    """OpenAI-style messages as Gemini's (system instruction, contents)."""
    from google.genai import types

    system: list[str] = []
    contents: list[types.Content] = []
    names: dict[str, str] = {}
    for i, m in enumerate(messages):
        role = m.get("role")
        text = text_of(m.get("content"))
        if role == "system":
            system.append(text)
        elif role == "user":
            contents.append(types.Content(role="user", parts=[types.Part(text=text)]))
        elif role == "assistant":
            parts = [types.Part(text=text)] if text else []
            for call in tool_calls_of(m, i, NODE):
                cid = call["id"]
                names[cid] = call["name"]
                fc = types.FunctionCall(id=cid or None, name=call["name"], args=call["arguments"])
                parts.append(types.Part(function_call=fc))
            contents.append(types.Content(role="model", parts=parts))
        elif role == "tool":
            cid = str(m.get("tool_call_id") or "")
            fr = types.FunctionResponse(
                id=cid or None,
                name=str(m.get("name") or names.get(cid, "")),
                response={"result": text},
            )
            contents.append(types.Content(role="user", parts=[types.Part(function_response=fr)]))
        else:
            raise refused(NODE, f"$.messages[{i}].role", f"unknown role {role!r}")
    return "\n\n".join(s for s in system if s), contents


def _finish(reason: Any) -> str:
    name = str(getattr(reason, "name", reason) or "")
    return "length" if name == "MAX_TOKENS" else "stop"


class GeminiComplete(
    ChatCompletion, type=NODE, title="Gemini (Google)", icon="cloud", concurrency=8
):
    """Gemini through Google's official SDK (a ``ChatCompletion``)."""

    def complete(
        self,
        ctx: Context,
        prompt: str | None,
        *,
        model: Annotated[str, Param("Model")] = "gemini-2.5-flash",
        messages: Messages = [],  # noqa: B006
        system: System = "",
        max_new_tokens: Annotated[int, Param("Max new tokens", min=1, max=65536)] = 512,
        temperature: Annotated[float, Param("Temperature", min=0, max=2, step=0.05)] = 0.7,
        top_p: TopP = 1.0,
        seed: Seed = -1,
        tools: Tools = [],  # noqa: B006
        stop: Stop = [],  # noqa: B006
        response_format: ResponseFormat = {},  # noqa: B006
        api_key_secret: Annotated[str, Param("API key secret", advanced=True)] = "GEMINI_API_KEY",
    ) -> Completion:
        """Complete the conversation with Gemini; text and thought summaries stream as they come;
        function calls become ``tool_calls``."""
        from google.genai import types

        wanted = json_format(NODE, response_format)  # JSON mode, with a schema or not
        client = _client(ctx, api_key_secret)
        sys_text, contents = to_gemini(user_messages(messages, prompt, NODE))
        if system:
            sys_text = f"{system}\n\n{sys_text}" if sys_text else system
        config = types.GenerateContentConfig(
            system_instruction=sys_text or None,
            max_output_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p if top_p < 1.0 else None,
            seed=seed if seed >= 0 else None,
            stop_sequences=list(stop) or None,
            tools=[
                types.Tool(
                    function_declarations=[
                        types.FunctionDeclaration(
                            name=f["name"],
                            description=f["description"],
                            parameters_json_schema=f["parameters"],
                        )
                        for f in function_specs(tools)
                    ]
                )
            ]
            if tools
            else None,
            thinking_config=types.ThinkingConfig(include_thoughts=True),
            response_mime_type="application/json" if wanted else None,
            response_json_schema=wanted[1] if wanted else None,
        )
        out = Streamed(ctx)

        def attempt() -> str:
            reason: Any = None
            count = 0
            for chunk in client.models.generate_content_stream(
                model=model, contents=contents, config=config
            ):
                ctx.check_cancelled()
                used = chunk.usage_metadata
                if used is not None:
                    out.count(used.prompt_token_count, used.candidates_token_count)
                for cand in chunk.candidates or []:
                    reason = cand.finish_reason or reason
                    for part in (cand.content.parts if cand.content else None) or []:
                        if part.function_call is not None:
                            count += 1
                            fc = part.function_call
                            out.add_tool_call(
                                fc.id or f"call_{count}", fc.name or "", fc.args or {}
                            )
                        elif part.text:
                            (out.add_thinking if part.thought else out.add_text)(part.text)
            return _finish(reason)

        reason = cancellable(
            ctx, lambda: with_retries(ctx, attempt, _status_of, PROVIDER, lambda: not out.started)
        )
        return out.result(reason)


@node("google/gemini-image", title="Gemini Image (Google)", category="Image", icon="cloud",
      output_kind="image", concurrency=4)  # fmt: skip
def gemini_image(
    ctx: Context,
    prompt: Annotated[str, Port("Prompt")],
    *,
    model: Annotated[str, Param("Model")] = "gemini-3-pro-image-preview",
    size: Annotated[Literal["1K", "2K", "4K"], Param("Size")] = "1K",
    seed: Annotated[int, Param("Seed", widget="seed")] = -1,
    api_key_secret: Annotated[str, Param("API key secret", advanced=True)] = "GEMINI_API_KEY",
) -> Annotated[Image, Output("image", "Image")]:
    """A square picture of ``prompt``: ``size`` picks the tier; ``seed`` is passed on."""
    from google.genai import types

    client = _client(ctx, api_key_secret)
    config = types.GenerateContentConfig(
        response_modalities=["IMAGE"],
        image_config=types.ImageConfig(aspect_ratio="1:1", image_size=size),
        seed=seed if seed >= 0 else None,
    )
    ctx.phase("generate", f"asking {model}")

    def attempt() -> Any:
        return client.models.generate_content(model=model, contents=prompt, config=config)

    reply = cancellable(ctx, lambda: with_retries(ctx, attempt, _status_of, PROVIDER))
    for cand in reply.candidates or []:
        for part in (cand.content.parts if cand.content else None) or []:
            blob = part.inline_data
            if blob is not None and blob.data and str(blob.mime_type).startswith("image/"):
                params = {"model": model, "size": size, "seed": seed, "prompt": prompt}
                ext = EXTENSIONS.get(str(blob.mime_type), "png")
                return Image(bytes(blob.data), ext=ext, params=params)
    texts = [
        p.text for c in reply.candidates or [] for p in (c.content.parts or []) if p.text
    ] if reply.candidates else []  # fmt: skip
    why = f": it said {' '.join(texts)[:300]!r}" if texts else ""
    raise UpstreamError(PROVIDER, 200, f"the reply holds no image{why}")
