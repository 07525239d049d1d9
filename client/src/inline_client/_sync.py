"""``Client``: the same calls as ``AsyncClient``, blocking (each client runs its own loop)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any, TypeVar

from ._async import AsyncClient, AsyncRun
from ._types import (
    CompletionChunk,
    Deployment,
    Download,
    Event,
    GeneratedImage,
    GeneratedMesh,
    LocalModel,
    Other,
    RunState,
    Take,
)

T = TypeVar("T")


class Run:
    """A submitted run (blocking): ``events()``, ``wait()``, ``takes()``, ``cancel()``."""

    def __init__(self, client: Client, run: AsyncRun) -> None:
        self._client = client
        self._run = run
        self.id = run.id

    def events(self) -> Iterator[Event | Other]:
        return self._client._iterate(self._run.events())

    def state(self) -> RunState:
        return self._client._call(self._run.state())

    def wait(self, *, check: bool = True) -> RunState:
        return self._client._call(self._run.wait(check=check))

    def takes(self) -> list[Take]:
        return self._client._call(self._run.takes())

    def cancel(self) -> None:
        self._client._call(self._run.cancel())


class Client:
    """A blocking client of an Inline server (see ``AsyncClient`` for each call)."""

    def __init__(self, url: str = "http://127.0.0.1:8848", token: str | None = None, *,
                 timeout: float = 600.0) -> None:  # fmt: skip
        self._loop = asyncio.new_event_loop()
        self._async = AsyncClient(url, token, timeout=timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if not self._loop.is_closed():
            self._loop.run_until_complete(self._async.aclose())
            self._loop.close()

    def _call(self, coro: Any) -> Any:
        return self._loop.run_until_complete(coro)

    def _iterate(self, agen: AsyncIterator[T]) -> Iterator[T]:
        try:
            while True:
                try:
                    yield self._loop.run_until_complete(agen.__anext__())  # type: ignore[arg-type]
                except StopAsyncIteration:
                    return
        finally:
            close = getattr(agen, "aclose", None)
            if close is not None and not self._loop.is_closed():
                self._loop.run_until_complete(close())

    def run(self, graph: dict[str, Any], target: str, **extra: Any) -> Run:
        return Run(self, self._call(self._async.run(graph, target, **extra)))

    def take(self, take_id: str) -> Take:
        return self._call(self._async.take(take_id))

    def take_bytes(self, take_id: str) -> bytes:
        return self._call(self._async.take_bytes(take_id))

    def complete(
        self,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        max_new_tokens: int = 2048,
        temperature: float = 0.7,
        **params: Any,
    ) -> Iterator[CompletionChunk]:
        return self._iterate(
            self._async.complete(model, messages, tools, max_new_tokens, temperature, **params)
        )

    def rewrite(self, model: str, text: str, **params: Any) -> str:
        return self._call(self._async.rewrite(model, text, **params))

    def generate(self, node_or_model: str, prompt: str, *, image: bytes | None = None,
                 **params: Any) -> GeneratedImage:  # fmt: skip
        return self._call(self._async.generate(node_or_model, prompt, image=image, **params))

    def mesh(self, node: str, image: bytes, **params: Any) -> GeneratedMesh:
        return self._call(self._async.mesh(node, image, **params))

    def import_model(
        self, source: str, *, task: str | None = None, wait: bool = True, timeout: float = 3600.0
    ) -> Download:
        return self._call(self._async.import_model(source, task=task, wait=wait, timeout=timeout))

    def download(self, download_id: str) -> Download:
        return self._call(self._async.download(download_id))

    def list_models(self) -> list[LocalModel]:
        return self._call(self._async.list_models())

    def show_model(self, name: str) -> LocalModel:
        return self._call(self._async.show_model(name))

    def remove_model(self, name: str, *, force: bool = False) -> LocalModel:
        return self._call(self._async.remove_model(name, force=force))

    def deploy(
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
        return self._call(self._async.deploy(
            target, model=model, replicas=replicas, min=min, max=max, name=name, wait=wait,
            timeout=timeout, **knobs,
        ))  # fmt: skip

    def deployment(self, name: str) -> Deployment:
        return self._call(self._async.deployment(name))

    def undeploy(self, name: str) -> None:
        self._call(self._async.undeploy(name))
