"""Deployments on a live server: replicas up before ``--wait`` returns, two calls at once on two
replicas, autoscaling up under a queue and back down, a restart that brings them back, the CLI,
and clear refusals of bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from ._helpers import body, node
from .conftest import ROOT, Server, start_server

INLINE = str(ROOT / ".venv" / "bin" / "inline")


def eventually(check: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    """``check()``'s first truthy answer (bounded: a server-side state reached on its own)."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}")
        time.sleep(0.05)  # polling the server's state, which its own task changes


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[Server, httpx.Client]]:
    data, inputs = tmp_path / "data", tmp_path / "inputs"
    inputs.mkdir()
    server = start_server(data, inputs)
    token = (data / "operator-token").read_text().strip()
    client = server.client(timeout=300, headers={"Authorization": f"Bearer {token}"})
    try:
        yield server, client
    finally:
        client.close()
        server.stop()


def gate_run(folder: Path, tag: str) -> dict[str, Any]:
    return body("g", node("g", "testpack/gate", {"file": str(folder / f"open-{tag}"), "tag": tag}))


def deployment(client: httpx.Client, name: str) -> dict[str, Any]:
    r = client.get(f"/v1/deployments/{name}")
    assert r.status_code == 200, r.text
    return r.json()


def cli(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [INLINE, *args], env=server.env, capture_output=True, text=True, timeout=300
    )


def test_a_deployment_serves_calls_at_once_survives_a_restart_and_undeploys(live, tmp_path):
    server, client = live
    r = client.post("/v1/deployments?wait=true&timeout=240",
                    json={"node": "testpack/gate", "replicas": 2})  # fmt: skip
    assert r.status_code == 201, r.text
    view = r.json()
    assert view["name"] == "testpack-gate" and view["pack"] == "testpack"
    assert view["state"] == "ready" and view["target"] == 2
    assert [x["state"] for x in view["replicas"]] == ["ready", "ready"]
    first_pids = {x["pid"] for x in view["replicas"]}
    assert len(first_pids) == 2
    health = client.get("/v1/health").json()
    assert [d["name"] for d in health["deployments"]] == ["testpack-gate"]
    assert health["workers"]["testpack"]["replicas"] == 2
    # two held calls at once: one on each replica
    runs = [client.post("/v1/runs", json=gate_run(tmp_path, t)).json()["runId"] for t in "ab"]
    busy = eventually(
        lambda: (
            (v := deployment(client, "testpack-gate"))["load"] == 2
            and all(x["state"] == "busy" for x in v["replicas"])
        ),
        "both replicas busy",
    )
    assert busy
    for t in "ab":
        (tmp_path / f"open-{t}").write_text("open")
    for run_id in runs:
        eventually(lambda rid=run_id: client.get(f"/v1/runs/{rid}").json()["status"] == "done",
                   f"run {run_id} done")  # fmt: skip
    # a replica killed is replaced: the deployment is back to two
    victim = next(iter(first_pids))
    os.kill(victim, signal.SIGKILL)
    view = eventually(
        lambda: (
            (v := deployment(client, "testpack-gate"))["state"] == "ready"
            and victim not in {x["pid"] for x in v["replicas"]}
            and v
        ),
        "the killed replica replaced",
        timeout=240,
    )
    assert len(view["replicas"]) == 2
    first_pids = {x["pid"] for x in view["replicas"]} | {victim}
    # a restart brings the deployment back with its replicas
    server.stop()
    again = start_server(server.data_dir, tmp_path / "inputs", port=server.port)
    try:
        view = eventually(
            lambda: (v := deployment(client, "testpack-gate"))["state"] == "ready" and v,
            "the deployment back and ready after the restart",
            timeout=240,
        )
        pids = {x["pid"] for x in view["replicas"]}
        assert len(pids) == 2 and not pids & first_pids
        listed = cli(again, "deployments")
        assert listed.returncode == 0, listed.stderr
        assert "testpack-gate" in listed.stdout and "2/2" in listed.stdout
        gone = cli(again, "undeploy", "testpack-gate")
        assert gone.returncode == 0, gone.stderr
        assert client.get("/v1/deployments").json() == {"deployments": []}
        eventually(lambda: "testpack" not in client.get("/v1/health").json()["workers"],
                   "the replicas stopped")  # fmt: skip
        assert cli(again, "undeploy", "testpack-gate").returncode == 2  # no such deployment
    finally:
        again.stop()


