"""``POST /openai/v1/embeddings``: OpenAI's embeddings API over runs of an embedding node.

``model`` names an encoder folder of ``models/embeddings/``, run by the embedding node whose
``model`` param picks those folders (found by what the descriptors declare: the SDK's
``is_embedding_node``, never a node id). Each request is one durable run of that node with
every input as its ``texts`` (the node batches them, and batches concurrent requests
together), visible in ``/v1/runs`` with its takes; the answer waits for it. ``input`` is a
string or a list of strings (token arrays are refused: send the text); ``encoding_format``
``float`` or ``base64`` (each vector's little-endian float32 bytes, as OpenAI sends them);
``dimensions`` cuts the vectors to their first values, normalised again when the model's are,
and is refused naming the field when the model's vectors are shorter. ``user`` is accepted.
Errors use OpenAI's shape; a run that failed for the client's mistake is a 4xx
(``_failures``), a retry of the request attaches to the run of its first try (``_attempts``),
and a run whose client went is cancelled once no retry listens to it (``_listeners``).
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Mapping
from typing import Any, Final

import msgspec
from inline_core import DocumentInvalid
from inline_sdk.embed import read_embeddings
from litestar import Controller, Request, Response, post
from litestar.di import NamedDependency, Provide

from ...runs import Conflict, RunService
from .._models import EmbeddingModel, ModelsService
from ._attempts import Attempt, Attempts, provide_attempts, submit_once
from ._failures import NO_RETRY, failure_type, run_failed
from ._listeners import Listeners, client_gone, provide_listeners, until_answered
from ._schemas import OpenAIError, openai_error

__all__ = ("EmbeddingsRequest", "OpenAIEmbeddingsController", "parse", "run_request")

NODE_ID: Final = "embed"
#: The most inputs one request may carry (OpenAI's limit).
MAX_INPUTS: Final = 2048
ENCODINGS: Final = ("float", "base64")
#: What the embedding node raises for ``dimensions`` beyond the model's (``inline_sdk.embed``).
DIMENSIONS_REFUSED: Final = "DimensionsRefused"


class EmbeddingsRequest(msgspec.Struct, kw_only=True):
    """The request body (``input`` is checked by ``parse``: a string or a list of strings)."""

    model: str
    input: Any
    encoding_format: str = "float"
    dimensions: int | None = None
    user: str | None = None


class EmbeddingItem(msgspec.Struct, kw_only=True):
    object: str = "embedding"
    index: int
    embedding: list[float] | str


class EmbeddingsUsage(msgspec.Struct, kw_only=True):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResponse(msgspec.Struct, kw_only=True):
    object: str = "list"
    data: list[EmbeddingItem]
    model: str
    usage: EmbeddingsUsage


def _texts(value: Any) -> list[str]:
    """``input`` as a list of texts; raises ``OpenAIError`` naming what is wrong."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise OpenAIError(400, "'input' must be a non-empty string or a non-empty list of "
                          "strings", param="input")  # fmt: skip
    if len(items) > MAX_INPUTS:
        raise OpenAIError(400, f"'input' holds {len(items)} items: at most {MAX_INPUTS} go in "
                          "one request", param="input")  # fmt: skip
    if all(isinstance(x, int) and not isinstance(x, bool) for x in items) or any(
        isinstance(x, list) for x in items
    ):
        raise OpenAIError(400, "'input' as token arrays is not supported: send the text "
                          "(a string or a list of strings)", param="input")  # fmt: skip
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise OpenAIError(400, f"input[{i}] must be a string, got {type(item).__name__}",
                              param="input")  # fmt: skip
        if not item:
            raise OpenAIError(400, f"input[{i}] is empty: each input must be a non-empty "
                              "string", param="input")  # fmt: skip
    return list(items)


def parse(raw: bytes) -> tuple[EmbeddingsRequest, list[str]]:
    """The body and its texts, checked; raises ``OpenAIError`` naming the field."""
    try:
        req = msgspec.json.decode(raw, type=EmbeddingsRequest)
    except msgspec.ValidationError as exc:
        message, _, at = str(exc).rpartition(" - at `")
        param = at.rstrip("`").removeprefix("$.") if message else None
        raise OpenAIError(400, message or str(exc), param=param) from None
    except msgspec.DecodeError as exc:
        raise OpenAIError(400, f"The body is not valid JSON: {exc}") from None
    texts = _texts(req.input)
    if req.encoding_format not in ENCODINGS:
        raise OpenAIError(400, f"'encoding_format' must be 'float' or 'base64', got "
                          f"{req.encoding_format!r}", param="encoding_format")  # fmt: skip
    if req.dimensions is not None and req.dimensions < 1:
        raise OpenAIError(400, f"'dimensions' must be at least 1, got {req.dimensions}",
                          param="dimensions")  # fmt: skip
    return req, texts


