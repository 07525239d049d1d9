"""Ray fixtures: one real two-node cluster on loopback per session, and engines that use it.

The test process is the host's Ray driver: it joins with the cluster's per-run token. Pack
venvs are built once per session (basics, the test packs, and the Z-Image packs with the tiny
models, shared with the other folders: ``tests/_builds.py``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from inline_host import Settings

from .._builds import data_dir_over, shared_packs
from ..models.conftest import model_data_dir, pack_python, tiny  # noqa: F401 (fixtures)
from ._cluster import Cluster, two_nodes

ROOT = Path(__file__).resolve().parents[2]
TEST_PACKS = (ROOT / "tests" / "packs" / "testpack", ROOT / "tests" / "packs" / "otherpack")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The cluster, and this process set up as a driver of it (token, no ~/.ray)."""
    # a short path: Ray's socket paths must fit in 107 bytes
    temp = Path(os.environ.get("INLINE_RAY_TEST_TMP", "/tmp")) / f"ir-{os.getpid()}"
    with two_nodes(temp) as started, pytest.MonkeyPatch.context() as mp:
        for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_USAGE_STATS_ENABLED"):
            mp.setenv(name, started.env[name])
        mp.delenv("RAY_ADDRESS", raising=False)
        mp.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
        try:
            yield started
        finally:
            import ray

            if ray.is_initialized():
                ray.shutdown()


@pytest.fixture(scope="session")
def ray_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir over the session's pack venvs (first-party and the test packs), built once,
    recorded in packs.lock."""
    names = ("basics", "primitives", "zimage", "testpack", "otherpack")
    shared_packs(tmp_path_factory, names, TEST_PACKS)
    return data_dir_over(tmp_path_factory, "inline-ray-data")


def make_settings(
    data_dir: Path, work: Path, address: str, *, packs: tuple[Path, ...] = TEST_PACKS, **env: str
) -> Settings:
    """Settings over ``data_dir``'s venvs; workers on the cluster at ``address`` (or local)."""
    inputs = work / "inputs"
    inputs.mkdir(parents=True, exist_ok=True)
    base = Settings.from_env(
        {
            "INLINE_DATA_DIR": str(data_dir),
            "INLINE_MODELS_DIR": str(work / "models"),
            "INLINE_INPUT_ROOTS": os.pathsep.join([str(inputs), str(ROOT / "examples")]),
            # the tests' files (the gates a node waits on), readable by sandboxed workers
            "INLINE_SANDBOX_READ": os.environ.get("INLINE_SANDBOX_READ", ""),
            **({"INLINE_RAY_ADDRESS": address} if address else {}),
            **env,
        }
    )
    return replace(base, extra_packs=packs, cancel_grace=30.0)
