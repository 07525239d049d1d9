"""Secrets by grant: a client may not choose which stored secret a node gets without the
operator token, and a secret reaches only the service it was stored for."""

from __future__ import annotations

import time

from inline_host.hub import SecretStore

from .conftest import Host, finish, follow, one


def text_of(client, state) -> str:
    return client.get(f"/v1/takes/{state['takes'][0]['id']}/bytes").text


def test_naming_another_secret_needs_the_operator_token(host: Host, client) -> None:
    store = SecretStore(host.data)
    store.set("TESTPACK_KEY", "k" * 12, service="testpack", grants=("testpack",))
    store.set("ANTHROPIC_API_KEY", "sk-ant-" + "a" * 20)
    nonce = time.time_ns()
    # the node's own default secret: any client, as before
    own = finish(client, host.ws, one("testpack/secret-length", {}, clientRunId=f"own-{nonce}"))
    assert own["status"] == "done" and text_of(client, own) == "got 12 characters"
    # another secret by name, without the token: refused before anything runs
    doc = one("testpack/secret-length", {"key_secret": "ANTHROPIC_API_KEY"})
    r = client.post("/v1/runs", json=doc)
    assert r.status_code == 401, r.text
    message = r.json()["error"]["message"]
    assert "n.key_secret" in message and "operator token" in message
    assert "sk-ant" not in r.text
    # with the token it is accepted, and still the Anthropic key never reaches this pack
    token = {"Authorization": f"Bearer {host.operator_token()}"}
    r = client.post("/v1/runs", json={**doc, "clientRunId": f"named-{nonce}"}, headers=token)
    assert r.status_code == 201, r.text
    follow(host.ws, r.json()["runId"], set())
    state = client.get(f"/v1/runs/{r.json()['runId']}").json()
    assert state["status"] == "done"
    assert text_of(client, state) == "none (SecretMissing)"
