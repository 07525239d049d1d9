"""Semantic checks against the catalog (contract 1.3, stage B), params and engine handles."""

from __future__ import annotations

from typing import Any

import pytest
from inline_core import GraphInvalid, parse_graph, validate

from ._nodes import catalog, edge


def node(node_id: str, node_type: str, **fields: Any) -> dict[str, Any]:
    return {"id": node_id, "type": node_type, **fields}


def refused(nodes: list[dict[str, Any]], target: str) -> GraphInvalid:
    with pytest.raises(GraphInvalid) as info:
        validate(parse_graph({"schemaVersion": 1, "nodes": nodes}), target, catalog())
    return info.value


TEXT = node("t", "input/text")
IMAGE = node("i", "input/image")
ENCODER = node("te", "load/text-encoder")


@pytest.mark.parametrize(
    ("nodes", "target", "message", "node_id", "path"),
    [
        pytest.param([TEXT], "zz", "No node with id 'zz'.", "zz", "$.target", id="B1"),
        pytest.param(
            [TEXT, node("x", "acme/nope")],
            "t",
            "Unknown node type 'acme/nope'.",
            "x",
            "$.graph.nodes[1].type",
            id="B2",
        ),
        pytest.param(
            [TEXT, node("e", "encode/text", inputs={"text": edge("t", "text")})],
            "e",
            "Encode Text needs an input wired to 'Text encoder'.",
            "e",
            "$.graph.nodes[1].inputs.text_encoder",
            id="B3",
        ),
        pytest.param(
            [TEXT, node("g", "test/generate", inputs={"prompt": []})],
            "g",
            "Generate needs an input wired to 'Prompt'.",
            "g",
            "$.graph.nodes[1].inputs.prompt",
            id="B3-empty-list",
        ),
        pytest.param(
            [TEXT, node("g", "test/generate", inputs={"prompt": edge("t", "text"), "x": []})],
            "g",
            "'test/generate' has no input port 'x'.",
            "g",
            "$.graph.nodes[1].inputs.x",
            id="B4",
        ),
        pytest.param(
            [TEXT, node("g", "test/generate", inputs={"prompt": [edge("t", "text")] * 2})],
            "g",
            "Input 'prompt' takes a single edge.",
            "g",
            "$.graph.nodes[1].inputs.prompt",
            id="B5",
        ),
        pytest.param(
            [node("g", "test/generate", inputs={"prompt": edge("ghost", "text")})],
            "g",
            "No node with id 'ghost'.",
            "ghost",
            "$.graph.nodes[0].inputs.prompt.from",
            id="B6",
        ),
        pytest.param(
            [TEXT, node("g", "test/generate", inputs={"prompt": edge("t", "txt")})],
            "g",
            "'input/text' has no output port 'txt'.",
            "g",
            "$.graph.nodes[1].inputs.prompt.output",
            id="B7",
        ),
        pytest.param(
            [IMAGE, node("a", "test/generate", inputs={"prompt": edge("i", "image")})],
            "a",
            "Cannot wire image into text at a.prompt.",
            "a",
            "$.graph.nodes[1].inputs.prompt",
            id="B8",
        ),
        pytest.param(
            [
                node("j", "text/join", inputs={"a": edge("k", "text"), "b": edge("k", "text")}),
                node("k", "text/join", inputs={"a": edge("j", "text"), "b": edge("j", "text")}),
            ],
            "j",
            "This graph has a cycle.",
            None,
            "$.graph.nodes[0]",
            id="B9",
        ),
    ],
)
def test_stage_b_messages(
    nodes: list[dict[str, Any]], target: str, message: str, node_id: str | None, path: str
) -> None:
    error = refused(nodes, target)
    assert [i.message for i in error.issues] == [message]
    assert str(error) == message
    assert error.node_id == node_id
    assert error.first.path == path


def test_five_mistakes_reported_at_once() -> None:
    nodes = [
        node("p", "input/text", params={"text": "hi"}),
        node("u", "acme/unknown", inputs={"x": edge("p", "text")}),
        node("e", "encode/text", inputs={"text": edge("p", "text")}),
        node("i", "input/image"),
        node("k", "test/generate", inputs={"prompt": edge("i", "image")}),
        node("w", "test/generate", params={"width": 9000}, inputs={"prompt": edge("p", "text")}),
        node("m", "test/generate", inputs={"prompt": edge("gone", "text")}),
    ]
    error = refused(nodes, "w")
    got = [(i.node_id, i.path, i.message) for i in error.issues]
    assert got == [
        ("u", "$.graph.nodes[1].type", "Unknown node type 'acme/unknown'."),
        (
            "e",
            "$.graph.nodes[2].inputs.text_encoder",
            "Encode Text needs an input wired to 'Text encoder'.",
        ),
        ("k", "$.graph.nodes[4].inputs.prompt", "Cannot wire image into text at k.prompt."),
        ("gone", "$.graph.nodes[6].inputs.prompt.from", "No node with id 'gone'."),
        (
            "w",
            "$.graph.nodes[5].params.width",
            "Expected an integer <= 8192, got 9000 (at $.graph.nodes[5].params.width)",
        ),
    ]
    width = error.issues[-1]
    assert (width.expected, width.got) == ("integer <= 8192", 9000)
    assert width.to_json() == {
        "nodeId": "w",
        "path": "$.graph.nodes[5].params.width",
        "message": width.message,
        "expected": "integer <= 8192",
        "got": 9000,
    }


