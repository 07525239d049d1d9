"""The text pack's pure parts: the reply parser (tags split across pieces, several calls,
malformed blocks, stop strings), the card, the cache budget and the rewrite buckets."""

from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "packs" / "text" / "src"))

from inline_text import (
    CardInvalid,
    ModelCard,
    ReplyParser,
    bucket,
    budget,
    cache_length,
    parse_call,
    read_card,
)

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def run(pieces: list[str], **kw: object) -> tuple[ReplyParser, list[tuple[str, str]]]:
    emitted: list[tuple[str, str]] = []
    parser = ReplyParser(emit=lambda s, t: emitted.append((s, t)), **kw)  # type: ignore[arg-type]
    for piece in pieces:
        parser.feed(piece)
    parser.finish()
    return parser, emitted


def chars(text: str) -> list[str]:
    return list(text)


def streamed(emitted: list[tuple[str, str]], section: str) -> str:
    return "".join(t for s, t in emitted if s == section)


@pytest.mark.parametrize("split", [chars, lambda t: [t], lambda t: re.split(r"(_|<)", t)])
def test_think_and_call_never_leak_however_split(split) -> None:  # type: ignore[no-untyped-def]
    reply = "<think>\nI will call it.\n</think>\n\nLet me check." + CALL
    parser, emitted = run(split(reply))
    assert parser.reasoning == "I will call it."
    assert parser.text == "Let me check."
    assert streamed(emitted, "content") == parser.text
    assert streamed(emitted, "thinking") == parser.reasoning
    assert all("<" not in t and ">" not in t for _, t in emitted)
    (call,) = parser.calls
    assert call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"}
    assert call.id.startswith("call_")


def test_tag_split_like_the_tiny_tokenizer() -> None:
    # the tiny Qwen's BPE splits ".<tool_call>" into ".<", "tool", "_", "call", ">"
    pieces = ["Let", " me", " check", ".<", "tool", "_", "call", ">", "\n", '{"', "name", '":',
              ' "get_weather", "arguments": {}}', "\n</", "tool_call", ">"]  # fmt: skip
    parser, emitted = run(pieces)
    assert streamed(emitted, "content") == "Let me check."
    assert [c.name for c in parser.calls] == ["get_weather"]
    assert parser.calls[0].arguments == "{}"


def test_held_text_that_is_no_tag_is_released() -> None:
    parser, emitted = run(["a <", "b", " <tool", "box> c"])
    assert parser.text == "a <b <toolbox> c"
    assert streamed(emitted, "content") == parser.text


def test_several_calls_in_one_reply() -> None:
    second = CALL.replace("Paris", "Oslo").replace("get_weather", "get_time")
    parser, _ = run(chars("Checking both." + CALL + "\n" + second))
    assert [c.name for c in parser.calls] == ["get_weather", "get_time"]
    assert json.loads(parser.calls[1].arguments) == {"city": "Oslo"}
    assert parser.text == "Checking both."
    assert len({c.id for c in parser.calls}) == 2


def test_malformed_block_stays_content_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    bad = "<tool_call>\n{not json}\n</tool_call>"
    with caplog.at_level(logging.WARNING, logger="inline.text"):
        parser, emitted = run(chars("Hmm." + bad + CALL))
    assert parser.text == "Hmm." + bad
    assert streamed(emitted, "content") == parser.text
    assert [c.name for c in parser.calls] == ["get_weather"]
    assert "left as content" in caplog.text and "not a call" in caplog.text


def test_unterminated_and_nameless_blocks_stay_content(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="inline.text"):
        parser, _ = run(chars('<tool_call>{"arguments": {}}</tool_call> and <tool_call>{"na'))
    assert parser.calls == []
    assert parser.text == '<tool_call>{"arguments": {}}</tool_call> and <tool_call>{"na'
    assert "never closes" in caplog.text


def test_think_only_opens_a_reply() -> None:
    parser, _ = run(["Answer: use <think> tags."])
    assert parser.text == "Answer: use <think> tags."
    assert parser.reasoning == ""


def test_template_opened_think_block() -> None:
    parser, _ = run(chars("pondering\n</think>\n\nDone."), thinking_open=True)
    assert (parser.reasoning, parser.text) == ("pondering", "Done.")


def test_stop_strings_end_the_reply_even_split() -> None:
    parser, emitted = run(["Hello", " wor", "ld. STO", "P more"], stops=["STOP"])
    assert parser.stopped
    assert parser.text == "Hello world."
    assert streamed(emitted, "content") == "Hello world."


def test_parse_call_shapes() -> None:
    assert parse_call('{"name": "f", "arguments": "{\\"a\\": 1}"}').arguments == '{"a": 1}'  # type: ignore[union-attr]
    assert parse_call('{"name": "f", "parameters": {"a": 1}}').arguments == '{"a": 1}'  # type: ignore[union-attr]
    assert parse_call('{"name": "f", "arguments": "not json"}') is None
    assert parse_call('["f"]') is None
    assert parse_call('{"name": "", "arguments": {}}') is None


def test_cache_budget_and_truncation_warning() -> None:
    card = ModelCard()
    assert cache_length(card, 40960) == 4096
    assert cache_length(card, 512) == 512  # never past the model's positions
    assert cache_length(ModelCard(max_total_tokens=64), 512) == 64
    fits = budget(512, 100, 512)
    assert (fits.reply, fits.prompt, fits.warning) == (256, 100, None)  # at most half
    cut = budget(64, 100, 16)
    assert (cut.reply, cut.prompt) == (16, 48)
    assert cut.warning is not None and "100 tokens" in cut.warning and "48 fit" in cut.warning


def test_buckets_and_cut_warning() -> None:
    assert [bucket(n).length for n in (1, 32, 33, 64, 65, 200, 256, 300, 512)] == [
        32, 32, 64, 64, 128, 256, 256, 512, 512,
    ]  # fmt: skip
    assert bucket(100).warning is None
    long = bucket(700)
    assert (long.length, long.kept) == (512, 512)
    assert long.warning is not None and "700 tokens" in long.warning and "512" in long.warning


def test_model_card(tmp_path: Path) -> None:
    assert read_card(tmp_path) == ModelCard(4096, False)
    (tmp_path / "inline.json").write_text('{"max_total_tokens": 256, "compile": true}')
    assert read_card(tmp_path) == ModelCard(256, True)
    (tmp_path / "inline.json").write_text('{"max_total_tokens": "big"}')
    with pytest.raises(CardInvalid, match=r"\$\.max_total_tokens"):
        read_card(tmp_path)
