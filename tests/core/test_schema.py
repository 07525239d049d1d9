"""The params checker: the JSON Schema subset msgspec emits, every violation with its path."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import pytest
from inline_core import Issue, check_params

from ._nodes import catalog

BASE = "$.graph.nodes[1].params"


def check(schema: dict[str, Any], params: dict[str, Any]) -> list[Issue]:
    return check_params(schema, params, node_id="n", base_path=BASE)


def messages(schema: dict[str, Any], params: dict[str, Any]) -> list[str]:
    return [i.message for i in check(schema, params)]


def props(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": []}


INT = props(n={"type": "integer", "minimum": 1, "maximum": 10})
NUM = props(x={"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1})


@pytest.mark.parametrize(
    ("schema", "value", "message"),
    [
        (INT, True, "Expected an integer, got true (at $.graph.nodes[1].params.n)"),
        (INT, 2.0, "Expected an integer, got 2.0 (at $.graph.nodes[1].params.n)"),
        (INT, "3", 'Expected an integer, got "3" (at $.graph.nodes[1].params.n)'),
        (INT, 0, "Expected an integer >= 1, got 0 (at $.graph.nodes[1].params.n)"),
        (INT, 11, "Expected an integer <= 10, got 11 (at $.graph.nodes[1].params.n)"),
        (NUM, False, "Expected a number, got false (at $.graph.nodes[1].params.x)"),
        (NUM, 0, "Expected a number > 0, got 0 (at $.graph.nodes[1].params.x)"),
        (NUM, 1.0, "Expected a number < 1, got 1.0 (at $.graph.nodes[1].params.x)"),
        (
            props(n={"type": "integer", "multipleOf": 8}),
            12,
            "Expected an integer that is a multiple of 8, got 12 (at $.graph.nodes[1].params.n)",
        ),
        (
            props(s={"enum": ["euler", "heun"]}),
            "dpm",
            'Expected one of "euler", "heun", got "dpm" (at $.graph.nodes[1].params.s)',
        ),
        (
            props(s={"type": "string", "minLength": 2}),
            "a",
            'Expected a string of at least 2 characters, got "a" (at $.graph.nodes[1].params.s)',
        ),
        (
            props(s={"type": "string", "maxLength": 1}),
            "ab",
            'Expected a string of at most 1 character, got "ab" (at $.graph.nodes[1].params.s)',
        ),
        (
            props(s={"type": "string", "pattern": "^a"}),
            "ba",
            "Expected a string matching '^a', got \"ba\" (at $.graph.nodes[1].params.s)",
        ),
        (
            props(s={"const": "x"}),
            "y",
            'Expected exactly "x", got "y" (at $.graph.nodes[1].params.s)',
        ),
    ],
)
def test_single_violation(schema: dict[str, Any], value: Any, message: str) -> None:
    key = next(iter(schema["properties"]))
    issues = check(schema, {key: value})
    assert [i.message for i in issues] == [message]
    assert issues[0].got == value
    assert issues[0].node_id == "n"
    assert issues[0].path == f"{BASE}.{key}"


def test_ints_are_numbers_and_bools_are_not_enum_ints() -> None:
    assert check(NUM, {"x": 0.5}) == []
    assert check(props(x={"type": "number"}), {"x": 3}) == []
    assert messages(props(e={"enum": [1, 2]}), {"e": True}) == [
        "Expected one of 1, 2, got true (at $.graph.nodes[1].params.e)"
    ]
    assert check(props(e={"enum": [1, 2]}), {"e": 1.0}) == []


def test_every_violation_is_reported_and_undeclared_params_are_refused() -> None:
    schema = props(
        a={"type": "integer", "maximum": 3},
        b={"type": "string"},
        c={"type": "boolean"},
    )
    issues = check(schema, {"c": 1, "a": 4, "undeclared": object(), "b": None})
    paths = [f"{BASE}.c", f"{BASE}.a", f"{BASE}.undeclared", f"{BASE}.b"]
    assert [i.path for i in issues] == paths
    assert [i.expected for i in issues] == ["boolean", "integer <= 3", None, "string"]
    assert issues[2].message == f"Unknown param 'undeclared' (at {BASE}.undeclared)."


def test_a_misspelled_param_names_the_closest_declared_one() -> None:
    schema = props(width={"type": "integer"}, height={"type": "integer"})
    assert messages(schema, {"widht": 100}) == [
        f"Unknown param 'widht' (at {BASE}.widht). Did you mean 'width'?"
    ]
    assert messages(schema, {"Height": 1}) == [
        f"Unknown param 'Height' (at {BASE}.Height). Did you mean 'height'?"
    ]


def test_a_schema_admitting_extra_keys_keeps_them() -> None:
    schema = {**props(a={"type": "integer"}), "additionalProperties": True}
    assert check(schema, {"a": 1, "anything": [1]}) == []
    typed = {**props(a={"type": "integer"}), "additionalProperties": {"type": "string"}}
    assert messages(typed, {"b": 2}) == [f"Expected a string, got 2 (at {BASE}.b)"]


def test_required_params() -> None:
    schema = {**props(a={"type": "integer"}), "required": ["a"]}
    issues = check(schema, {})
    assert [(i.path, i.message) for i in issues] == [
        (f"{BASE}.a", f"Missing required param 'a' (at {BASE}.a)")
    ]


def test_arrays_and_tuples() -> None:
    schema = props(
        sizes={"type": "array", "items": {"type": "integer", "minimum": 0}, "maxItems": 3},
        pair={
            "type": "array",
            "minItems": 2,
            "maxItems": 2,
            "prefixItems": [{"type": "integer"}, {"type": "string"}],
            "items": False,
        },
    )
    assert check(schema, {"sizes": [1, 2], "pair": [1, "a"]}) == []
    assert messages(schema, {"sizes": [1, -1, 2, 3], "pair": ["a", "b", "c"]}) == [
        f"Expected an array of at most 3 items, got [1,-1,2,3] (at {BASE}.sizes)",
        f"Expected an integer >= 0, got -1 (at {BASE}.sizes[1])",
        f'Expected an array of at most 2 items, got ["a","b","c"] (at {BASE}.pair)',
        f'Expected an integer, got "a" (at {BASE}.pair[0])',
    ]


def test_nested_ref_and_tagged_any_of() -> None:
    entry = catalog().lookup("test/styled")
    assert entry is not None
    schema = entry.descriptor.params_schema
    good = {
        "extras": [{"type": "lora", "name": "a", "strength": 2}, {"type": "embedding", "name": "e"}]
    }
    assert check(schema, good) == []
    bad = {
        "extras": [
            {"type": "lora", "name": "a", "strength": 3},
            {"type": "embedding"},
            {"type": "lora", "name": "b", "oops": 1},
            "x",
        ],
        "scale": 2,
        "limit": "a",
        "flag": 1,
    }
    assert [(i.path, i.expected) for i in check(schema, bad)] == [
        (f"{BASE}.extras[0].strength", "number <= 2"),
        (f"{BASE}.extras[1].name", None),
        (f"{BASE}.extras[3]", "object"),
        (f"{BASE}.scale", "number <= 1"),
        (f"{BASE}.limit", "integer or null"),
        (f"{BASE}.flag", "boolean"),
    ]
    assert check(schema, {"limit": None}) == []
    assert messages(schema, {"extras": [{"type": "embedding"}]}) == [
        f"Missing required field 'name' (at {BASE}.extras[0].name)"
    ]


def test_untagged_union_blames_the_fitting_branch() -> None:
    schema = props(v={"anyOf": [{"type": "integer", "maximum": 5}, {"type": "string"}]})
    assert messages(schema, {"v": 9}) == [f"Expected an integer <= 5, got 9 (at {BASE}.v)"]
    assert messages(schema, {"v": [1]}) == [f"Expected an integer or string, got [1] (at {BASE}.v)"]


def test_nested_objects_forbid_and_type_extra_keys() -> None:
    schema = props(
        strict={"type": "object", "properties": {"a": {}}, "additionalProperties": False},
        table={
            "type": "object",
            "additionalProperties": {"type": "integer"},
            "propertyNames": {"minLength": 2},
        },
    )
    assert messages(
        schema, {"strict": {"a": 1, "b": 2}, "table": {"ok": 1, "x": 2, "yy": "z"}}
    ) == [
        f"Unexpected field 'b' (at {BASE}.strict.b)",
        f'Expected a string of at least 2 characters, got "x" (at {BASE}.table.x)',
        f'Expected an integer, got "z" (at {BASE}.table.yy)',
    ]


def test_agrees_with_msgspec_on_sdk_schemas() -> None:
    entry = catalog().lookup("test/generate")
    assert entry is not None

    class Params(msgspec.Struct):
        width: Annotated[int, msgspec.Meta(ge=64, le=8192)] = 1024

    for value in (64, 8192, 63, 8193, True, 1.0, "1", None):
        try:
            msgspec.convert({"width": value}, Params)
            accepted = True
        except msgspec.ValidationError:
            accepted = False
        assert (check(entry.descriptor.params_schema, {"width": value}) == []) == accepted, value
