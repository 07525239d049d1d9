"""The client's models and deployments on a real server: a ``file:`` folder imported (waited
for), listed, shown with its card, deployed, refused removal while served, undeployed and
removed; every answer typed."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from inline_client import (
    ApiError,
    AsyncClient,
    Client,
    Deployment,
    Download,
    DownloadFailed,
    InlineError,
    LocalModel,
)

from ..api.conftest import Server, start_server


def weights(folder: Path, params: int = 64) -> Path:
    """A folder holding a real safetensors file of ``params`` bf16 zeros."""
    header = json.dumps(
        {"w": {"dtype": "BF16", "shape": [params], "data_offsets": [0, 2 * params]}}
    )
    raw = header.encode()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").write_bytes(
        struct.pack("<Q", len(raw)) + raw + bytes(2 * params)
    )
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data = tmp_path_factory.mktemp("client-models")
    srv = start_server(data, tmp_path_factory.mktemp("client-models-inputs"))
    yield srv
    srv.stop()


def token(server: Server) -> str:
    return (server.data_dir / "operator-token").read_text().strip()


def test_import_list_show_deploy_and_remove_a_model(server: Server, tmp_path: Path):
    src = weights(tmp_path / "client-vae", 128)
    dest = server.data_dir / "models" / "vae" / "client-vae"
    with Client(server.url, token(server)) as inline:
        download = inline.import_model(f"file:{src}", task="vae")
        assert isinstance(download, Download)
        assert download.state == "done" and download.dest == str(dest)
        assert [f.path for f in download.files] == ["model.safetensors"]
        assert (
            download.bytes_done
            == download.bytes_total
            == (src / "model.safetensors").stat().st_size
        )
        assert (dest / "inline.json").is_file()

        models = {m.name: m for m in inline.list_models()}
        assert all(isinstance(m, LocalModel) for m in models.values())
        model = models["client-vae"]
        assert (model.category, model.folder, model.path) == ("vae", "vae", str(dest))
        assert model.source == f"file:{src}" and model.complete and not model.deployed
        assert model.card is None  # the list carries no cards
        shown = inline.show_model("vae/client-vae")
        assert isinstance(shown, LocalModel) and shown.card is not None
        assert shown.card["requirements"]["params"] == 128

        deployment = inline.deploy("testpack/read-model", model="client-vae", name="vae-reader")
        assert isinstance(deployment, Deployment)
        assert (deployment.name, deployment.model, deployment.pack) == (
            "vae-reader", "client-vae", "testpack",
        )  # fmt: skip
        assert inline.show_model("client-vae").deployed
        with pytest.raises(ApiError) as refused:
            inline.remove_model("client-vae")
        assert refused.value.status == 409 and "vae-reader" in refused.value.message
        inline.undeploy("vae-reader")
        with pytest.raises(ApiError) as gone:
            inline.deployment("vae-reader")
        assert gone.value.status == 404

        removed = inline.remove_model("client-vae")
        assert isinstance(removed, LocalModel) and removed.name == "client-vae"
        assert not dest.exists()
        with pytest.raises(ApiError) as missing:
            inline.show_model("client-vae")
        assert missing.value.status == 404 and "No model 'client-vae'" in missing.value.message
        with pytest.raises(ApiError) as unknown:
            inline.import_model("nope:some/thing")
        assert unknown.value.status == 422 and "no source has the prefix" in unknown.value.message


def test_an_import_not_done_in_time_is_a_clear_error_and_can_be_waited_for_again(
    server: Server, tmp_path: Path
):
    src = weights(tmp_path / "late-vae")
    with Client(server.url, token(server)) as inline:
        with pytest.raises(DownloadFailed) as late:
            inline.import_model(f"file:{src}", task="vae", timeout=0)
        assert isinstance(late.value, InlineError)
        assert late.value.download.state in ("queued", "running") and "after 0 s" in str(late.value)
        again = inline.import_model(f"file:{src}", task="vae")  # the same download, or a no-op
        assert again.state == "done"
        assert inline.show_model("late-vae").complete
        inline.remove_model("late-vae")


@pytest.mark.anyio
async def test_the_async_client_imports_and_force_removes(server: Server, tmp_path: Path):
    src = weights(tmp_path / "async-vae")
    async with AsyncClient(server.url, token(server)) as inline:
        started = await inline.import_model(f"file:{src}", task="vae", wait=False)
        assert isinstance(started, Download) and not started.finished
        done = await inline.import_model(f"file:{src}", task="vae")
        assert done.state == "done"
        assert "async-vae" in {m.name for m in await inline.list_models()}
        removed = await inline.remove_model("async-vae", force=True)
        assert isinstance(removed, LocalModel) and removed.folder == "vae"
        assert "async-vae" not in {m.name for m in await inline.list_models()}
