"""``text/complete``: any causal LM, streamed, with thinking and tool calls split out (a
``ChatCompletion``: the SDK declares its prompt input and its outputs)."""

from __future__ import annotations

from typing import Annotated, Any

from inline_sdk import Context, Param
from inline_sdk.chat import ChatCompletion, Completion, TokenLogprob, TopLogprob, Usage

from ._card import budget, cache_length
from ._choices import Row, choose, sampler
from ._generate import IncrementalDecoder, LogprobRecorder, end_ids, penalties, run_generate
from ._grammar import check_format, ebnf, logits_processor, tool_call_ebnf, tool_call_schema
from ._load import find_model, load
from ._parse import THINK_OPEN, ReplyParser

ROLES = frozenset({"system", "user", "assistant", "tool"})
#: ``reasoning_effort`` values that turn a thinking model's thinking off.
NO_THINKING = frozenset({"none", "minimal"})


def build_messages(
    messages: list[dict[str, Any]], system: str, prompt: str | None
) -> list[dict[str, Any]]:
    """The conversation: ``system`` first (unless the messages start with one), then the
    messages, then ``prompt`` as the last user message. Raises ``ValueError`` naming the path."""
    out: list[dict[str, Any]] = []
    for i, msg in enumerate(messages):
        role = msg.get("role")
        if role not in ROLES:
            raise ValueError(
                f"$.params.messages[{i}].role must be one of {sorted(ROLES)}, got {role!r}"
            )
        content = msg.get("content")
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise ValueError(f"$.params.messages[{i}].content must be text, got {content!r:.60}")
        out.append({**msg, "content": content})
    if system and not (out and out[0]["role"] == "system"):
        out.insert(0, {"role": "system", "content": system})
    if prompt:
        out.append({"role": "user", "content": prompt})
    if not any(m["role"] != "system" for m in out):
        raise ValueError("text/complete needs a prompt (the input) or messages (a param)")
    return out


