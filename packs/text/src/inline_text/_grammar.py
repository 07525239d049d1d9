"""Structured output by constrained decoding (xgrammar): a ``response_format`` as a logits
processor that masks every token the grammar does not allow, so the reply is valid by
construction (never generated, checked and retried).

``{"type": "json_object"}`` is any JSON object; ``{"type": "json_schema", "json_schema":
{"schema": ...}}`` is that schema (xgrammar's strict mode: no properties beyond the schema's).
Whitespace between tokens is not free (``any_whitespace=False``): a model cannot spend its
budget on blanks. Once the grammar is complete only the model's stop tokens are allowed, so
the reply ends there. ``tool_choice`` ``required`` (or one tool by name) is a grammar too: one
``<tool_call>`` block whose body is ``{"name", "arguments"}`` of a tool, its arguments that
tool's parameters. One compiler per loaded model (xgrammar caches the grammars it compiled); a
format or schema that cannot be used is the caller's mistake (``ParamsInvalid`` naming it).
"""

from __future__ import annotations

import functools
import json
import re
import threading
from typing import Any, Final

from inline_sdk import ParamIssue, ParamsInvalid

from ._load import Loaded
from ._parse import CALL_CLOSE, CALL_OPEN

#: The ``response_format`` types: plain text (no grammar) and the two JSON ones.
FORMATS: Final = ("text", "json_object", "json_schema")
NODE: Final = "text/complete"
WHERE: Final = "$.params.response_format"
#: xgrammar (0.2.8) lets a string with ``maxLength`` / ``minLength`` hold raw control characters,
#: which JSON forbids: its characters are given the class of its other strings (``basic_string``).
LOOSE_CHARACTER: Final = r"[^\"\\\r\n]"
JSON_CHARACTER: Final = r"[^\0-\x1f\"\\]"
#: What xgrammar's messages start with: ``[12:47:26] /project/cpp/file.cc:5082: ``.
LOG_PREFIX: Final = re.compile(r"^\[[^\]]*\]\s*\S+:\d+:\s*")

_COMPILERS: dict[int, tuple[Loaded, Any]] = {}
_LOCK = threading.Lock()


def check_format(response_format: dict[str, Any]) -> str | None:
    """The JSON schema (as text) ``response_format`` asks for: None for plain text (or none
    given). Raises ``ParamsInvalid`` naming what is wrong."""
    if not response_format:
        return None
    kind = response_format.get("type")
    if kind not in FORMATS:
        raise _refused(f"type must be one of {list(FORMATS)}, got {kind!r}", ".type")
    if kind == "text":
        return None
    if kind == "json_object":
        return json.dumps({"type": "object"})
    spec = response_format.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
        raise _refused("json_schema must be an object with a 'schema' object", ".json_schema")
    return json.dumps(spec.get("schema") or {"type": "object"})


def _compiler(loaded: Loaded) -> Any:
    import xgrammar as xgr

    with _LOCK:
        held = _COMPILERS.get(id(loaded))
        if held is not None and held[0] is loaded:
            return held[1]
        _COMPILERS.clear()  # one model per slot: an older model's compiler goes
        eos = loaded.model.generation_config.eos_token_id
        stops = eos if isinstance(eos, list) else [eos] if eos is not None else None
        info = xgr.TokenizerInfo.from_huggingface(
            loaded.tokenizer, vocab_size=loaded.model.config.vocab_size, stop_token_ids=stops
        )
        compiler = xgr.GrammarCompiler(info)
        _COMPILERS[id(loaded)] = (loaded, compiler)
        return compiler


def logits_processor(loaded: Loaded, grammar: str) -> Any:
    """A transformers logits processor that keeps ``loaded``'s reply inside ``grammar``
    (xgrammar's EBNF: ``ebnf``, ``tool_call_ebnf``), for one ``generate`` call (it holds that
    reply's grammar state)."""
    import xgrammar as xgr

    try:
        compiled = _compiler(loaded).compile_grammar(grammar)
    except (RuntimeError, ValueError) as exc:
        raise _refused(f"the grammar cannot be used: {_first_line(exc)}", "") from None
    return xgr.contrib.hf.LogitsProcessor(compiled)


def tool_call_schema(tools: list[dict[str, Any]], name: str) -> str:
    """The JSON schema (as text) of one ``<tool_call>`` body: ``{"name", "arguments"}`` of the
    tool ``name`` (``""``: any of ``tools``), its arguments its own parameters' schema. Raises
    ``ParamsInvalid`` when no tool has that name."""
    cases = []
    for tool in tools:
        spec = tool["function"]
        if name and spec["name"] != name:
            continue
        arguments = spec.get("parameters") or {"type": "object"}
        cases.append({
            "type": "object",
            "properties": {"name": {"const": spec["name"]}, "arguments": arguments},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        })  # fmt: skip
    if not cases:
        names = [t["function"]["name"] for t in tools]
        raise ParamsInvalid(NODE, [ParamIssue("$.params.tool_name", f"no tool named {name!r} "
                                              f"among the tools {names}")])  # fmt: skip
    return json.dumps(cases[0] if len(cases) == 1 else {"anyOf": cases})


@functools.lru_cache(maxsize=256)
def ebnf(schema: str) -> str:
    """The grammar of ``schema`` (JSON schema text) in xgrammar's EBNF: strict, no free
    whitespace, every string's characters those JSON allows. Raises ``ParamsInvalid`` for a
    schema xgrammar cannot use."""
    import xgrammar as xgr

    try:
        converted = xgr.Grammar.from_json_schema(schema, any_whitespace=False, strict_mode=True)
    except (RuntimeError, ValueError, TypeError) as exc:
        message = f"the JSON schema cannot be used: {_first_line(exc)}"
        raise _refused(message, ".json_schema") from None
    return str(converted).replace(LOOSE_CHARACTER, JSON_CHARACTER)


@functools.lru_cache(maxsize=256)
def tool_call_ebnf(schema: str) -> str:
    """One Hermes/Qwen ``<tool_call>`` block whose body is ``schema`` (``tool_call_schema``),
    and nothing else: what ``tool_choice`` ``required`` or a named function forces."""
    import xgrammar as xgr

    try:
        body = xgr.Grammar.from_ebnf(ebnf(schema))
    except ParamsInvalid as exc:  # a tool's parameters
        raise ParamsInvalid(NODE, [ParamIssue("$.params.tools", exc.issues[0].message)]) from None
    parts = [xgr.Grammar.from_ebnf(f"root ::= {json.dumps(tag)}")
             for tag in (CALL_OPEN + "\n", "\n" + CALL_CLOSE)]  # fmt: skip
    return str(xgr.Grammar.concat(parts[0], body, parts[1]))


def _first_line(exc: BaseException) -> str:
    """The first line of xgrammar's message, without its log prefix (time, source line)."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return LOG_PREFIX.sub("", line)


def _refused(message: str, at: str) -> ParamsInvalid:
    return ParamsInvalid(NODE, [ParamIssue(WHERE + at, message)])
