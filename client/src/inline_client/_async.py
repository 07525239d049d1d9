"""``AsyncClient``: complete, rewrite, generate, runs, events and takes over ``/v1``; models
imported, listed and removed; deployments."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import quote

import httpx
import msgspec

from ._errors import ApiError, DownloadFailed, GraphInvalid, RunFailed
from ._nodes import NodeDoc, NodeList, find_node, is_folder_generator, is_rewriter
from ._types import (
    TERMINAL,
    CompletionChunk,
    Deployment,
    Download,
    Event,
    GeneratedImage,
    GeneratedMesh,
    LocalModel,
    Other,
    RunState,
    Snapshot,
    Take,
    ToolCall,
    decode_event,
)
from ._ws import messages

_state = msgspec.json.Decoder(RunState)
_take = msgspec.json.Decoder(Take)
_nodes = msgspec.json.Decoder(NodeList)
_download = msgspec.json.Decoder(Download)
_model = msgspec.json.Decoder(LocalModel)
_deployment = msgspec.json.Decoder(Deployment)


class _ModelList(msgspec.Struct, frozen=True):
    models: list[LocalModel]


_models = msgspec.json.Decoder(_ModelList)
#: Seconds between two looks at a download's progress.
POLL_S = 0.2


def _graph(*nodes: dict[str, Any]) -> dict[str, Any]:
    return {"schemaVersion": 1, "nodes": list(nodes)}


def _raise_for(r: httpx.Response) -> None:
    if r.status_code < 400:
        return
    try:
        body = r.json()
    except ValueError:
        raise ApiError(r.status_code, "http_error", r.text[:500]) from None
    raw = body.get("error", {}) if isinstance(body, dict) else {}
    error: dict[str, Any] = raw if isinstance(raw, dict) else {"message": str(raw)}
    code = str(error.get("code") or error.get("type") or "http_error")
    message = str(error.get("message") or body)
    if r.status_code == 422 and "errors" in error:
        raise GraphInvalid(r.status_code, code, message, list(error["errors"]), body)
    if r.status_code == 422 and code == "invalid_graph":
        raise GraphInvalid(r.status_code, code, message, [error], body)
    raise ApiError(r.status_code, code, message, body)


class AsyncRun:
    """A submitted run: follow its ``events()``, ``wait()`` for it, read its ``takes()``."""

    def __init__(self, client: AsyncClient, run_id: str) -> None:
        self.client = client
        self.id = run_id

    async def events(self) -> AsyncIterator[Event | Other]:
        """Every event (a snapshot first) until the terminal one."""
        url = self.client.url.replace("http", "ws", 1) + f"/v1/runs/{self.id}/events"
        async for raw in messages(url, self.client._auth, self.client.timeout):
            event = decode_event(raw)
            yield event
            if isinstance(event, TERMINAL):
                return
            if isinstance(event, Snapshot) and event.state.finished:
                return

    async def state(self) -> RunState:
        r = await self.client._http.get(f"/v1/runs/{self.id}")
        _raise_for(r)
        return _state.decode(r.content)

    async def wait(self, *, check: bool = True) -> RunState:
        """The final state (``RunFailed`` unless it is ``done``, when ``check``)."""
        async for _event in self.events():
            pass
        state = await self.state()
        if check and state.status != "done":
            raise RunFailed(state)
        return state

    async def takes(self) -> list[Take]:
        return list((await self.state()).takes)

    async def cancel(self) -> None:
        _raise_for(await self.client._http.delete(f"/v1/runs/{self.id}"))


class AsyncClient:
    """An async client of an Inline server (``token``: its bearer token, if it has one)."""

    def __init__(self, url: str = "http://127.0.0.1:8848", token: str | None = None, *,
                 timeout: float = 600.0) -> None:  # fmt: skip
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._auth = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(base_url=self.url, headers=self._auth, timeout=timeout)
        self._descriptors: tuple[str, tuple[NodeDoc, ...]] = ("", ())  # (ETag, nodes)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # runs and takes ---------------------------------------------------------------------------
    async def run(self, graph: dict[str, Any], target: str, **extra: Any) -> AsyncRun:
        """Submit ``graph`` (``{"schemaVersion": 1, "nodes": [...]}``); ``GraphInvalid`` lists
        every problem."""
        r = await self._http.post("/v1/runs", json={"graph": graph, "target": target, **extra})
        _raise_for(r)
        return AsyncRun(self, r.json()["runId"])

    async def take(self, take_id: str) -> Take:
        r = await self._http.get(f"/v1/takes/{take_id}")
        _raise_for(r)
        return _take.decode(r.content)

    async def take_bytes(self, take_id: str) -> bytes:
        r = await self._http.get(f"/v1/takes/{take_id}/bytes")
        _raise_for(r)
        return r.content

    # models -----------------------------------------------------------------------------------
    async def import_model(
        self, source: str, *, task: str | None = None, wait: bool = True, timeout: float = 3600.0
    ) -> Download:
        """Import a model into the server's ``models/``: ``source`` is ``hf:ORG/NAME[@REV]``,
        ``url:https://.../x.safetensors``, ``file:/path/on/the/server`` or a plugin's;
        ``task`` the kind of model (``llm``, ``vae``..., when the source cannot tell). Waits
        for its end (``wait``; ``DownloadFailed`` unless it is ``done``, or not done within
        ``timeout`` seconds); the download as it ended, or as it started. Needs the operator
        token."""
        body: dict[str, Any] = {"source": source}
        if task is not None:
            body["task"] = task
        r = await self._http.post("/v1/downloads", json=body)
        _raise_for(r)
        download = _download.decode(r.content)
        if not wait:
            return download
        deadline = time.monotonic() + timeout
        while not download.finished:
            if time.monotonic() > deadline:
                raise DownloadFailed(download, f"still {download.state} after {timeout:g} s")
            await asyncio.sleep(POLL_S)  # the server's child fetches; its state is polled
            download = await self.download(download.download_id)
        if download.state != "done":
            raise DownloadFailed(download)
        return download

    async def download(self, download_id: str) -> Download:
        """A download's state and progress per file."""
        r = await self._http.get(f"/v1/downloads/{quote(download_id, safe='')}")
        _raise_for(r)
        return _download.decode(r.content)

    async def list_models(self) -> list[LocalModel]:
        """The models of the server's ``models/``, by folder then name."""
        r = await self._http.get("/v1/models/local")
        _raise_for(r)
        return list(_models.decode(r.content).models)

    async def show_model(self, name: str) -> LocalModel:
        """One model with its card; ``name`` is ``NAME``, or ``FOLDER/NAME`` where two folders
        hold one name (``ApiError`` 404 for none)."""
        r = await self._http.get(f"/v1/models/local/{quote(name, safe='/')}")
        _raise_for(r)
        return _model.decode(r.content)

    async def remove_model(self, name: str, *, force: bool = False) -> LocalModel:
        """Remove a model from the server; refused (``ApiError`` 409, naming them) while a
        deployment serves it or a run uses it, unless ``force``, which undeploys and cancels
        them first. The model removed. Needs the operator token."""
        params = {"force": "true"} if force else {}
        r = await self._http.delete(f"/v1/models/local/{quote(name, safe='/')}", params=params)
        _raise_for(r)
        return _model.decode(r.content)

    # deployments ------------------------------------------------------------------------------
    async def deploy(
        self,
        target: str,
        *,
        model: str | None = None,
        replicas: int | str | None = None,
        min: int | None = None,
        max: int | None = None,
        name: str | None = None,
        wait: bool = False,
        timeout: float = 600.0,
        **knobs: Any,
    ) -> Deployment:
        """Keep ``target`` (a node type, or a model a node's picker offers; ``model`` picks
        the node's model) running on ``replicas`` (a count or ``"auto"``), or between ``min``
        and ``max`` by its calls; ``knobs`` are ``max_per_node`` and the autoscaling ones
        (``target_ongoing``, ``upscale_delay_s``, ``downscale_delay_s``, ``idle_s``). With
        ``wait``, answers once every replica is up (or ``timeout`` passed: see ``state``).
        Needs the operator token."""
        body: dict[str, Any] = {"node": target}
        asked = {"model": model, "replicas": replicas, "min": min, "max": max, "name": name}
        body.update({k: v for k, v in {**asked, **knobs}.items() if v is not None})
        if wait:  # the server answers once the replicas are up: the request waits as long
            params = {"wait": "true", "timeout": f"{timeout:g}"}
            r = await self._http.post(
                "/v1/deployments", json=body, params=params, timeout=timeout + 30
            )
        else:
            r = await self._http.post("/v1/deployments", json=body)
        _raise_for(r)
        return _deployment.decode(r.content)

    async def deployment(self, name: str) -> Deployment:
        """One deployment: its replicas, state, load and queue."""
        r = await self._http.get(f"/v1/deployments/{quote(name, safe='')}")
        _raise_for(r)
        return _deployment.decode(r.content)

    async def undeploy(self, name: str) -> None:
        """Stop a deployment's replicas (calls running end first). Needs the operator token."""
        _raise_for(await self._http.delete(f"/v1/deployments/{quote(name, safe='')}"))

    # tasks ------------------------------------------------------------------------------------
    async def complete(
        self,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        max_new_tokens: int = 2048,
        temperature: float = 0.7,
        **params: Any,
    ) -> AsyncIterator[CompletionChunk]:
        """A chat completion, streamed: content and thinking chunks as they come, then one with
        the tool calls and the ``finish_reason`` (``stop``, ``length`` or ``tool_calls``).

        ``model`` is a folder of ``models/llm/``; ``params`` are ``text/complete``'s (``top_p``,
        ``seed``, ``stop``...)."""
        body: dict[str, Any] = {
            "model": model, "messages": messages, "stream": True,
            "max_tokens": max_new_tokens, "temperature": temperature,
        }  # fmt: skip
        if tools:
            body["tools"] = tools
        body.update(params)
        calls: dict[int, dict[str, str]] = {}
        async with self._http.stream("POST", "/openai/v1/chat/completions", json=body) as r:
            if r.status_code >= 400:
                await r.aread()
                _raise_for(r)
            async for line in r.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    return
                chunk = json.loads(data)
                if "error" in chunk:
                    raise ApiError(500, str(chunk["error"].get("type")), chunk["error"]["message"])
                for choice in chunk.get("choices", []):
                    delta = choice.get("delta", {})
                    for tc in delta.get("tool_calls") or []:
                        call = calls.setdefault(
                            tc["index"], {"id": "", "name": "", "arguments": ""}
                        )
                        call["id"] = tc.get("id") or call["id"]
                        fn = tc.get("function") or {}
                        call["name"] = fn.get("name") or call["name"]
                        call["arguments"] += fn.get("arguments") or ""
                    finish = choice.get("finish_reason")
                    content = delta.get("content") or ""
                    thinking = delta.get("reasoning_content") or ""
                    if content or thinking or finish:
                        yield CompletionChunk(
                            content=content,
                            thinking=thinking,
                            tool_calls=[ToolCall(**calls[i]) for i in sorted(calls)]
                            if finish
                            else [],
                            finish_reason=finish,
                        )

    async def rewrite(self, model: str, text: str, **params: Any) -> str:
        """``text`` rewritten by an encoder-decoder folder of ``models/llm/`` (``prefix``,
        ``max_new_tokens``, ``num_beams``, ``temperature``, ``seed``), on the server's rewrite
        node (``text/rewrite``: found by what it declares)."""
        node = await self._node(is_rewriter, "rewrites text with an encoder-decoder model")
        graph = _graph(
            {"id": "text", "type": "input/text", "params": {"text": text}},
            {"id": "rewrite", "type": node, "params": {"model": model, **params},
             "inputs": {"text": {"from": "text", "output": "text"}}},
        )  # fmt: skip
        run = await self.run(graph, "rewrite")
        state = await run.wait()
        take = next((t for t in state.takes if t.kind == "text" and t.node_id == "rewrite"), None)
        if take is None:
            raise ApiError(500, "no_take", f"run {run.id} produced no text take")
        return (await self.take_bytes(take.id)).decode()

    async def generate(self, node_or_model: str, prompt: str, *, image: bytes | None = None,
                       **params: Any) -> GeneratedImage:  # fmt: skip
        """An image from a prompt: ``node_or_model`` is a generation node type
        (``alibaba/z-image-turbo``) or a diffusers folder of ``models/diffusers/`` (run by the
        node whose ``model`` picks those folders, ``diffusers/generate``); ``image`` (PNG bytes)
        for image-to-image; ``params`` are the node's."""
        if "/" not in node_or_model:  # a folder name: node types always hold a slash
            node = await self._node(is_folder_generator, "runs models/diffusers/ folders")
            node_or_model, params = node, {"model": node_or_model, **params}
        nodes: list[dict[str, Any]] = [
            {"id": "prompt", "type": "input/text", "params": {"text": prompt}}
        ]
        inputs: dict[str, Any] = {"prompt": {"from": "prompt", "output": "text"}}
        if image is not None:
            nodes.append(await self._image_node(image))
            inputs["image"] = {"from": "image", "output": "image"}
        nodes.append({"id": "generate", "type": node_or_model, "params": params, "inputs": inputs})
        take, data = await self._made(nodes, "generate", "image")
        width, height = _png_size(data)
        return GeneratedImage(image=data, width=width, height=height, params=dict(take.params),
                              take=take)  # fmt: skip

    async def mesh(self, node: str, image: bytes, **params: Any) -> GeneratedMesh:
        """A mesh from an image through an image-to-mesh node (``mesh/relief``...): the
        binary glTF bytes, with its vertex and face counts."""
        nodes = [
            await self._image_node(image),
            {"id": "mesh", "type": node, "params": params,
             "inputs": {"image": {"from": "image", "output": "image"}}},
        ]  # fmt: skip
        take, data = await self._made(nodes, "mesh", "mesh")
        vertices, faces = glb_counts(data)
        return GeneratedMesh(glb=data, vertices=vertices, faces=faces, params=dict(take.params),
                             take=take)  # fmt: skip

    async def _node(self, fits: Callable[[NodeDoc], bool], what: str) -> str:
        """The type of the server's first node that ``fits`` (the descriptors are fetched again
        only when their ETag changed); ``ApiError`` (404 ``node_not_found``) when none does."""
        etag, nodes = self._descriptors
        r = await self._http.get("/v1/models", headers={"If-None-Match": etag} if etag else {})
        if r.status_code != 304:
            _raise_for(r)
            nodes = _nodes.decode(r.content).models
            self._descriptors = (r.headers.get("etag", ""), nodes)
        found = find_node(nodes, fits)
        if found is None:
            raise ApiError(404, "node_not_found", f"The server has no node that {what}.")
        return found

    async def _image_node(self, image: bytes) -> dict[str, Any]:
        """An ``input/image`` node over ``image`` uploaded as an asset."""
        r = await self._http.post(
            "/v1/assets", content=image, headers={"Content-Type": "application/octet-stream"}
        )
        _raise_for(r)
        asset = {"ref": "asset", "id": r.json()["id"]}
        return {"id": "image", "type": "input/image", "params": {"asset": asset}}

    async def _made(
        self, nodes: list[dict[str, Any]], target: str, kind: str
    ) -> tuple[Take, bytes]:
        """Run ``nodes`` to ``target``; its ``kind`` take and that take's bytes."""
        run = await self.run(_graph(*nodes), target)
        state = await run.wait()
        take = next((t for t in state.takes if t.kind == kind and t.node_id == target), None)
        if take is None:
            raise ApiError(500, "no_take", f"run {run.id} produced no {kind}")
        return take, await self.take_bytes(take.id)


def glb_counts(data: bytes) -> tuple[int, int]:
    """(vertices, faces) of a binary glTF: from its JSON chunk's accessors (no geometry read)."""
    if len(data) < 20 or data[:4] != b"glTF":
        raise ApiError(500, "not_glb", "the mesh take is not binary glTF")
    size = int.from_bytes(data[12:16], "little")
    if data[16:20] != b"JSON":
        raise ApiError(500, "not_glb", "the mesh take has no JSON chunk first")
    doc = json.loads(data[20 : 20 + size])
    accessors = doc.get("accessors", [])
    vertices = faces = 0
    for mesh in doc.get("meshes", []):
        for prim in mesh.get("primitives", []):
            position = prim.get("attributes", {}).get("POSITION")
            if position is not None:
                vertices += int(accessors[position]["count"])
            if prim.get("indices") is not None:
                faces += int(accessors[prim["indices"]]["count"]) // 3
    return vertices, faces


def _png_size(data: bytes) -> tuple[int, int]:
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return 0, 0
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