def test_reference_checks_come_first_then_ours() -> None:
    # The reference would stop at the unknown type (B2) although a bad param comes earlier.
    nodes = [
        node("w", "test/generate", params={"steps": 0}, inputs={"prompt": edge("p", "text")}),
        node("p", "input/text"),
        node("x", "acme/unknown"),
    ]
    error = refused(nodes, "w")
    assert [i.node_id for i in error.issues] == ["x", "w"]
    assert str(error) == "Unknown node type 'acme/unknown'."


def test_no_cascades_from_unknown_or_missing_nodes() -> None:
    nodes = [
        node("x", "acme/unknown", inputs={"whatever": edge("nowhere", "out")}),
        node("g", "test/generate", inputs={"prompt": edge("x", "text")}),
    ]
    error = refused(nodes, "g")
    assert [i.message for i in error.issues] == ["Unknown node type 'acme/unknown'."]


def test_nodes_outside_the_closure_are_validated_but_their_cycles_are_not() -> None:
    cycle = [
        node("j", "text/join", inputs={"a": edge("k", "text"), "b": edge("k", "text")}),
        node("k", "text/join", inputs={"a": edge("j", "text"), "b": edge("j", "text")}),
    ]
    validate(parse_graph({"schemaVersion": 1, "nodes": [TEXT, *cycle]}), "t", catalog())
    bad = node("g", "test/generate", params={"width": 1})
    error = refused([TEXT, bad], "t")
    assert [i.node_id for i in error.issues] == ["g", "g"]
    assert error.issues[0].message == "Generate needs an input wired to 'Prompt'."


def test_list_ports_take_many_edges_and_single_images() -> None:
    nodes = [
        TEXT,
        IMAGE,
        node("i2", "input/image"),
        node(
            "g",
            "test/generate",
            inputs={
                "prompt": edge("t", "text"),
                "image": [edge("i", "image"), edge("i2", "image")],
            },
        ),
    ]
    validate(parse_graph({"schemaVersion": 1, "nodes": nodes}), "g", catalog())


def test_engine_handles_stay_in_their_pack() -> None:
    nodes = [
        node("m", "load/model"),
        node("s", "sample", inputs={"model": edge("m", "model")}),
        node("o", "other/sample", inputs={"model": edge("m", "model")}),
    ]
    validate(parse_graph({"schemaVersion": 1, "nodes": nodes[:2]}), "s", catalog())
    error = refused(nodes, "s")
    assert [(i.node_id, i.path, i.message) for i in error.issues] == [
        (
            "o",
            "$.graph.nodes[2].inputs.model",
            "Cannot pass a model handle from pack 'primitives' (node 'm') to pack 'other' "
            "(node 'o'): engine handles stay in the pack that made them.",
        )
    ]


def test_media_crosses_packs() -> None:
    nodes = [
        node("t", "input/text"),  # pack basics
        node("g", "test/generate", inputs={"prompt": edge("t", "text")}),  # pack gen
    ]
    validate(parse_graph({"schemaVersion": 1, "nodes": nodes}), "g", catalog())


def test_undeclared_params_are_refused_with_a_suggestion() -> None:
    nodes = [node("i", "input/image", params={"asset": {"ref": "path", "path": "/a.png"}, "x": 1})]
    error = refused(nodes, "i")
    assert [(i.node_id, i.path, i.message) for i in error.issues] == [
        ("i", "$.graph.nodes[0].params.x", "Unknown param 'x' (at $.graph.nodes[0].params.x).")
    ]
    wired = {"prompt": edge("t", "text")}
    error = refused([TEXT, node("g", "test/generate", params={"widht": 100}, inputs=wired)], "g")
    assert str(error) == (
        "Unknown param 'widht' (at $.graph.nodes[1].params.widht). Did you mean 'width'?"
    )


def test_internal_params_are_declared() -> None:
    nodes = [node("i", "input/image", params={"asset": {"ref": "path", "path": "/a.png"}})]
    validate(parse_graph({"schemaVersion": 1, "nodes": nodes}), "i", catalog())


def test_an_unknown_node_type_names_the_closest_known_one() -> None:
    error = refused([node("x", "input/txt")], "x")
    assert str(error) == "Unknown node type 'input/txt'. Did you mean 'input/text'?"
    assert error.first.path == "$.graph.nodes[0].type"


def test_a_param_step_is_enforced_naming_the_valid_neighbours() -> None:
    error = refused([node("e", "test/stepped", params={"width": 500, "denoise": 0.33})], "e")
    assert [(i.path, i.message, i.expected, i.got) for i in error.issues] == [
        (
            "$.graph.nodes[0].params.width",
            "Width ('width') moves in steps of 64 from 256 and 500 is not on one; the nearest "
            "valid values are 448 and 512 (at $.graph.nodes[0].params.width)",
            "a multiple of 64 from 256",
            500,
        ),
        (
            "$.graph.nodes[0].params.denoise",
            "Denoise ('denoise') moves in steps of 0.05 and 0.33 is not on one; the nearest "
            "valid values are 0.3 and 0.35 (at $.graph.nodes[0].params.denoise)",
            "a multiple of 0.05",
            0.33,
        ),
    ]
    on_step = node("e", "test/stepped", params={"width": 512, "denoise": 0.35})
    validate(parse_graph({"schemaVersion": 1, "nodes": [on_step]}), "e", catalog())
    # Out of range is the schema's complaint, not the step's: reported once.
    error = refused([node("e", "test/stepped", params={"width": 4000})], "e")
    assert [i.expected for i in error.issues] == ["integer <= 2048"]
