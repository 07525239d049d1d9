"""The graph document's shape checks (contract 1.3, stage A) and the run request."""

from __future__ import annotations

from typing import Any

import pytest
from inline_core import (
    Edge,
    GraphInvalid,
    InlineCoreError,
    RequestInvalid,
    parse_graph,
    parse_request,
)

from ._nodes import edge


def graph(*nodes: Any, version: Any = 1) -> dict[str, Any]:
    return {"schemaVersion": version, "nodes": list(nodes)}


def text(node_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": node_id, "type": "input/text", **extra}


def refused(doc: Any) -> GraphInvalid:
    with pytest.raises(GraphInvalid) as info:
        parse_graph(doc)
    return info.value


@pytest.mark.parametrize(
    ("doc", "message", "node_id", "path"),
    [
        pytest.param(None, "Graph must be an object.", None, "$.graph", id="A1-missing"),
        pytest.param([], "Graph must be an object.", None, "$.graph", id="A1-array"),
        pytest.param(
            graph(version=2),
            "Unsupported graph schemaVersion: 2.",
            None,
            "$.graph.schemaVersion",
            id="A2",
        ),
        pytest.param(
            {"nodes": []},
            "Unsupported graph schemaVersion: None.",
            None,
            "$.graph.schemaVersion",
            id="A2-missing",
        ),
        pytest.param(
            graph(version="1"),
            "Unsupported graph schemaVersion: '1'.",
            None,
            "$.graph.schemaVersion",
            id="A2-string",
        ),
        pytest.param(
            {"schemaVersion": 1, "nodes": {}},
            "Graph 'nodes' must be a list.",
            None,
            "$.graph.nodes",
            id="A3",
        ),
        pytest.param(
            {"schemaVersion": 1},
            "Graph 'nodes' must be a list.",
            None,
            "$.graph.nodes",
            id="A3-missing",
        ),
        pytest.param(graph("a"), "Each node must be an object.", None, "$.graph.nodes[0]", id="A4"),
        pytest.param(
            graph({"type": "input/text"}),
            "Each node needs a string 'id' and 'type'.",
            None,
            "$.graph.nodes[0].id",
            id="A5-id",
        ),
        pytest.param(
            graph({"id": "a", "type": 3}),
            "Each node needs a string 'id' and 'type'.",
            None,
            "$.graph.nodes[0].type",
            id="A5-type",
        ),
        pytest.param(
            graph(text("a", params=[1])),
            "Node 'params' must be an object.",
            "a",
            "$.graph.nodes[0].params",
            id="A6",
        ),
        pytest.param(
            graph(text("a", inputs=[])),
            "Node 'inputs' must be an object.",
            "a",
            "$.graph.nodes[0].inputs",
            id="A7",
        ),
        pytest.param(
            graph(text("a", inputs={"prompt": "b"})),
            "An input edge must be an object with 'from' and 'output'.",
            None,
            "$.graph.nodes[0].inputs.prompt",
            id="A8",
        ),
        pytest.param(
            graph(text("a", inputs={"image": [edge("b", "image"), 7]})),
            "An input edge must be an object with 'from' and 'output'.",
            None,
            "$.graph.nodes[0].inputs.image[1]",
            id="A8-in-list",
        ),
        pytest.param(
            graph(text("a", inputs={"prompt": {"from": "b"}})),
            "An input edge needs string 'from' and 'output'.",
            None,
            "$.graph.nodes[0].inputs.prompt.output",
            id="A9",
        ),
        pytest.param(
            graph(text("a", inputs={"prompt": {"from": 1, "output": "text"}})),
            "An input edge needs string 'from' and 'output'.",
            None,
            "$.graph.nodes[0].inputs.prompt.from",
            id="A9-from",
        ),
        pytest.param(
            graph(text("b"), text("a"), text("b"), text("a"), text("c")),
            "Duplicate node ids: ['a', 'b'].",
            None,
            "$.graph.nodes[2].id",
            id="A10",
        ),
    ],
)
def test_stage_a_messages(doc: Any, message: str, node_id: str | None, path: str) -> None:
    error = refused(doc)
    assert str(error) == message
    assert error.first.message == message
    assert error.node_id == node_id
    assert error.first.path == path
    assert error.first.code == "invalid_graph"
    assert len(error.issues) == 1


def test_messages_quote_like_python() -> None:
    error = refused(graph(text("it's"), text("it's")))
    assert str(error) == 'Duplicate node ids: ["it\'s"].'


def test_collects_every_shape_problem_in_document_order() -> None:
    error = refused(
        graph(
            text("ok"),
            "not a node",
            {"id": "x"},
            text("p", params="bad", inputs={"a": {"from": "ok"}, "b": [edge("ok", "text"), 1]}),
            text("ok"),
            version=3,
        )
    )
    assert [(i.message, i.node_id, i.path) for i in error.issues] == [
        ("Unsupported graph schemaVersion: 3.", None, "$.graph.schemaVersion"),
        ("Each node must be an object.", None, "$.graph.nodes[1]"),
        ("Each node needs a string 'id' and 'type'.", None, "$.graph.nodes[2].type"),
        ("Node 'params' must be an object.", "p", "$.graph.nodes[3].params"),
        (
            "An input edge needs string 'from' and 'output'.",
            None,
            "$.graph.nodes[3].inputs.a.output",
        ),
        (
            "An input edge must be an object with 'from' and 'output'.",
            None,
            "$.graph.nodes[3].inputs.b[1]",
        ),
        ("Duplicate node ids: ['ok'].", None, "$.graph.nodes[4].id"),
    ]
    assert isinstance(error, InlineCoreError)


@pytest.mark.parametrize("falsy", [None, 0, "", False, [], {}])
def test_falsy_params_are_empty(falsy: Any) -> None:
    parsed = parse_graph(graph(text("a", params=falsy)))
    assert parsed.nodes[0].params == {}


def test_single_edge_equals_one_element_list() -> None:
    one = parse_graph(graph(text("a"), text("b", inputs={"prompt": edge("a", "text")})))
    listed = parse_graph(graph(text("a"), text("b", inputs={"prompt": [edge("a", "text")]})))
    assert one == listed
    assert one.nodes[1].inputs == {"prompt": (Edge("a", "text"),)}


def test_parsed_graph_keeps_order_indexes_and_ignores_unknown_keys() -> None:
    parsed = parse_graph(
        {
            "schemaVersion": 1,
            "extra": True,
            "nodes": [
                text("a", note="x", params={"text": "hi", "undeclared": [1]}),
                text("b", inputs={"x": [{"from": "a", "output": "text", "label": "y"}]}),
            ],
        }
    )
    assert [n.id for n in parsed.nodes] == ["a", "b"]
    assert [n.index for n in parsed.nodes] == [0, 1]
    node = parsed.node("a")
    assert node is not None
    assert node.params == {"text": "hi", "undeclared": [1]}
    assert parsed.node("missing") is None
    assert "b" in parsed


def test_empty_nodes_parse() -> None:
    assert parse_graph(graph()).nodes == ()


def test_issue_json() -> None:
    issue = refused(graph(text("a", params=1))).first
    assert issue.to_json() == {
        "nodeId": "a",
        "path": "$.graph.nodes[0].params",
        "message": "Node 'params' must be an object.",
    }
    assert "nodeId" not in refused(None).first.to_json()


def test_request_target_is_checked_before_the_graph() -> None:
    for doc in ({"graph": None}, {"graph": graph(), "target": 3}):
        with pytest.raises(RequestInvalid) as info:
            parse_request(doc)
        assert str(info.value) == "'target' is required."
        assert info.value.code == "invalid_request"
        assert info.value.first.path == "$.target"
    with pytest.raises(RequestInvalid):
        parse_request([1])
    with pytest.raises(GraphInvalid, match=r"^Graph must be an object\.$"):
        parse_request({"target": "a"})


def test_request_parses() -> None:
    parsed, target = parse_request({"graph": graph(text("a")), "target": "a"})
    assert target == "a"
    assert parsed.node("a") is not None


def test_error_json_envelope() -> None:
    error = refused(graph(text("a", params=1), text("b", inputs=1)))
    assert error.to_json() == {
        "code": "invalid_graph",
        "message": "Node 'params' must be an object.",
        "nodeId": "a",
        "issues": [issue.to_json() for issue in error.issues],
    }
    assert len(error.issues) == 2