def run_request(model: EmbeddingModel, texts: list[str], dimensions: int | None) -> dict[str, Any]:
    """The ``/v1`` run request for one embeddings request."""
    params = {**model.params, "texts": texts, "dimensions": dimensions or 0}
    node = {"id": NODE_ID, "type": model.node, "params": params}
    return {"graph": {"schemaVersion": 1, "nodes": [node]}, "target": NODE_ID}


def _outputs(service: RunService, run_id: str, model: str) -> dict[str, str]:
    """The node's outputs from the run's takes (one per output port)."""
    state = service.state(run_id)
    if state is not None and state.status == "error":
        if failure_type(service, state) == DIMENSIONS_REFUSED:
            message = state.error.message if state.error is not None else "dimensions refused"
            raise OpenAIError(400, message, param="dimensions", headers=NO_RETRY)
        raise run_failed(service, state, model)
    if state is None or state.status != "done":
        kind = "cancelled" if state is not None and state.status == "cancelled" else "server_error"
        what = state.status if state is not None else "gone"
        raise OpenAIError(500, f"The embeddings' run {run_id} is {what}", type=kind,
                          headers=NO_RETRY)  # fmt: skip
    out: dict[str, str] = {}
    for take in state.takes:
        record = service.take(take.id)
        data = service.take_text(record) if record is not None else None
        if record is not None and data is not None and take.node_id == NODE_ID:
            out[record.port] = data.decode("utf-8")
    if "embeddings" not in out:
        raise OpenAIError(500, f"The embeddings' outputs are gone (run {run_id})",
                          type="server_error")  # fmt: skip
    return out


def answer(outputs: Mapping[str, str], model: str, encoding: str) -> EmbeddingsResponse:
    """The node's outputs in OpenAI's shape (``base64``: little-endian float32 bytes)."""
    done = read_embeddings(outputs)
    data = []
    for i, vector in enumerate(done.vectors):
        value: list[float] | str = vector
        if encoding == "base64":
            value = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append(EmbeddingItem(index=i, embedding=value))
    tokens = done.usage.prompt_tokens
    usage = EmbeddingsUsage(prompt_tokens=tokens, total_tokens=tokens)
    return EmbeddingsResponse(data=data, model=model, usage=usage)


class OpenAIEmbeddingsController(Controller):
    path = "/openai/v1"
    exception_handlers = {OpenAIError: openai_error}  # noqa: RUF012 (Litestar's class attribute)
    dependencies = {  # noqa: RUF012 (Litestar's class attribute)
        "attempts": Provide(provide_attempts, sync_to_thread=False),
        "listeners": Provide(provide_listeners, sync_to_thread=False),
    }

    @post("/embeddings", status_code=200, summary="OpenAI embeddings: each request a durable run")
    async def embeddings(
        self,
        service: NamedDependency[RunService],
        models: NamedDependency[ModelsService],
        attempts: NamedDependency[Attempts],
        listeners: NamedDependency[Listeners],
        request: Request[Any, Any, Any],
    ) -> Response[Any]:
        raw = await request.body()
        req, texts = parse(raw)
        model = await models.embedding_model(req.model)
        if model is None:
            raise OpenAIError(
                404,
                f"The model '{req.model}' does not exist (no encoder folder "
                f"models/embeddings/{req.model}, or no embedding node installed)",
                code="model_not_found",
                param="model",
            )
        attempt = Attempt.of("embeddings", request, raw)
        try:
            (run_id,) = await submit_once(
                service, attempts, attempt, [run_request(model, texts, req.dimensions)]
            )
        except DocumentInvalid as exc:
            raise OpenAIError(400, f"Invalid request: {exc}", code="invalid_graph") from None
        except Conflict as exc:
            raise OpenAIError(400, str(exc), code="idempotency_key_reused") from None
        lease = listeners.join([run_id])
        try:
            answered = await until_answered(service, [run_id], request)
        finally:
            await listeners.leave(service, lease)
        if not answered:
            raise client_gone()
        body = answer(_outputs(service, run_id, req.model), req.model, req.encoding_format)
        return Response(body, headers={"X-Inline-Run-Id": run_id})