def test_a_range_scales_up_under_a_queue_and_back_down_when_idle(live, tmp_path):
    server, client = live
    r = client.post("/v1/deployments", json={
        "node": "testpack/gate", "min": 1, "max": 2, "target_ongoing": 1,
        "upscale_delay_s": 0, "downscale_delay_s": 0.2,
    })  # fmt: skip
    assert r.status_code == 201, r.text
    eventually(lambda: deployment(client, "testpack-gate")["state"] == "ready", "one replica up",
               timeout=240)  # fmt: skip
    runs = [client.post("/v1/runs", json=gate_run(tmp_path, t)).json()["runId"] for t in "xy"]
    view = eventually(
        lambda: (
            (v := deployment(client, "testpack-gate"))["target"] == 2
            and sum(x["state"] == "busy" for x in v["replicas"]) == 2
            and v
        ),
        "scaled to 2 with both replicas busy",
        timeout=240,
    )
    up = view["decisions"][-1]
    assert (up["replicasFrom"], up["replicasTo"]) == (1, 2) and "ongoing" in up["reason"]
    for t in "xy":
        (tmp_path / f"open-{t}").write_text("open")
    for run_id in runs:
        eventually(lambda rid=run_id: client.get(f"/v1/runs/{rid}").json()["status"] == "done",
                   f"run {run_id} done")  # fmt: skip
    view = eventually(
        lambda: (
            (v := deployment(client, "testpack-gate"))["target"] == 1
            and len(v["replicas"]) == 1
            and v
        ),
        "back to min after the downscale delay",
    )
    down = view["decisions"][-1]
    assert (down["replicasFrom"], down["replicasTo"]) == (2, 1)
    assert "deployment testpack-gate: 2 -> 1 replica(s)" in server.log.read_text()


def test_bad_deployments_are_refused_with_one_clear_line(live):
    server, client = live
    unauthorised = httpx.get(f"{server.url}/v1/deployments")
    assert unauthorised.status_code == 401
    cases = [
        ({"node": "nope/nothing"}, "Unknown node or model 'nope/nothing'"),
        ({"node": "testpack/gate", "min": 3, "max": 2}, "'min' (3) is more than 'max' (2)"),
        ({"node": "testpack/gate", "replicas": 2, "min": 1}, "not both"),
        ({"node": "testpack/gate", "replicas": 0}, "'replicas' is a whole number >= 1"),
        ({"node": "testpack/gate", "colour": "red"}, "Unknown field(s) colour"),
    ]
    for asked, message in cases:
        r = client.post("/v1/deployments", json=asked)
        assert r.status_code == 422, (asked, r.text)
        assert message in r.json()["error"]["message"], r.json()
    ok = client.post("/v1/deployments", json={"node": "testpack/gate"})
    assert ok.status_code == 201, ok.text
    twin = client.post("/v1/deployments", json={"node": "testpack/echo", "name": "other"})
    assert twin.status_code == 422 and "deployed already as 'testpack-gate'" in twin.text
    same = client.post("/v1/deployments", json={"node": "testpack/gate"})
    assert same.status_code in (409, 422)
    for args, message in [
        (("deploy", "nope/nothing"), "Unknown node or model"),
        (("deploy", "testpack/echo", "--min", "3", "--max", "2"), "is more than 'max'"),
    ]:
        out = cli(server, *args)
        assert out.returncode == 2, out
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines


def test_a_range_from_zero_starts_on_a_call_and_goes_back_to_zero_when_idle(live, tmp_path):
    _, client = live
    r = client.post("/v1/deployments", json={
        "node": "testpack/gate", "min": 0, "max": 1, "idle_s": 0.3, "downscale_delay_s": 0,
    })  # fmt: skip
    assert r.status_code == 201, r.text
    assert r.json()["state"] == "scaled to zero" and r.json()["replicas"] == []
    (tmp_path / "open-z").write_text("open")
    run_id = client.post("/v1/runs", json=gate_run(tmp_path, "z")).json()["runId"]
    eventually(lambda: client.get(f"/v1/runs/{run_id}").json()["status"] == "done", "run done",
               timeout=240)  # fmt: skip
    view = eventually(
        lambda: (
            (v := deployment(client, "testpack-gate"))["state"] == "scaled to zero"
            and len(v["decisions"]) >= 2
            and v
        ),
        "back to zero after idle_s",
    )
    assert [(d["replicasFrom"], d["replicasTo"]) for d in view["decisions"]] == [(0, 1), (1, 0)]
    eventually(lambda: "testpack" not in client.get("/v1/health").json()["workers"],
               "the replica stopped")  # fmt: skip


def test_auto_is_one_replica_per_gpu_and_one_without(live):
    _, client = live
    gpus = len(client.get("/v1/health").json()["device"]["gpus"])
    r = client.post("/v1/deployments", json={"node": "testpack/gate", "replicas": "auto"})
    assert r.status_code == 201, r.text
    assert r.json()["min"] == r.json()["max"] == max(1, gpus)
    bad = client.post("/v1/deployments", json={"node": "testpack/echo", "replicas": "many"})
    assert bad.status_code == 422 and 'or "auto"' in bad.json()["error"]["message"]


