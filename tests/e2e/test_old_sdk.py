"""A pack built against the oldest SDK this host speaks (1.0.0) keeps running unchanged.

Its venv holds the real SDK 1.0.0 wheel (built from this repository's history, kept under
``tests/data/wheels``), not the host's: the worker knows no capabilities, no streaming, no
broker and no chunks, and the host must never send it a message it did not announce.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from inline_host import Engine
from inline_registry import PackEnv, PackInfo, PackSource, merge, probe, read_cached_welcome
from inline_registry._envs import READY
from inline_registry._uv import uv_binary, uv_env
from inline_sdk.protocol import TextValue

from .._builds import build_packs
from ._graphs import n, request

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]
WHEEL = ROOT / "tests" / "data" / "wheels" / "inline_sdk-1.0.0-py3-none-any.whl"
OLDPACK = ROOT / "tests" / "packs" / "oldpack"


@pytest.fixture(scope="module")
def old_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PackEnv]:
    """The old pack's venv: SDK 1.0.0 pinned, installed with uv as a pack author would."""
    root = tmp_path_factory.mktemp("oldpack-env")
    venv = root / "venv"
    uv = uv_binary()
    env = uv_env()
    subprocess.run([uv, "venv", "--quiet", str(venv)], check=True, env=env)
    subprocess.run(
        [uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
         str(WHEEL), str(OLDPACK)],
        check=True,
        env=env,
    )  # fmt: skip
    env = PackEnv(PackSource("oldpack", OLDPACK, first_party=False), "sdk-1.0.0", root)
    (root / READY).write_text(env.fingerprint)  # built: the host must use it as it is
    assert env.ready
    yield env


async def test_a_pack_on_sdk_1_0_runs_unchanged(old_env: PackEnv, settings) -> None:
    version = subprocess.run(
        [str(old_env.python), "-c", "import inline_sdk; print(inline_sdk.SDK_VERSION)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert version == "1.0.0"
    welcome = await anyio.to_thread.run_sync(probe, old_env)
    assert welcome.sdk_version == "1.0.0" and welcome.capabilities == []
    info = PackInfo(old_env, welcome.pack_version, welcome.sdk_version, ("oldpack/shout",))
    base = await anyio.to_thread.run_sync(
        lambda: build_packs(settings.packs_dir, ("basics",), settings.extra_packs)
    )
    basics = base.packs["basics"]
    registry = merge([(info, welcome), (basics, read_cached_welcome(basics.env))])
    doc = request(
        "s",
        n("t", "input/text", {"text": "hello"}),
        n("s", "oldpack/shout", {"marks": 3}, text=("t", "text")),
    )
    async with anyio.create_task_group() as tg:
        engine = Engine(settings, registry, tg)
        supervisor = engine.supervisor
        try:
            result = await engine.run(doc)
            value = result.outputs["text"].value
            assert isinstance(value, TextValue) and value.text == "HELLO!!!"
            image = await engine.run(request("c", n("c", "oldpack/canvas", {"kib": 512})))
            data = engine.read_bytes(image.outputs["image"])  # 512 KiB: through shared memory
            assert len(data) == 512 * 1024 and data[0] == 1 and data[-1] == 2
            worker = supervisor.workers()["oldpack"]
            assert worker.capabilities == {"shared-memory"}  # nothing else was agreed
            assert worker.alive  # it understood every message it was sent
            # an SDK before 1.4 cannot dial a host: it runs locally whatever the launcher
            assert worker.describe()["launcher"] == "local"
        finally:
            await supervisor.aclose()
            tg.cancel_scope.cancel()
