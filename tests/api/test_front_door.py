"""Issue 26 item 5: what a newcomer finds at ``/`` and in the docs, and takes that say what they
are (their output port, where their bytes are)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import msgspec
from inline_host.runs import RunEvent, events_vocabulary

from ._helpers import body, node, run_to_end

ROOT = Path(__file__).resolve().parents[2]


def test_the_root_sends_a_browser_to_the_docs_and_tells_a_script_where_things_are(client, server):
    browser = client.get("/", headers={"Accept": "text/html,application/xhtml+xml"})
    assert browser.status_code == 302 and browser.headers["location"] == "/schema"
    info = client.get("/").json()
    assert info["docs"] == "/schema" and info["health"] == "/v1/health"
    assert client.get(info["openapi"]).status_code == 200
    assert client.get(info["health"]).json()["ok"] is True


def test_every_event_type_is_documented_in_the_openapi_description_and_the_readme(client):
    described = client.get("/schema/openapi.json").json()["info"]["description"]
    table = events_vocabulary()
    assert table in described
    assert table in (ROOT / "README.md").read_text(), (
        "the README's run events are stale: paste inline_host.runs.events_vocabulary()"
    )
    rows = dict(re.findall(r"^\| `(\w+)` \| (.*)$", table, re.M))
    tags = {cls.__struct_config__.tag for cls in RunEvent.__args__}
    assert set(rows) == tags and len(tags) == 10
    assert "`output`: string" in rows["delta"] and "`takes`: list of Take" in rows["node_done"]


def test_each_take_of_a_multi_output_node_names_its_output_and_its_url(client, server):
    state = run_to_end(client, server.ws, body("p", node("p", "testpack/pair", {"text": "abc"})))
    assert state["status"] == "done", state
    by_output = {t["output"]: t for t in state["takes"]}
    assert set(by_output) == {"first", "second"}, state["takes"]
    for output, text in (("first", "ABC"), ("second", "cba")):
        take = by_output[output]
        assert take["url"] == f"/v1/takes/{take['id']}/bytes"
        assert client.get(take["url"]).text == text
        again = client.get(f"/v1/takes/{take['id']}").json()
        assert again["output"] == output and again["url"] == take["url"]


def test_the_typed_client_reads_a_take_s_output_and_url(server):
    from inline_client import Take

    takes = httpx.get(f"{server.url}/v1/takes", timeout=30).json()["takes"]
    assert takes
    take = msgspec.convert(takes[0], Take)
    assert take.url == f"/v1/takes/{take.id}/bytes" and take.output
    assert json.loads(msgspec.json.encode(take))["output"] == take.output