@pytest.mark.parametrize(
    ("gpus_gb", "model", "replicas"),
    [
        ((24, 16), "z_image_turbo_bf16.safetensors", 2),  # bf16 resident on both
        ((24, 16, 6), "z_image_turbo_bf16.safetensors", 2),  # the 6 GB card would offload
        ((6,), "z_image_turbo_bf16.safetensors", 1),  # none holds it whole: one replica
        ((), "z_image_turbo_bf16.safetensors", 1),  # no GPU: one, on the CPU
        ((24, 6), "ae.safetensors", 2),  # a VAE fits anywhere
    ],
)
def test_auto_counts_the_gpus_that_hold_the_model_whole(
    tmp_path: Path, gpus_gb: tuple[int, ...], model: str, replicas: int
):
    """``replicas: "auto"`` sizes the model from its headers (real-size sparse Z-Image files)
    and asks the device policy, GPU by GPU, whether it stays resident there."""
    from types import SimpleNamespace

    from inline_core import GIB, Gpu, Inventory
    from inline_host.runs import DeploymentService

    from ..models._sparse import write_all

    models = tmp_path / "models"
    write_all(models)
    inventory = Inventory(64 * GIB, 60 * GIB, tuple(
        Gpu(i, f"{gb} GB card", gb * GIB, gb * GIB) for i, gb in enumerate(gpus_gb)
    ))  # fmt: skip
    engine = SimpleNamespace(
        supervisor=SimpleNamespace(broker=SimpleNamespace(inventory=inventory, profile="gpu-max")),
        settings=SimpleNamespace(models_roots=(models,), ray_address=None),
    )
    service = DeploymentService(engine, None)  # type: ignore[arg-type]
    assert service._auto("zimage", model) == replicas


def test_serve_replicas_ask_ray_for_what_the_model_card_says(tmp_path: Path):
    """A deployed model folder's card (``requirements``, written by the import's estimate or
    edited by its owner) decides each Serve replica's ``ray_actor_options``: its GPUs and
    memory; a value that is not a number is left out and said."""
    from types import SimpleNamespace

    from inline_host.hub import card_requirements, write_card
    from inline_host.runs import DeploymentService
    from inline_host.runs._deployment_views import Autoscaling, DeploymentSpec
    from inline_host.workers._ray_placement import Demand, with_requirements
    from inline_host.workers._serve import _options

    models = tmp_path / "models"
    folder = models / "llm" / "big-llm"
    folder.mkdir(parents=True)
    write_card(folder, {"requirements.vram_gb": 70.0, "requirements.devices": 1,
                        "requirements.ram_gb": 8.0}, "estimate")  # fmt: skip
    card = json.loads((folder / "inline.json").read_text())
    card["requirements"]["devices"] = 2  # its owner knows it needs two cards
    (folder / "inline.json").write_text(json.dumps(card))

    engine = SimpleNamespace(settings=SimpleNamespace(models_roots=(models,), ray_address="x"))
    service = DeploymentService(engine, None, requirements=card_requirements)  # type: ignore[arg-type]
    spec = DeploymentSpec(name="big", node="text/complete", pack="text", model="big-llm", min=1,
                          max=1, autoscaling=Autoscaling(), created_at=0)  # fmt: skip
    needs = service.requirements_of(spec)
    assert needs["devices"] == 2 and needs["ram_gb"] == 8.0

    gpu_pack = Demand(num_gpus=1.0, memory=3 << 30, resources={"fast": 1.0})
    actor = _options(with_requirements(gpu_pack, needs), 1, 1, {}, 1)["ray_actor_options"]
    assert actor == {"num_cpus": 0, "num_gpus": 2.0, "memory": 8 << 30, "resources": {"fast": 1.0}}
    # a pack that asks for no GPU (a CPU-only cluster, or no model files) gets none from a card
    assert with_requirements(Demand(), needs).num_gpus == 0.0
    odd = with_requirements(gpu_pack, {"devices": "two", "ram_gb": -1})
    assert (odd.num_gpus, odd.memory) == (1.0, 3 << 30)
    assert "devices 'two', ram_gb -1 ignored" in odd.note
    # no model, or a model without a card: the pack's own demand
    assert service.requirements_of(msgspec.structs.replace(spec, model=None)) == {}
    (models / "llm" / "no-card").mkdir()
    assert service.requirements_of(msgspec.structs.replace(spec, model="no-card")) == {}
