"""What the OpenAPI document says of /v1 beyond the handlers' signatures.

``POST /v1/runs`` takes its body as plain JSON (the kernel validates it, every problem at
once), so the request schema is documented from the structs below, which describe the contract's
run request; every route lists the answers it gives (201/200/409/422/404...) with the error
envelope's schema.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any, Final

import msgspec
from inline_sdk import Descriptor
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import (
    OpenAPIFormat,
    OpenAPIType,
    Operation,
    Reference,
    RequestBody,
    Schema,
)
from litestar.openapi.spec import OpenAPIMediaType as MediaEntry

from ..runs import Submitted

__all__ = (
    "ModelListDoc",
    "RawUploadOperation",
    "RunRequestOperation",
    "errors",
    "run_request_schema",
)

_REF: Final = "#/components/schemas/{name}"


class EdgeDoc(msgspec.Struct, frozen=True):
    """An edge: which node's output feeds this input port."""

    output: str
    source: str = msgspec.field(name="from")


class NodeDoc(msgspec.Struct, frozen=True):
    """A node of the graph: its id (the client's), its type (from /v1/models), its params."""

    id: str
    type: str
    params: dict[str, Any] = {}
    inputs: dict[str, EdgeDoc | list[EdgeDoc]] = {}


class GraphDoc(msgspec.Struct, frozen=True, rename="camel"):
    """The graph document (contract 1.1)."""

    schema_version: int
    nodes: list[NodeDoc]


class RunRequest(msgspec.Struct, frozen=True, rename="camel"):
    """A run request: the graph and the node whose outputs are wanted (contract 4.1).

    ``clientRunId`` makes a submission idempotent: the same id and graph answer 200 with the
    first run; the same id with another graph answers 409."""

    graph: GraphDoc
    target: str
    client_run_id: str | None = None


class ErrorBody(msgspec.Struct, frozen=True, rename="camel"):
    """What went wrong; ``errors`` lists every validation problem (a 422's)."""

    code: str
    message: str
    node_id: str | None = None
    errors: list[dict[str, Any]] | None = None


class ErrorEnvelope(msgspec.Struct, frozen=True):
    """The contract's error envelope."""

    error: ErrorBody


class ModelListDoc(msgspec.Struct, frozen=True, rename="camel"):
    """``GET /v1/models``: every node descriptor, and the registry version (also the ETag)."""

    registry_version: str
    models: list[Descriptor]


_MEANINGS: Final = {
    400: "A malformed request",
    401: "A bearer token is required",
    404: "Not found",
    409: "Conflict",
    413: "The body is too large",
    415: "Unsupported media type",
    416: "Range not satisfiable",
    422: "Invalid input: every problem, each with its JSON path",
}


def errors(*statuses: int) -> dict[int, ResponseSpec]:
    """The error answers of a route, each with the envelope's schema."""
    return {
        s: ResponseSpec(
            ErrorEnvelope, description=_MEANINGS.get(s, "Error"), generate_examples=False
        )
        for s in statuses
    }


def submit_responses() -> dict[int, ResponseSpec]:
    """``POST /v1/runs``' answers."""
    return {
        200: ResponseSpec(
            Submitted,
            description="A replay: this clientRunId was submitted before with the same graph",
            generate_examples=False,
        ),
        **errors(409, 413, 422),
    }


def run_request_schema() -> Schema:
    """The run request's schema, inlined (Litestar builds the components from handlers only)."""
    top, defs = msgspec.json.schema_components([RunRequest], ref_template=_REF)
    return _schema(_inline(top[0], defs))


@dataclass
class RunRequestOperation(Operation):
    """``POST /v1/runs``' operation, with the run request as its documented body."""

    def __post_init__(self) -> None:
        self.request_body = RequestBody(
            content={"application/json": MediaEntry(schema=run_request_schema())},
            description="The run request: the graph document and its target",
            required=True,
        )


@dataclass
class RawUploadOperation(Operation):
    """``POST /v1/assets``' operation: the body is the file itself (its kind from its bytes)."""

    def __post_init__(self) -> None:
        binary = Schema(type=OpenAPIType.STRING, format=OpenAPIFormat.BINARY)
        types = ("application/octet-stream", "image/png", "image/jpeg", "image/webp", "video/mp4")
        self.request_body = RequestBody(
            content={t: MediaEntry(schema=binary) for t in types},
            description=(
                "The file's raw bytes (curl --data-binary @photo.png). The kind comes from the "
                "bytes: PNG, JPEG, WebP, GIF; MP4/MOV, WebM/MKV, AVI; WAV, MP3, Ogg, FLAC, M4A. "
                "A multipart form with exactly one file part is unpacked."
            ),
            required=True,
        )


def _inline(body: Any, defs: dict[str, Any]) -> Any:
    """``body`` with every ``$ref`` replaced by its definition (the doc structs never recurse)."""
    if isinstance(body, list):
        return [_inline(b, defs) for b in body]
    if not isinstance(body, dict):
        return body
    if "$ref" in body:
        return _inline(defs[body["$ref"].rsplit("/", 1)[-1]], defs)
    return {k: _inline(v, defs) for k, v in body.items()}


_FIELDS: Final = {f.name for f in fields(Schema)}
_RENAMES: Final = {"not": "schema_not", "if": "schema_if", "else": "schema_else"}


def _schema(body: Any) -> Any:
    """A JSON Schema dict (msgspec's) as Litestar's ``Schema`` (``$ref`` as ``Reference``)."""
    if isinstance(body, list):
        return [_schema(b) for b in body]
    if not isinstance(body, dict):
        return body
    if "$ref" in body:
        return Reference(ref=body["$ref"])
    kwargs: dict[str, Any] = {}
    for key, value in body.items():
        name = _RENAMES.get(key) or re.sub(r"(?<!^)([A-Z])", r"_\1", key).lower()
        if name not in _FIELDS:
            continue
        if name == "properties":
            kwargs[name] = {k: _schema(v) for k, v in value.items()}
        elif name in ("required", "enum", "type", "default", "examples", "title", "description"):
            kwargs[name] = value
        else:
            kwargs[name] = _schema(value)
    return Schema(**kwargs)
