"""High 2 and the low ones: cross-site requests, DNS rebinding, header bytes, nesting, Range."""

from __future__ import annotations

import asyncio
import json
import socket

import httpx
import pytest
from inline_host.guard import HostPolicy, check_request, token_middleware
from inline_registry import scaffold_pack
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from .conftest import finish, one

ATTACKER = "http://attacker.example"


@pytest.fixture(scope="module")
def evil_pack(tmp_path_factory):
    """A pack whose import-time code leaves a mark (it must never run)."""
    root = tmp_path_factory.mktemp("evil")
    pack = scaffold_pack("evil", root / "src")
    marker = root / "ran"
    init = pack / "src" / "inline_pack_evil" / "__init__.py"
    init.write_text(f"open({str(marker)!r}, 'w').write('x')\n" + init.read_text())
    return pack, marker


def install_body(pack) -> str:
    return json.dumps({"source": str(pack), "allow": ["subprocess", "network-egress"]})


def test_a_cross_site_text_plain_install_is_refused_and_runs_nothing(host, client, evil_pack):
    pack, marker = evil_pack
    forged = client.post(
        "/v1/packs",
        content=install_body(pack),
        headers={"Content-Type": "text/plain", "Origin": ATTACKER},
    )
    assert forged.status_code == 403, forged.text
    assert "Cross-origin" in forged.json()["error"]["message"]
    # the same body without an Origin: still not JSON
    plain = client.post(
        "/v1/packs", content=install_body(pack), headers={"Content-Type": "text/plain"}
    )
    assert plain.status_code == 415, plain.text
    # JSON, same machine, but no operator token: installing and granting consents need it
    bare = client.post(
        "/v1/packs", content=install_body(pack), headers={"Content-Type": "application/json"}
    )
    assert bare.status_code == 401, bare.text
    assert "operator token" in bare.json()["error"]["message"]
    upgrade = client.post("/v1/packs/evil/upgrade", json={"allow": ["subprocess"]})
    assert upgrade.status_code == 401, upgrade.text
    for method, path in (("POST", "/v1/packs/sync"), ("DELETE", "/v1/packs/testpack")):
        assert client.request(method, path).status_code == 401, path
    assert not marker.exists()
    names = {p["name"] for p in client.get("/v1/packs").json()["packs"]}
    assert "evil" not in names and "testpack" in names


def test_the_operator_token_opens_pack_routes(host, client, tmp_path):
    token = host.operator_token()
    assert len(token) >= 32
    auth = {"Authorization": f"Bearer {token}"}
    r = client.post("/v1/packs", json={"source": str(tmp_path / "nowhere")}, headers=auth)
    assert r.status_code in (404, 422), r.text  # past the guard: the source itself is refused
    wrong = client.post("/v1/packs", json={"source": "x"}, headers={"Authorization": "Bearer no"})
    assert wrong.status_code == 401


def test_host_must_name_this_server(host):
    port = host.server.port
    for name in ("attacker.example", f"attacker.example:{port}", "10.1.2.3"):
        r = httpx.get(host.url + "/v1/health", headers={"Host": name}, timeout=30)
        assert r.status_code == 403, (name, r.text)
        assert "INLINE_ALLOWED_HOSTS" in r.json()["error"]["message"]
    for name in (f"localhost:{port}", f"127.0.0.1:{port}", "localhost", f"[::1]:{port}"):
        r = httpx.get(host.url + "/v1/health", headers={"Host": name}, timeout=30)
        assert r.status_code == 200, (name, r.text)


def test_host_policy_takes_the_listen_address_and_allowed_hosts():
    policy = HostPolicy("192.168.1.5", ["studio.lan", " Box "])
    assert policy.allows("192.168.1.5") and policy.allows("studio.lan") and policy.allows("box")
    assert policy.allows("localhost") and policy.allows("127.0.0.9") and policy.allows("::1")
    assert not policy.allows("attacker.example")
    wide = HostPolicy("0.0.0.0")
    assert not wide.allows("0.0.0.0") and not wide.allows("attacker.example")
    assert HostPolicy("0.0.0.0", ["*"]).allows("anything.example")


