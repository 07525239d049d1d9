"""The OpenAI routes find their nodes by declaration, never by node id: chat nodes by the SDK's
chat shape (local ones by their ``llm`` picker and the architecture it declares, hosted ones by
their key param), image nodes by their ports and the catalog their ``model`` picks; the ``llm``
pickers narrowed by the declared architecture, each folder's config read once per change."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from inline_host.api._models import chat_nodes
from inline_host.api.openai._images import image_nodes, resolve_model
from inline_host.api.openai._schemas import OpenAIError
from inline_host.hub import HostedNode
from inline_host.models import ModelCatalogs, llm_entries, serve_descriptor
from inline_sdk import Context, Image, Output, Param, Port, node
from inline_sdk.chat import ChatCompletion, Completion


@contextlib.contextmanager
def counted_reads() -> Iterator[list[Path]]:
    """Every file ``Path.read_text`` reads inside the block."""
    reads: list[Path] = []
    original = Path.read_text

    def counting(self: Path, *args: Any, **kwargs: Any) -> str:
        reads.append(self)
        return original(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Path, "read_text", counting)
        yield reads


def _chat_params(model: Any) -> Any:
    """A ``complete`` with the chat params and the given ``model`` annotation."""

    def complete(
        self: Any,
        ctx: Context,
        prompt: str | None,
        *,
        model: str = "",
        system: Annotated[str, Param("System")] = "",
        max_new_tokens: Annotated[int, Param("Max new tokens", min=1)] = 8,
        temperature: Annotated[float, Param("Temperature")] = 0.7,
        top_p: Annotated[float, Param("Top p")] = 1.0,
        seed: Annotated[int, Param("Seed", widget="seed")] = -1,
        messages: Annotated[list[dict[str, Any]], Param("Messages", internal=True)] = [],  # noqa: B006
        tools: Annotated[list[dict[str, Any]], Param("Tools", internal=True)] = [],  # noqa: B006
        stop: Annotated[list[str], Param("Stop", internal=True)] = [],  # noqa: B006
        api_key_secret: Annotated[str, Param("Key secret")] = "ACME_KEY",
    ) -> Completion:
        return Completion(text=prompt or "")

    complete.__annotations__["model"] = model  # the picker this node declares
    return complete


class LocalChat(ChatCompletion, type="acme/chat", title="Local chat"):
    complete = _chat_params(  # type: ignore[assignment]
        Annotated[str, Param("Model", widget="select", options_from="llm", architecture="causal")]
    )


class HostedChat(ChatCompletion, type="acme/hosted-chat", title="Hosted chat"):
    complete = _chat_params(Annotated[str, Param("Model")])  # type: ignore[assignment]


def _text_node(node_type: str, model: Any) -> Any:
    """A text-to-text node whose ``model`` param is annotated ``model``."""

    def run(ctx: Context, text: Annotated[str, Port("Text")], *, model: str = "") -> str:
        return text

    run.__annotations__["model"] = model
    run.__annotations__["return"] = Annotated[str, Output("text", "Text")]
    return node(node_type, title=node_type, category="Text", output_kind="text")(run)


def _llm_picker(**architecture: str) -> Any:
    return Annotated[str, Param("Model", widget="select", options_from="llm", **architecture)]


rewrite = _text_node("acme/seq", _llm_picker(architecture="seq2seq"))
any_llm = _text_node("acme/any-llm", _llm_picker())


@node("acme/folders", title="Folders", category="Image", output_kind="image")
def folders(
    ctx: Context,
    prompt: Annotated[str, Port("Prompt")],
    *,
    model: Annotated[str, Param("Model", widget="select", options_from="diffusers")] = "",
) -> Annotated[Image, Output("image", "Image")]:
    return Image(b"")


@node("acme/picture", title="Picture", category="Image", output_kind="image")
def picture(
    ctx: Context, prompt: Annotated[str, Port("Prompt")]
) -> Annotated[Image, Output("image", "Image")]:
    return Image(b"")


DECLARED = [
    rewrite.descriptor,
    HostedChat.spec.descriptor,
    LocalChat.spec.descriptor,
    folders.descriptor,
    picture.descriptor,
]


def test_chat_nodes_are_found_by_their_shape() -> None:
    found = chat_nodes(DECLARED)
    assert found.local == (("acme/chat", "causal"),)
    assert found.hosted == (HostedNode("acme/hosted-chat", "api_key_secret", "ACME_KEY"),)


def test_image_nodes_are_found_by_their_ports_and_catalog(tmp_path: Path) -> None:
    images = image_nodes(DECLARED)
    assert images.folders is not None and images.folders.type == "acme/folders"
    assert [d.type for d in images.nodes] == ["acme/picture"]
    catalogs = ModelCatalogs([tmp_path])
    assert resolve_model(images, catalogs, None) == ("acme/picture", {})  # no folder yet
    pipe = tmp_path / "diffusers" / "sd-tiny"
    pipe.mkdir(parents=True)
    (pipe / "model.safetensors").write_bytes(b"x")
    assert resolve_model(images, catalogs, None) == ("acme/folders", {"model": "sd-tiny"})
    assert resolve_model(images, catalogs, "acme/picture") == ("acme/picture", {})
    with pytest.raises(OpenAIError) as caught:
        resolve_model(images, catalogs, "acme/folders")  # the folder runner is no model itself
    assert caught.value.status == 404 and "sd-tiny, acme/picture" in str(caught.value)


def _llm(root: Path, name: str, arch: str) -> Path:
    folder = root / "llm" / name
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"x")
    (folder / "config.json").write_text(json.dumps({"architectures": [arch]}))
    return folder


def test_llm_pickers_are_narrowed_by_the_declared_architecture(tmp_path: Path) -> None:
    catalogs = ModelCatalogs([tmp_path])
    _llm(tmp_path, "qwen", "Qwen3ForCausalLM")
    t5 = _llm(tmp_path, "t5", "T5ForConditionalGeneration")

    def options(descriptor: Any) -> list[str]:
        served = serve_descriptor(descriptor, None, catalogs)
        field = next(f for f in served.params if f.key == "model")
        return [o.value for o in field.options]

    assert options(LocalChat.spec.descriptor) == ["qwen"]
    assert options(rewrite.descriptor) == ["t5"]
    assert options(any_llm.descriptor) == ["qwen", "t5"]  # declares none: every folder
    # a config replaced under its name is read again; an untouched one never is
    (t5 / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    os.utime(t5 / "config.json", ns=(1, 1))
    assert llm_entries(catalogs, "causal") == ("qwen", "t5")
    with counted_reads() as reads:
        for _ in range(3):
            assert llm_entries(catalogs, "causal") == ("qwen", "t5")
    assert reads == []


class _Registry:
    def __init__(self, version: str, declared: list[Any]) -> None:
        self.version = version
        self.declared = declared
        self.listed = 0

    def descriptors(self) -> list[Any]:
        self.listed += 1
        return list(self.declared)


class _Engine:
    """What ``ModelsService`` asks of the engine; ``refresh`` installs ``pending`` (a pack
    installed from the CLI while serving)."""

    def __init__(self, root: Path) -> None:
        self.catalogs = ModelCatalogs([root])
        self.registry = _Registry("v1", [rewrite.descriptor])
        self.pending: _Registry | None = None
        self.refreshed = 0

    async def refresh(self) -> bool:
        self.refreshed += 1
        if self.pending is not None:
            self.registry, self.pending = self.pending, None
            return True
        return False


@pytest.mark.anyio
async def test_the_chat_route_refreshes_and_keeps_what_it_read(tmp_path: Path) -> None:
    from inline_host import Settings
    from inline_host.api._models import ModelsService
    from inline_host.hub import SecretStore

    _llm(tmp_path, "qwen", "Qwen3ForCausalLM")
    engine = _Engine(tmp_path)
    settings = Settings(tmp_path / "data", tmp_path, (), hosted_models=("acme/big", "other/x"))
    models = ModelsService(engine, settings)  # type: ignore[arg-type]
    assert await models.chat_model("qwen") is None  # no chat pack yet
    engine.pending = _Registry("v2", [rewrite.descriptor, LocalChat.spec.descriptor,
                                      HostedChat.spec.descriptor])  # fmt: skip
    found = await models.chat_model("qwen")  # the install is picked up by the lookup itself
    assert found is not None and (found.node, found.params) == ("acme/chat", {"model": "qwen"})
    hosted = await models.chat_model("acme/big")
    assert hosted is not None and hosted.node == "acme/hosted-chat" and not hosted.available
    assert hosted.params == {"model": "big", "api_key_secret": "ACME_KEY"}
    SecretStore(settings.data_dir).set("ACME_KEY", "k", service="acme")
    listed = {m.id: m.available for m in await models.chat_models()}
    assert listed == {"qwen": True, "acme/big": True}  # other/x: no node runs it
    listed_before = engine.registry.listed
    with counted_reads() as reads:
        for _ in range(3):
            assert await models.chat_model("acme/big") is not None
            assert await models.chat_model("qwen") is not None
            assert len(await models.chat_models()) == 2
    assert reads == []  # no config.json, no secrets file read again
    assert engine.registry.listed == listed_before  # the chat nodes kept by registry version
    assert engine.refreshed >= 11
