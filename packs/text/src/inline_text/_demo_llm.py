"""Tiny language models with random weights, built locally (no download): what
``inline demo models`` writes and what the text tests run on. Run in the text pack's venv.

- ``build_qwen``: a Qwen3-style causal LM (``Qwen3ForCausalLM``, random init) with a byte-level
  BPE tokenizer trained here and a chat template that renders ``tools`` the Hermes/Qwen way. A
  few hundred optimiser steps teach it two replies, so greedy decoding is peaky (no ties) and
  meaningful: asked with tools it thinks, then calls ``get_weather`` in a ``<tool_call>`` block;
  asked without, it thinks, then answers in plain text. Optionally the same shape untrained
  (it never stops by itself), 8192 positions.
- ``build_t5``: a tiny ``T5ForConditionalGeneration`` (random weights) with its own tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

SEED = 1234
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
TOOL_REPLY = (
    "<think>\nThe user wants the weather. I will call the tool.\n</think>\n\n"
    "Let me check.<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
    "</tool_call>"
)
PLAIN_REPLY = (
    "<think>\nA greeting. Be brief.\n</think>\n\nHello! The sky is blue and the sea is calm."
)
CORPUS = [
    "the quick brown fox jumps over the lazy dog", "What is the weather in Paris?",
    "Hello there, how are you today?", "You are a helpful assistant.", TOOL_REPLY, PLAIN_REPLY,
    json.dumps(TOOLS), "summarize: a long text about the sea and the sky", "translate: hello world",
    "<tools></tools> <tool_response></tool_response> function call arguments name",
]  # fmt: skip
# Qwen3's template, reduced: the system prompt lists tools in <tools>, the assistant's calls are
# <tool_call> blocks, tool results come back as <tool_response> in a user turn.
CHAT_TEMPLATE = r"""
{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %}
{{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n<tools>" }}
{%- for tool in tools %}{{- "\n" }}{{- tool | tojson }}{%- endfor %}
{{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags.<|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant\n' + (message.content or '') }}
{%- for call in message.tool_calls or [] %}
{%- set fn = call.function if call.function is defined else call %}
{{- '<tool_call>\n{"name": "' + fn.name + '", "arguments": ' }}
{%- if fn.arguments is string %}{{- fn.arguments }}{%- else %}{{- fn.arguments | tojson }}{%- endif %}
{{- '}\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\n' }}
{%- elif message.role == 'tool' %}
{{- '<|im_start|>user\n<tool_response>\n' + message.content + '\n</tool_response><|im_end|>\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}
{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- endif %}
{%- endif %}
""".strip()  # noqa: E501


def train_bpe(specials: list[str], vocab: int):  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS * 4, trainer)
    return tok


def build_qwen(folder: Path, rambler_folder: Path | None = None) -> dict:
    """A tiny Qwen3 causal LM taught two replies (see the module docstring) in ``folder``;
    with ``rambler_folder``, the same shape untrained there too (it never stops by itself)."""
    # <think> tags are tokens of their own (as in Qwen3); <tool_call> is left to BPE, so its tags
    # arrive split across several tokens (".<", "tool", "_", "call", ">"): the parser must hold
    # them back piece by piece.
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    tok = train_bpe(["<|endoftext|>", "<|im_start|>", "<|im_end|>"], 600)
    # as in Qwen3, the think tags are added tokens but not special ones: decoding keeps them
    tok.add_tokens([AddedToken("<think>", special=False), AddedToken("</think>", special=False)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", padding_side="left"
    )
    fast.chat_template = CHAT_TEMPLATE
    torch.manual_seed(SEED)
    config = Qwen3Config(
        vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
        tie_word_embeddings=True, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
        bos_token_id=None,
    )  # fmt: skip
    # untrained, with room for long replies: it rambles until cancelled or out of tokens
    # built even when not kept: it draws from the seeded generator the trained model draws next
    rambler = Qwen3ForCausalLM(Qwen3Config(**{**config.to_dict(), "max_position_embeddings": 8192}))
    if rambler_folder is not None:
        rambler.save_pretrained(str(rambler_folder))
        fast.save_pretrained(str(rambler_folder))
    model = Qwen3ForCausalLM(config)
    weather = [{"role": "user", "content": "What is the weather in Paris?"}]
    hello = [{"role": "user", "content": "Hello there, how are you today?"}]
    examples = [(weather, TOOLS, TOOL_REPLY), (hello, None, PLAIN_REPLY)]
    seqs = []
    for messages, tools, reply in examples:
        prompt = fast.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, tokenize=False
        )
        ids = fast(prompt + reply + "<|im_end|>", add_special_tokens=False)["input_ids"]
        n_prompt = len(fast(prompt, add_special_tokens=False)["input_ids"])
        seqs.append((torch.tensor([ids]), n_prompt))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _step in range(300):
        for ids, n_prompt in seqs:
            labels = ids.clone()
            labels[:, :n_prompt] = -100
            loss = model(input_ids=ids, labels=labels).loss
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            opt.zero_grad()
    model.eval()
    model.generation_config.pad_token_id = fast.pad_token_id
    model.generation_config.eos_token_id = fast.eos_token_id
    model.save_pretrained(str(folder))
    fast.save_pretrained(str(folder))
    return {"params": sum(p.numel() for p in model.parameters()), "loss": float(loss.detach())}


def build_t5(folder: Path) -> dict:
    """A tiny T5 encoder-decoder (random weights, its own tokenizer) in ``folder``."""
    from transformers import PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

    tok = train_bpe(["<pad>", "</s>", "<unk>"], 400)
    from tokenizers import processors

    eos = tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", eos)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    )
    torch.manual_seed(SEED)
    config = T5Config(
        vocab_size=len(fast), d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
        num_heads=4, pad_token_id=fast.pad_token_id, eos_token_id=fast.eos_token_id,
        decoder_start_token_id=fast.pad_token_id, is_encoder_decoder=True,
    )  # fmt: skip
    model = T5ForConditionalGeneration(config)
    with torch.no_grad():  # sharper logits than the default init: greedy and beams never tie
        for p in model.parameters():
            p.mul_(4.0)
    model.eval()
    model.save_pretrained(str(folder))
    fast.save_pretrained(str(folder))
    return {"params": sum(p.numel() for p in model.parameters())}