def test_a_cross_origin_request_or_websocket_is_403(host, client):
    same = f"http://127.0.0.1:{host.server.port}"
    assert client.get("/v1/health", headers={"Origin": same}).status_code == 200
    for origin in (ATTACKER, "null", f"http://127.0.0.1:{host.server.port + 1}"):
        r = client.get("/v1/health", headers={"Origin": origin})
        assert r.status_code == 403, (origin, r.text)
    run_id = finish(client, host.ws, one("chaos/surrogate", {"nonce": 1}))["runId"]
    with (
        pytest.raises((InvalidStatus, ConnectionClosed)),
        connect(f"{host.ws}/v1/runs/{run_id}/events", origin=ATTACKER, open_timeout=30) as ws,
    ):
        ws.recv(timeout=30)
    with connect(f"{host.ws}/v1/runs/{run_id}/events", origin=same, open_timeout=30) as ws:
        assert json.loads(ws.recv(timeout=30))["type"] == "snapshot"


def test_state_changing_routes_need_their_content_type(client):
    doc = json.dumps(one("chaos/surrogate", {"nonce": 2}))
    for ctype in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {"Content-Type": ctype} if ctype else {}
        r = client.post("/v1/runs", content=doc, headers=headers)
        assert r.status_code == 415, (ctype, r.text)
    ok = client.post(
        "/v1/runs", content=doc, headers={"Content-Type": "application/json; charset=utf-8"}
    )
    assert ok.status_code in (200, 201), ok.text
    png = b"\x89PNG\r\n\x1a\n" + bytes(32)
    for simple in ("text/plain", "application/x-www-form-urlencoded"):
        forged = client.post("/v1/assets", content=png, headers={"Content-Type": simple})
        assert forged.status_code == 415 and "--data-binary" in forged.text
    assert (
        client.post("/v1/assets", content=png, headers={"Content-Type": "image/png"}).status_code
        == 200
    )


def raw_request(port: int, head: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head)
        return s.recv(65536)


def test_a_header_byte_0xff_is_400_not_500(host):
    for header in (b"Authorization: Bearer \xff\xfe", b"Origin: http://\xff.example"):
        reply = raw_request(
            host.server.port,
            b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + header
            + b"\r\nConnection: close\r\n\r\n",
        )
        assert reply.startswith(b"HTTP/1.1 400"), reply[:200]


def test_the_token_check_answers_401_to_a_header_byte_0xff():
    seen: list[int] = []

    async def app(scope, receive, send):  # reached only with the right token
        seen.append(1)

    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b""}

    middleware = token_middleware("s3cret")(app)
    for headers in (
        [(b"authorization", b"Bearer \xff")],
        [(b"x-other", b"\xff"), (b"authorization", b"Bearer s3cret")],
    ):
        sent.clear()
        asyncio.run(middleware({"type": "http", "headers": headers, "path": "/"}, receive, send))
    assert seen == [1]  # the second: a 0xff elsewhere does not stop a good token


def test_check_request_refuses_before_any_route():
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/runs",
        "headers": [(b"host", b"evil.example"), (b"content-length", b"2")],
    }
    assert check_request(scope, HostPolicy("127.0.0.1"))[0] == 403


def test_deeply_nested_json_is_422(client):
    doc = json.dumps(one("chaos/surrogate", {"nonce": 3, "extra": "DEEP"}))
    for depth in (200, 5000):
        deep = doc.replace('"DEEP"', "[" * depth + "1" + "]" * depth)
        r = client.post("/v1/runs", content=deep, headers={"Content-Type": "application/json"})
        assert r.status_code == 422, (depth, r.text[:300])
    text = "[" * 100_000 + "]" * 100_000
    r = client.post("/v1/runs", content=text, headers={"Content-Type": "application/json"})
    assert r.status_code == 422, r.text[:300]


def test_a_range_with_thousands_of_digits_is_416(host, client):
    state = finish(client, host.ws, one("chaos/surrogate", {"nonce": 4}))
    take = state["takes"][0]["id"]
    for rng in ("bytes=" + "9" * 5000 + "-", "bytes=0-" + "9" * 5000, "bytes=-" + "9" * 5000):
        r = client.get(f"/v1/takes/{take}/bytes", headers={"Range": rng})
        assert r.status_code == 416, (rng[:20], r.status_code)
    assert client.get(f"/v1/takes/{take}/bytes", headers={"Range": "bytes=0-1"}).status_code == 206
