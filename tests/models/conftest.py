"""Model fixtures: the pack venvs and the tiny Z-Image (built once per session, shared with the
other folders: ``tests/_builds.py``), and one engine per module (importing diffusers costs ~10 s
per worker, so workers are reused across tests)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from inline_host import Engine, Settings
from inline_registry import file_lock

from .._builds import data_dir_over, shared_packs, shared_root, tiny_zimage

HERE = Path(__file__).resolve().parent
GUARD = HERE / "_netguard.py"


@dataclass(frozen=True)
class Tiny:
    """Where the session's tiny models and reference renders are."""

    root: Path
    python: Path  # a pack venv's interpreter (torch, diffusers)

    @property
    def comfy(self) -> Path:
        return self.root / "comfy"

    @property
    def diffusers(self) -> Path:
        return self.root / "diffusers"

    def reference(self, name: str) -> bytes:
        return (self.root / "reference" / f"{name}.png").read_bytes()

    def case(self, name: str) -> dict:
        report = json.loads((self.root / "report.json").read_text())
        return next(c for c in report["cases"] if c["name"] == name)


@pytest.fixture(scope="session")
def model_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir over the session's shared pack venvs, with the network guard installed in the
    model packs' venvs (inactive unless INLINE_NETGUARD_LOG is set)."""
    registry = shared_packs(tmp_path_factory, ("basics", "primitives", "zimage"))
    with file_lock(shared_root(tmp_path_factory) / ".netguard.lock"):
        for pack in ("primitives", "zimage"):
            install_netguard(registry.packs[pack].env.root / "venv")
    return data_dir_over(tmp_path_factory, "inline-models-data")


def install_netguard(venv: Path) -> None:
    """``_netguard.py`` imported at every start of ``venv``'s python; each file is put in place
    whole (another worker may be starting that python meanwhile), the module before its hook."""
    site = next((venv / "lib").glob("python3*/site-packages"))
    hook = site / "zz_inline_netguard.pth"
    if hook.is_file():
        return
    module = (site / "_inline_netguard.py", GUARD.read_text())
    for path, text in (module, (hook, "import _inline_netguard\n")):
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, path)


@pytest.fixture(scope="session")
def pack_python(model_data_dir: Path) -> Path:
    """The zimage venv's interpreter (it has the primitives library, torch and diffusers)."""
    return next((model_data_dir / "packs" / "zimage").glob("*/venv/bin/python"))


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory, pack_python: Path) -> Tiny:
    """The tiny random Z-Image (diffusers folder + ComfyUI single files) and diffusers' renders."""
    return Tiny(tiny_zimage(tmp_path_factory, pack_python), pack_python)


def install_comfy_layout(tiny: Tiny, models: Path) -> Path:
    """Copy the tiny single files into ``models`` (ComfyUI layout)."""
    shutil.copytree(tiny.comfy, models, dirs_exist_ok=True)
    return models


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def module_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models-module")


@pytest.fixture(scope="module")
def settings(model_data_dir: Path, module_dir: Path) -> Settings:
    """Settings over the session's venvs with this module's models and inputs dirs."""
    inputs = module_dir / "inputs"
    inputs.mkdir(exist_ok=True)
    base = Settings.from_env(
        {
            "INLINE_SANDBOX_READ": os.environ.get("INLINE_SANDBOX_READ", ""),
            "INLINE_DATA_DIR": str(model_data_dir),
            "INLINE_MODELS_DIR": str(module_dir / "models"),
            "INLINE_INPUT_ROOTS": str(inputs),
        }
    )
    return replace(base, cancel_grace=30.0)


@pytest.fixture(scope="module")
def netguard_log(module_dir: Path) -> Iterator[Path]:
    """Workers started while this is active record (and refuse) any network attempt here."""
    log = module_dir / "network-attempts.log"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("INLINE_NETGUARD_LOG", str(log))
        yield log


@pytest.fixture(scope="module")
async def engine(settings: Settings, netguard_log: Path) -> AsyncIterator[Engine]:
    """One engine (and so one worker per pack) for the whole module."""
    async with Engine.open(settings) as eng:
        yield eng
