"""Planning: the closure in order, resolved params and seeds, and content-addressed keys."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from typing import Any

import msgspec
import pytest
from inline_core import DictCatalog, GraphInvalid, NodeEntry, Plan, parse_graph, plan

from ._nodes import catalog, edge, entries, text_to_image


def keys(doc: dict[str, Any], target: str = "g", **kwargs: Any) -> dict[str, str]:
    planned = plan(parse_graph(doc), target, kwargs.pop("cat", catalog()), **kwargs)
    return {n.id: n.key for n in planned.nodes}


KEY_SCRIPT = """
import json, sys
import msgspec
from inline_core import DictCatalog, NodeEntry, parse_graph, plan
from inline_sdk import Descriptor

data = json.loads(sys.stdin.read())
entries = [
    NodeEntry(msgspec.convert(e["descriptor"], Descriptor), e["pack"], e["pack_version"])
    for e in data["entries"]
]
planned = plan(parse_graph(data["graph"]), data["target"], DictCatalog(entries))
print(json.dumps({n.id: n.key for n in planned.nodes}))
"""


def test_keys_are_stable_across_processes() -> None:
    doc = text_to_image()
    doc["nodes"][0]["params"] = {"text": "héllo ✓", "extra": {"b": [1.5, None], "a": True}}
    payload = {
        "graph": doc,
        "target": "g",
        "entries": [
            {
                "descriptor": msgspec.to_builtins(e.descriptor),
                "pack": e.pack,
                "pack_version": e.pack_version,
            }
            for e in entries()
        ],
    }
    for seed in ("0", "1"):
        out = subprocess.run(
            [sys.executable, "-c", KEY_SCRIPT],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
        )
        assert json.loads(out.stdout) == keys(doc)


def test_keys_ignore_node_ids_and_param_order() -> None:
    base = keys(text_to_image())
    renamed = keys(text_to_image(ids=("prompt-1", "gen")), target="gen")
    assert list(base.values()) == list(renamed.values())
    shuffled = text_to_image()
    shuffled["nodes"][1]["params"] = {"seed": 7, "width": 1024}
    assert keys(shuffled) == base
    explicit_defaults = text_to_image()
    explicit_defaults["nodes"][1]["params"].update(steps=4, sampler="euler")
    assert keys(explicit_defaults) == base


def test_keys_change_with_params_versions_and_upstream() -> None:
    base = keys(text_to_image())
    width = keys(text_to_image(width=512))
    assert width["p"] == base["p"] and width["g"] != base["g"]
    upstream = keys(text_to_image(text="a harbour"))
    assert upstream["p"] != base["p"] and upstream["g"] != base["g"]
    pack = keys(text_to_image(), cat=catalog({"gen": "2.0.1"}))
    assert pack["p"] == base["p"] and pack["g"] != base["g"]
    pack_upstream = keys(text_to_image(), cat=catalog({"basics": "9.9.9"}))
    assert pack_upstream["g"] != base["g"]
    fingerprinted = keys(text_to_image(), fingerprint=lambda n: "sha256-x" if n.id == "p" else None)
    assert fingerprinted["p"] != base["p"] and fingerprinted["g"] != base["g"]


def test_keys_change_with_the_node_version() -> None:
    bumped = [
        NodeEntry(msgspec.structs.replace(e.descriptor, version="1.3.0"), e.pack, e.pack_version)
        if e.type == "test/generate"
        else e
        for e in entries()
    ]
    assert keys(text_to_image(), cat=DictCatalog(bumped))["g"] != keys(text_to_image())["g"]


def test_keys_follow_edge_order_and_output_port() -> None:
    def doc(order: list[str]) -> dict[str, Any]:
        return {
            "schemaVersion": 1,
            "nodes": [
                {"id": "t", "type": "input/text"},
                {"id": "a", "type": "input/image", "params": {"asset": {"ref": "a"}}},
                {"id": "b", "type": "input/image", "params": {"asset": {"ref": "b"}}},
                {
                    "id": "g",
                    "type": "test/generate",
                    "inputs": {
                        "prompt": edge("t", "text"),
                        "image": [edge(x, "image") for x in order],
                    },
                    "params": {"seed": 1},
                },
            ],
        }

    assert keys(doc(["a", "b"]))["g"] != keys(doc(["b", "a"]))["g"]


def test_plan_is_the_closure_in_topological_order() -> None:
    doc = {
        "schemaVersion": 1,
        "nodes": [
            {
                "id": "j",
                "type": "text/join",
                "inputs": {"a": edge("x", "text"), "b": edge("y", "text")},
            },
            {"id": "unused", "type": "input/text"},
            {"id": "y", "type": "input/text", "params": {"text": "y"}},
            {"id": "x", "type": "input/text", "params": {"text": "x"}},
        ],
    }
    planned = plan(parse_graph(doc), "j", catalog())
    assert isinstance(planned, Plan)
    assert [n.id for n in planned.nodes] == ["y", "x", "j"]
    join = planned.node("j")
    assert join.deps == ("x", "y")
    assert join.pack == "basics"
    assert join.params == {"separator": " "}
    assert join.descriptor.type == "text/join"
    assert "unused" not in planned
    with pytest.raises(KeyError):
        planned.node("unused")


def test_plan_validates() -> None:
    with pytest.raises(GraphInvalid, match="No node with id 'nope'"):
        plan(parse_graph(text_to_image()), "nope", catalog())


def test_random_seeds_are_drawn_and_explicit_seeds_are_kept() -> None:
    graph = parse_graph(text_to_image(seed=-1))
    first = plan(graph, "g", catalog()).node("g")
    second = plan(graph, "g", catalog()).node("g")
    assert 0 <= first.params["seed"] < 2**32
    assert first.params["seed"] != second.params["seed"]
    assert first.key != second.key
    rng_a = plan(graph, "g", catalog(), rng=random.Random(5)).node("g")
    rng_b = plan(graph, "g", catalog(), rng=random.Random(5)).node("g")
    assert rng_a.params["seed"] == rng_b.params["seed"]
    drawn = rng_a.params["seed"]
    assert keys(text_to_image(seed=drawn))["g"] == rng_a.key
    assert keys(text_to_image(seed=7)) == keys(text_to_image(seed=7))


def test_default_random_seed_is_drawn() -> None:
    doc = text_to_image()
    del doc["nodes"][1]["params"]["seed"]
    planned = plan(parse_graph(doc), "g", catalog(), rng=random.Random(1)).node("g")
    assert planned.params["seed"] >= 0
    assert planned.params["width"] == 1024


def test_planned_params_do_not_alias_the_graph() -> None:
    doc = text_to_image()
    doc["nodes"][0]["params"]["extra"] = [1]
    graph = parse_graph(doc)
    planned = plan(graph, "g", catalog())
    planned.node("p").params["extra"].append(2)
    assert graph.nodes[0].params["extra"] == [1]
