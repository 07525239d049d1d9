"""Secrets on the wire: a call carries only the secrets its params name; old hosts send none;
a call's repr and a failed call's error never show a value."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import msgspec
import pytest
from inline_sdk import Context, SecretMissing
from inline_sdk._worker import redact
from inline_sdk.protocol import Call, RemoteError


def test_call_secrets_round_trip_and_default_for_old_hosts():
    call = Call(id=1, node="anthropic/complete", node_id="c", params={}, inputs={},
                secrets={"ANTHROPIC_API_KEY": "sk-123"})  # fmt: skip
    for codec in (msgspec.msgpack, msgspec.json):
        assert codec.decode(codec.encode(call), type=Call).secrets == {
            "ANTHROPIC_API_KEY": "sk-123"
        }
    old = msgspec.msgpack.encode({"t": "call", "id": 2, "node": "x", "node_id": "n",
                                  "params": {}, "inputs": {}})  # fmt: skip
    assert msgspec.msgpack.decode(old, type=Call).secrets == {}
    assert "sk-123" not in repr(call) and "ANTHROPIC_API_KEY" in repr(call)


def make_context(secrets: dict[str, str]) -> Context:
    return Context(node_type="x", node_id="n", models_dir=Path("."), assets_dir=Path("."),
                   input_roots=[], cwd=Path("."), emit_progress=lambda *a: None,
                   emit_preview=lambda i: None, cancel_event=threading.Event(),
                   logger=logging.getLogger("t"), secrets=secrets)  # fmt: skip


def test_ctx_secret_returns_the_named_value_or_names_the_missing_one():
    ctx = make_context({"K": "v"})
    assert ctx.secret("K") == "v"
    with pytest.raises(SecretMissing) as err:
        ctx.secret("OTHER")
    assert err.value.name == "OTHER" and "inline secrets set OTHER" in str(err.value)


def test_failed_calls_mask_secret_values():
    err = RemoteError(type="E", message="bad key sk-123", traceback="... sk-123 ...")
    masked = redact(err, ["sk-123", ""])
    assert masked.message == "bad key ***" and "sk-123" not in masked.traceback
