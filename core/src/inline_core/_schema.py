"""Checking params against a node's JSON Schema (the subset ``msgspec.json.schema`` emits).

Every violation is reported, each as an ``Issue`` with its full JSON path, a readable message
(``Expected an integer <= 8192, got 9000 (at $.graph.nodes[1].params.width)``), what was
expected and the offending value. Semantics follow msgspec's own decoding, so what passes here
decodes in the worker: a JSON bool is not an integer or a number; an int is a valid number; a
float is never an integer.

Two checks are ours, beyond the contract (which passes undeclared keys and ignores ``step``):
an undeclared top-level param is refused, naming the closest declared one (``Did you mean
'width'?``), unless the schema admits extra keys explicitly (``additionalProperties``); and a
param's ``step`` (counted from its ``min``) is enforced by ``check_steps``, naming the valid
neighbours of an off-step value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import msgspec
from inline_sdk import ParamField

from . import _paths
from ._errors import GraphInvalid, Issue
from ._suggest import did_you_mean

__all__ = ("check_params", "check_steps")

_CODE: Final = GraphInvalid.code
_SHOW_LIMIT: Final = 80

_TYPE_TESTS: Final[Mapping[str, Callable[[Any], bool]]] = {
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "array": lambda v: isinstance(v, list | tuple),
    "object": lambda v: isinstance(v, dict),
}
_ARTICLES: Final = {
    "integer": "an",
    "array": "an",
    "object": "an",
    "number": "a",
    "string": "a",
    "boolean": "a",
}


def check_params(
    schema: dict[str, Any], params: dict[str, Any], *, node_id: str, base_path: str
) -> list[Issue]:
    """Every way ``params`` breaks ``schema``, in document order (empty when they conform)."""
    return _Checker(schema, node_id).check(schema, params, base_path, top=True)


def check_steps(
    fields: Sequence[ParamField], params: Mapping[str, Any], *, node_id: str, base_path: str
) -> list[Issue]:
    """Every numeric param off its ``step`` grid (counted from ``min``, else from 0).

    Values outside ``min``/``max`` or of the wrong type are left to ``check_params``.
    """
    issues: list[Issue] = []
    for field in fields:
        step, value = field.step, params.get(field.key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if not isinstance(step, int | float) or step <= 0:
            continue
        if (field.min is not None and value < field.min) or (
            field.max is not None and value > field.max
        ):
            continue
        base = field.min if field.min is not None else 0
        if _is_multiple(value - base, step):
            continue
        below = base + math.floor((value - base) / step) * step
        neighbours = [n for n in (below, below + step) if field.max is None or n <= field.max]
        shown = " and ".join(_show(_tidy(n, step, base)) for n in neighbours)
        path = _paths.child(base_path, field.key)
        where = f"from {_show(base)} " if base else ""
        message = (
            f"{field.label} ({field.key!r}) moves in steps of {_show(step)} {where}"
            f"and {_show(value)} is not on one; the nearest valid values are {shown} (at {path})"
        )
        expected = f"a multiple of {_show(step)}" + (f" from {_show(base)}" if base else "")
        issues.append(Issue(_CODE, message, node_id, path, expected=expected, got=value))
    return issues


def _tidy(value: float, step: float, base: float) -> float:
    """``value`` rounded to the decimals of ``step`` and ``base`` (0.30000000000000004 -> 0.3)."""
    if isinstance(value, int):
        return value
    return round(value, max(_decimals(step), _decimals(base)))


def _decimals(number: float) -> int:
    text = repr(float(number))
    return 0 if "e" in text else len(text.split(".", 1)[1].rstrip("0"))


class _Checker:
    """One validation: the root schema (for ``$ref``) and the node the issues belong to."""

    def __init__(self, root: dict[str, Any], node_id: str) -> None:
        self.root = root
        self.node_id = node_id

    def check(self, schema: Any, value: Any, path: str, *, top: bool = False) -> list[Issue]:
        if schema is False:
            return [self._issue(f"Unexpected value {_show(value)} (at {path})", path)]
        if not isinstance(schema, dict):
            return []
        issues: list[Issue] = []
        if "$ref" in schema:
            issues += self.check(self.resolve(schema["$ref"]), value, path)
        if "anyOf" in schema:
            issues += self._check_any_of(schema["anyOf"], value, path)
        types = _types(schema)
        if types and not any(_is_type(value, t) for t in types):
            return [*issues, self._fail(path, " or ".join(types), value)]
        if "enum" in schema and not any(_json_equal(value, e) for e in schema["enum"]):
            issues.append(self._fail(path, _one_of(schema["enum"]), value))
        if "const" in schema and not _json_equal(value, schema["const"]):
            issues.append(self._fail(path, f"exactly {_show(schema['const'])}", value))
        if _is_type(value, "number"):
            issues += self._check_number(schema, value, path)
        elif isinstance(value, str):
            issues += self._check_string(schema, value, path)
        elif isinstance(value, list | tuple):
            issues += self._check_array(schema, list(value), path)
        elif isinstance(value, dict):
            issues += self._check_object(schema, value, path, top=top)
        return issues

    def resolve(self, ref: Any) -> Any:
        """The schema a local ``$ref`` (``#/$defs/Name``) points at; ``True`` when unresolvable."""
        if not isinstance(ref, str) or not ref.startswith("#"):
            return True
        target: Any = self.root
        for part in ref[1:].split("/")[1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                return True
            target = target[part]
        return target

    def admits(self, schema: Any, value: Any) -> bool:
        """Whether ``value`` has the shape ``schema`` is about (its type, and for objects any
        single-valued tag property), ignoring finer constraints. Picks the anyOf branch to blame."""
        if not isinstance(schema, dict):
            return schema is not False
        if "$ref" in schema and not self.admits(self.resolve(schema["$ref"]), value):
            return False
        if "anyOf" in schema and not any(self.admits(b, value) for b in schema["anyOf"]):
            return False
        types = _types(schema)
        if types and not any(_is_type(value, t) for t in types):
            return False
        if not types and "enum" in schema:
            members = [*schema["enum"], *([schema["const"]] if "const" in schema else [])]
            if not any(_json_type(value) == _json_type(m) for m in members):
                return False
        if isinstance(value, dict):
            for key, prop in _properties(schema).items():
                tag = _single_value(prop)
                if key in value and tag is not _NO_TAG and not _json_equal(value[key], tag):
                    return False
        return True

    def describe(self, schema: Any) -> str:
        """A short noun phrase for what ``schema`` accepts (``integer``, ``one of "a", "b"``)."""
        if not isinstance(schema, dict):
            return "anything" if schema is not False else "nothing"
        if "$ref" in schema:
            return self.describe(self.resolve(schema["$ref"]))
        if "anyOf" in schema:
            return _join_unique(self.describe(b) for b in schema["anyOf"])
        if "enum" in schema:
            return _one_of(schema["enum"])
        if "const" in schema:
            return _show(schema["const"])
        return " or ".join(_types(schema)) or "anything"

    def _check_any_of(self, branches: list[Any], value: Any, path: str) -> list[Issue]:
        results = [self.check(branch, value, path) for branch in branches]
        if any(not r for r in results):
            return []
        fitting = [r for b, r in zip(branches, results, strict=True) if self.admits(b, value)]
        if len(fitting) == 1:
            return fitting[0]
        expected = _join_unique(self.describe(b) for b in branches)
        return [self._fail(path, expected, value)]

    def _check_number(self, schema: dict[str, Any], value: float, path: str) -> list[Issue]:
        word = _type_word(schema, "number")
        issues: list[Issue] = []
        for key, op, holds in (
            ("minimum", ">=", lambda v, b: v >= b),
            ("maximum", "<=", lambda v, b: v <= b),
            ("exclusiveMinimum", ">", lambda v, b: v > b),
            ("exclusiveMaximum", "<", lambda v, b: v < b),
        ):
            bound = schema.get(key)
            if _is_type(bound, "number") and not holds(value, bound):
                issues.append(self._fail(path, f"{word} {op} {_show(bound)}", value))
        step = schema.get("multipleOf")
        if isinstance(step, int | float) and step > 0 and not _is_multiple(value, step):
            issues.append(self._fail(path, f"{word} that is a multiple of {_show(step)}", value))
        return issues

    def _check_string(self, schema: dict[str, Any], value: str, path: str) -> list[Issue]:
        issues: list[Issue] = []
        low, high = schema.get("minLength"), schema.get("maxLength")
        if isinstance(low, int) and len(value) < low:
            issues.append(self._fail(path, f"string of at least {_count(low, 'character')}", value))
        if isinstance(high, int) and len(value) > high:
            issues.append(self._fail(path, f"string of at most {_count(high, 'character')}", value))
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and re.search(pattern, value) is None:
            issues.append(self._fail(path, f"string matching {pattern!r}", value))
        return issues

    def _check_array(self, schema: dict[str, Any], value: list[Any], path: str) -> list[Issue]:
        issues: list[Issue] = []
        low, high = schema.get("minItems"), schema.get("maxItems")
        if isinstance(low, int) and len(value) < low:
            issues.append(self._fail(path, f"array of at least {_count(low, 'item')}", value))
        if isinstance(high, int) and len(value) > high:
            issues.append(self._fail(path, f"array of at most {_count(high, 'item')}", value))
        prefix = schema.get("prefixItems")
        prefix = prefix if isinstance(prefix, list) else []
        for index, item in enumerate(value):
            if index < len(prefix):
                issues += self.check(prefix[index], item, _paths.item(path, index))
            elif "items" in schema:
                if schema["items"] is False and isinstance(high, int):
                    continue  # already reported as too many items
                issues += self.check(schema["items"], item, _paths.item(path, index))
        return issues

    def _check_object(
        self, schema: dict[str, Any], value: dict[str, Any], path: str, *, top: bool
    ) -> list[Issue]:
        issues: list[Issue] = []
        properties = _properties(schema)
        extra = schema.get("additionalProperties", True)
        names = schema.get("propertyNames")
        for key, item in value.items():
            key_path = _paths.child(path, str(key))
            if names is not None:
                issues += self.check(names, key, key_path)
            if key in properties:
                issues += self.check(properties[key], item, key_path)
            elif top and "additionalProperties" not in schema:
                message = f"Unknown param {key!r} (at {key_path}).{did_you_mean(key, properties)}"
                issues.append(self._issue(message, key_path))
            elif top and extra is not False:
                issues += self.check(extra, item, key_path)
            elif extra is False:
                what = "field" if properties else "key"
                message = f"Unexpected {what} {key!r} (at {key_path})"
                issues.append(self._issue(message, key_path))
            else:
                issues += self.check(extra, item, key_path)
        for key in schema.get("required", ()):
            if key not in value:
                key_path = _paths.child(path, str(key))
                what = "param" if top else "field"
                message = f"Missing required {what} {key!r} (at {key_path})"
                issues.append(self._issue(message, key_path))
        low, high = schema.get("minProperties"), schema.get("maxProperties")
        if isinstance(low, int) and len(value) < low:
            issues.append(self._fail(path, f"object with at least {_count(low, 'key')}", value))
        if isinstance(high, int) and len(value) > high:
            issues.append(self._fail(path, f"object with at most {_count(high, 'key')}", value))
        return issues

    def _fail(self, path: str, expected: str, got: Any) -> Issue:
        message = f"Expected {_with_article(expected)}, got {_show(got)} (at {path})"
        return Issue(_CODE, message, self.node_id, path, expected=expected, got=got)

    def _issue(self, message: str, path: str) -> Issue:
        return Issue(_CODE, message, self.node_id, path)


_NO_TAG: Final = object()


def _types(schema: dict[str, Any]) -> list[str]:
    declared = schema.get("type")
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, list):
        return [t for t in declared if isinstance(t, str)]
    return []


def _type_word(schema: dict[str, Any], fallback: str) -> str:
    return " or ".join(_types(schema)) or fallback


def _properties(schema: dict[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties")
    return properties if isinstance(properties, dict) else {}


def _single_value(schema: Any) -> Any:
    """The one value a tag property allows (``const``, or a one-member ``enum``)."""
    if not isinstance(schema, dict):
        return _NO_TAG
    if "const" in schema:
        return schema["const"]
    members = schema.get("enum")
    if isinstance(members, list) and len(members) == 1:
        return members[0]
    return _NO_TAG


def _is_type(value: Any, name: str) -> bool:
    test = _TYPE_TESTS.get(name)
    return True if test is None else test(value)


def _json_type(value: Any) -> str:
    for name in ("boolean", "null", "number", "string", "array", "object"):
        if _TYPE_TESTS[name](value):
            return name
    return type(value).__name__


def _json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON sees it: ``true`` is not ``1``; ``1`` equals ``1.0``; arrays by item."""
    kind = _json_type(a)
    if kind != _json_type(b):
        return False
    if kind == "array":
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if kind == "object":
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def _is_multiple(value: float, step: float) -> bool:
    if isinstance(value, int) and isinstance(step, int):
        return value % step == 0
    quotient = value / step
    return math.isclose(quotient, round(quotient), rel_tol=1e-9, abs_tol=1e-9)


def _with_article(expected: str) -> str:
    article = _ARTICLES.get(expected.split(" ", 1)[0])
    return f"{article} {expected}" if article else expected


def _one_of(members: list[Any]) -> str:
    return "one of " + ", ".join(_show(m) for m in members)


def _join_unique(parts: Any) -> str:
    return " or ".join(dict.fromkeys(parts))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _show(value: Any) -> str:
    """A value as JSON, shortened for messages."""
    try:
        text = msgspec.json.encode(value).decode()
    except (TypeError, ValueError, OverflowError):
        text = repr(value)
    return text if len(text) <= _SHOW_LIMIT else text[: _SHOW_LIMIT - 1] + "…"
