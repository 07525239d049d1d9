"""The secrets store (atomic, 0600), which secrets a call gets, and the hosted model list."""

from __future__ import annotations

from pathlib import Path

import pytest
from inline_host import Settings
from inline_host._errors import SecretNotGranted
from inline_host.hub import (
    HostedNode,
    SecretError,
    SecretStore,
    hosted_model,
    hosted_text_models,
    named_secrets,
    secrets_for_call,
)


def test_store_is_atomic_and_private(tmp_path: Path):
    store = SecretStore(tmp_path)
    assert store.names() == []
    store.set("B_KEY", "two")
    store.set("A_KEY", "one")
    assert store.names() == ["A_KEY", "B_KEY"] and store.get("A_KEY") == "one"
    assert store.path.stat().st_mode & 0o777 == 0o600
    assert not list(tmp_path.glob(".secrets.*"))  # no temp file left behind
    assert store.remove("A_KEY") and not store.remove("A_KEY")
    with pytest.raises(SecretError, match="is not a secret name"):
        store.set("1bad", "x")
    with pytest.raises(SecretError, match="is empty"):
        store.set("OK", "")
    store.path.write_text("[1, 2]")
    with pytest.raises(SecretError, match="JSON object"):
        store.names()


def test_a_call_gets_only_the_secrets_its_params_name(tmp_path: Path):
    store = SecretStore(tmp_path)
    store.set("ANTHROPIC_API_KEY", "sk-a")
    store.set("GEMINI_API_KEY", "g")
    params = {"api_key_secret": "ANTHROPIC_API_KEY", "model": "GEMINI_API_KEY",
              "other_secret": "MISSING", "n_secret": 3}  # fmt: skip
    assert named_secrets(params) == ["ANTHROPIC_API_KEY", "MISSING"]
    got = secrets_for_call(tmp_path, params, "anthropic/complete", "hosted")
    assert got == {"ANTHROPIC_API_KEY": "sk-a"}  # an Anthropic key is granted to hosted
    assert secrets_for_call(tmp_path, {"prompt": "hi"}, "anthropic/complete", "hosted") == {}
    with pytest.raises(SecretNotGranted, match="inline secrets grant ANTHROPIC_API_KEY evil"):
        secrets_for_call(tmp_path, params, "anthropic/complete", "evil")  # another pack
    assert store.grant("ANTHROPIC_API_KEY", "evil") == ("evil", "hosted")
    assert secrets_for_call(tmp_path, params, "anthropic/complete", "evil") == got
    store.set("ANTHROPIC_API_KEY", "sk-b")  # a new value keeps the grants
    assert store.grants()["ANTHROPIC_API_KEY"] == ("evil", "hosted")


#: Hosted chat nodes as the descriptors declare them (the host hands them down to the hub).
NODES = (
    HostedNode("anthropic/complete", "api_key_secret", "ANTHROPIC_API_KEY"),
    HostedNode("google/gemini-complete", "api_key_secret", "GEMINI_API_KEY"),
)


def test_hosted_text_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    ids = [m.id for m in hosted_text_models(NODES)]
    assert "anthropic/claude-sonnet-4-5" in ids and "google/gemini-2.5-flash" in ids
    google = [m for m in hosted_text_models(NODES) if m.owned_by == "google"]
    assert hosted_text_models(NODES[1:]) == google  # a model runs only where a node runs it
    store = SecretStore(tmp_path)
    store.set("ANTHROPIC_API_KEY", "k")
    store.set("GEMINI_API_KEY", "g", service="acme")  # stored for another service: not usable
    services = store.services()
    assert services == {"ANTHROPIC_API_KEY": "anthropic", "GEMINI_API_KEY": "acme"}
    m = hosted_model("anthropic/claude-x", NODES, services)
    assert m is not None and m.node == "anthropic/complete" and m.available
    assert m.params() == {"model": "claude-x", "api_key_secret": "ANTHROPIC_API_KEY"}
    g = hosted_model("google/gemini-y", NODES, services)
    assert g is not None and g.node == "google/gemini-complete" and not g.available
    assert hosted_model("tiny-llm", NODES) is None and hosted_model("anthropic/", NODES) is None
    assert hosted_model("anthropic/claude-x", ()) is None  # no hosted pack: no hosted model
    monkeypatch.setenv("INLINE_HOSTED_MODELS", "google/gemini-x, nobody/y")
    ids = Settings.from_env().hosted_models  # the settings hand the list down
    assert [m.id for m in hosted_text_models(NODES, ids=ids)] == ["google/gemini-x"]