def normalize_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI-style function specs (a bare ``{name, parameters}`` is wrapped)."""
    out = []
    for i, tool in enumerate(tools):
        spec = tool.get("function", tool) if tool.get("type", "function") == "function" else None
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise ValueError(f"$.params.tools[{i}] must be a function spec with a name")
        out.append({"type": "function", "function": spec})
    return out


def render_prompt(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    template: bool = True,
    reasoning_effort: str = "",
) -> str:
    """The prompt through the tokenizer's own chat template (``tools=`` when tools are given);
    without ``template``, the messages' text as it is, joined (a raw completion). A
    ``reasoning_effort`` reaches the template as itself (gpt-oss reads it) and as
    ``enable_thinking`` (Qwen3: off for ``none`` and ``minimal``); templates ignore what they
    do not read."""
    if not template:
        return "".join(m["content"] for m in messages)
    if getattr(tokenizer, "chat_template", None):
        effort: dict[str, Any] = {}
        if reasoning_effort:
            thinking = reasoning_effort not in NO_THINKING
            effort = {"reasoning_effort": reasoning_effort, "enable_thinking": thinking}
        return tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=True, tokenize=False, **effort
        )
    # a base model without a template: the conversation as plain text
    return "\n\n".join(m["content"] for m in messages) + "\n\n"


class Complete(
    ChatCompletion,
    type="text/complete",
    title="Complete (LLM)",
    category="Text",
    icon="message",
    version="1.2.0",
):
    """A causal LM's reply: content and thinking streamed, tool calls parsed; a
    ``response_format`` and a forced tool call (``tool_choice``, ``tool_name``) by constrained
    decoding; ``template`` off for a raw completion."""

    #: Whether its calls are the choices of one request, decoded in one batch (``CompleteN``).
    batches = False

    def warm(self, ctx: Context, *, model: str) -> None:
        """Load the model the pick names (a deployment's warm-up)."""
        ctx.phase("loading", "Loading model…")
        load(ctx.memory, find_model(ctx.models_dir, model, "causal"), "causal")

    def complete(
        self,
        ctx: Context,
        prompt: str | None,
        *,
        model: Annotated[
            str, Param("Model", widget="select", options_from="llm", architecture="causal")
        ] = "",
        system: Annotated[str, Param("System prompt", widget="textarea")] = "",
        max_new_tokens: Annotated[int, Param("Max new tokens", min=1, max=131072)] = 512,
        temperature: Annotated[
            float, Param("Temperature (0 = greedy)", min=0.0, max=2.0, step=0.05)
        ] = 0.7,
        top_p: Annotated[float, Param("Top p", min=0.0, max=1.0, step=0.05, advanced=True)] = 1.0,
        seed: Annotated[int, Param("Seed (-1 = random)", widget="seed")] = -1,
        messages: Annotated[list[dict[str, Any]], Param("Messages", internal=True)] = [],  # noqa: B006
        tools: Annotated[list[dict[str, Any]], Param("Tools", internal=True)] = [],  # noqa: B006
        stop: Annotated[list[str], Param("Stop strings", internal=True)] = [],  # noqa: B006
        response_format: Annotated[dict[str, Any], Param("Response format", internal=True)] = {},  # noqa: B006
        presence_penalty: Annotated[
            float, Param("Presence penalty", min=-2.0, max=2.0, step=0.1, advanced=True)
        ] = 0.0,
        frequency_penalty: Annotated[
            float, Param("Frequency penalty", min=-2.0, max=2.0, step=0.1, advanced=True)
        ] = 0.0,
        template: Annotated[bool, Param("Chat template", internal=True)] = True,
        tool_choice: Annotated[
            str, Param("Tool choice", options=["auto", "required"], internal=True)
        ] = "auto",
        tool_name: Annotated[str, Param("Tool to call", internal=True)] = "",
        reasoning_effort: Annotated[
            str,
            Param(
                "Reasoning effort",
                options=["", "none", "minimal", "low", "medium", "high"],
                advanced=True,
            ),
        ] = "",
        logprobs: Annotated[bool, Param("Log-probabilities", internal=True)] = False,
        top_logprobs: Annotated[
            int, Param("Top log-probabilities", min=0, max=20, internal=True)
        ] = 0,
        choices: Annotated[
            int, Param("Choices of the request (batched together)", min=1, max=16, internal=True)
        ] = 1,
    ) -> Completion:
        conversation = build_messages(messages, "" if not template else system, prompt)
        specs = normalize_tools(tools)
        schema = check_format(response_format)
        grammar = ebnf(schema) if schema is not None else None
        if grammar is None and specs and (tool_choice == "required" or tool_name):
            grammar = tool_call_ebnf(tool_call_schema(specs, tool_name))
        plain = schema is not None or not template
        ctx.phase("loading", "Loading model…")
        loaded = load(ctx.memory, find_model(ctx.models_dir, model, "causal"), "causal")
        tokenizer = loaded.tokenizer
        text = render_prompt(tokenizer, conversation, specs, template, reasoning_effort)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        total = cache_length(
            loaded.card, getattr(loaded.model.config, "max_position_embeddings", None)
        )
        fit = budget(total, len(ids), max_new_tokens)
        if fit.warning:
            ctx.log.warning("%s: %s", loaded.folder.name, fit.warning)
            ids = ids[len(ids) - fit.prompt :]
        import torch

        inputs = {
            "input_ids": torch.tensor([ids], dtype=torch.long),
            "attention_mask": torch.ones((1, len(ids)), dtype=torch.long),
        }
        parser = ReplyParser(
            emit=lambda section, piece: ctx.stream(
                "text" if section == "content" else section, piece
            ),
            stops=[s for s in stop if s],
            log=ctx.log,
            thinking_open=template and text.rstrip().endswith(THINK_OPEN),
            plain=plain,
        )
        decoder = IncrementalDecoder(tokenizer)
        ctx.phase("generate", "Generating…")
        recorders: list[LogprobRecorder] = []

        def recording() -> LogprobRecorder | None:  # one per try (a compile retry starts anew)
            if not logprobs:
                return None
            recorders[:] = [LogprobRecorder(top_logprobs)]
            return recorders[0]

        def on_token(token: int) -> None:
            ctx.check_cancelled()  # cancel works between tokens
            parser.feed(decoder.push(token))

        def processors() -> list[Any]:
            return [
                recording(),
                penalties(presence_penalty, frequency_penalty, len(ids)),
                logits_processor(loaded, grammar) if grammar is not None else None,
            ]

        if self.batches:  # one of a request's choices: decoded in a batch with the others
            key = (id(loaded), tuple(ids), fit.reply, total, temperature, top_p, grammar,
                   presence_penalty, frequency_penalty, logprobs, top_logprobs,
                   choices)  # fmt: skip
            generated = choose(ctx, Row(
                loaded=loaded, ids=ids, key=key, choices=choices, max_new_tokens=fit.reply,
                cache_length=total,
                processors=lambda: [*processors(), sampler(loaded, temperature, top_p, seed)],
                on_token=lambda token: parser.feed(decoder.push(token)),
                stop=lambda: ctx.cancelled or parser.stopped,
            ))  # fmt: skip
        else:
            out = run_generate(
                loaded,
                inputs,
                seed=seed,
                stop=lambda: ctx.cancelled or parser.stopped,
                on_token=on_token,
                cache_length=total,
                max_new_tokens=fit.reply,
                processors=lambda: [*processors(), sampler(loaded, temperature, top_p, seed)],
                do_sample=False,  # the sampler draws (greedy decoding takes its token)
                num_beams=1,
            )
            generated = out[0, len(ids) :].tolist()
        ctx.check_cancelled()
        parser.finish()
        eos_ids = end_ids(loaded)
        hit_eos = bool(generated) and generated[-1] in eos_ids
        cut = not parser.stopped and not hit_eos and len(generated) >= fit.reply
        scored: tuple[TokenLogprob, ...] = ()
        if recorders:
            recorders[0].finish(generated)
            scored = token_logprobs(tokenizer, recorders[0], eos_ids)
        return Completion(  # with tool calls the base reports finish_reason "tool_calls"
            text=parser.text,
            thinking=parser.reasoning,
            tool_calls=tuple(parser.calls),
            finish_reason="length" if cut else "stop",
            usage=Usage(prompt_tokens=len(ids), completion_tokens=len(generated)),
            logprobs=scored,
        )


def token_logprobs(
    tokenizer: Any, recorded: LogprobRecorder, eos_ids: set[int]
) -> tuple[TokenLogprob, ...]:
    """What ``recorded`` kept as the SDK's ``TokenLogprob`` entries (the end-of-sequence token,
    which is no text, left out)."""

    def text(token: int) -> str:
        return tokenizer.decode([token])

    out = []
    for token, logprob, top in zip(recorded.tokens, recorded.logprobs, recorded.tops, strict=True):
        if token in eos_ids:
            continue
        piece = text(token)
        out.append(
            TokenLogprob(
                token=piece,
                logprob=logprob,
                bytes=tuple(piece.encode()),
                top_logprobs=tuple(
                    TopLogprob(token=text(t), logprob=v, bytes=tuple(text(t).encode()))
                    for t, v in top
                ),
            )
        )
    return tuple(out)


class CompleteN(
    Complete,
    type="text/complete-n",
    title="Complete (LLM), n choices",
    category="Text",
    icon="message",
    version="1.0.0",
    hidden=True,
    concurrency=16,
):
    """``text/complete`` for the ``n`` choices of one request (the OpenAI routes' ``n``): the
    host runs each choice as a call of this node, with ``choices=n``, and the worker decodes the
    calls of one request in one batched ``generate`` (``_choices``)."""

    batches = True
