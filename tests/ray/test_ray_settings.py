"""Ray settings and the worker's environment, without a cluster."""

from __future__ import annotations

import pytest
from inline_host import Settings
from inline_host.workers._ray_actor import SECRET_ENV, worker_environment


def test_ray_settings_are_read_from_the_environment() -> None:
    s = Settings.from_env(
        {
            "INLINE_RAY_ADDRESS": "10.0.0.2:6379",
            "INLINE_RAY_RESOURCES": "zimage=gpu_node:1, basics=node:10.0.0.5:0.01,zimage=fast",
        }
    )
    assert s.ray_address == "10.0.0.2:6379"
    assert s.ray_resources == {
        "zimage": {"gpu_node": 1.0, "fast": 1.0},
        "basics": {"node:10.0.0.5": 0.01},
    }
    assert Settings.from_env({}).ray_address is None


@pytest.mark.parametrize("bad", ["zimage", "=gpu:1", "zimage=gpu:0", "zimage=gpu:x"])
def test_a_bad_resource_entry_is_a_clear_error(bad: str) -> None:
    with pytest.raises(ValueError, match="INLINE_RAY_RESOURCES entries are pack=resource:amount"):
        Settings.from_env({"INLINE_RAY_RESOURCES": bad})


def test_the_worker_never_sees_the_cluster_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_AUTH_TOKEN", "cluster-secret")
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.2:6379")
    env = worker_environment("per-worker")
    assert env[SECRET_ENV] == "per-worker"
    assert not [k for k in env if k.startswith("RAY_")]
    assert env["HF_HUB_OFFLINE"] == "1"
