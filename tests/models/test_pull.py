"""``inline models pull``: downloads into models/ (never the HF cache) from a local Hub stand-in,
resumes an interrupted download, verifies sizes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

from ..e2e.conftest import inline_exe
from ._hub import FakeHub

ROOT = Path(__file__).resolve().parents[2]
MODELPACK = ROOT / "tests" / "packs" / "modelpack"
WEIGHTS = bytes(range(256)) * 93750  # 24,000,000 bytes: more than one 10 MB download chunk
FILES = {
    "acme/tiny/split/tiny.safetensors": WEIGHTS,
    "acme/tok/tokenizer/tokenizer.json": b'{"model": {}}',
    "acme/tok/tokenizer/tokenizer_config.json": b'{"chat_template": "x"}',
    "acme/tiny/extra.safetensors": b"extra",
}


def pull(tmp_path: Path, hub: FakeHub, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update(
        {
            "HF_ENDPOINT": hub.url,
            "HF_HOME": str(tmp_path / "hf-home"),
            "INLINE_MODELS_DIR": str(tmp_path / "models"),
            "INLINE_PACK_PATHS": str(MODELPACK),
        }
    )
    env.pop("HF_HUB_OFFLINE", None)
    return subprocess.run(
        [inline_exe(), "models", "pull", *args], env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip


def test_pull_fetches_missing_files_into_the_models_dir_and_resumes(tmp_path: Path):
    with FakeHub(FILES, cut={"acme/tiny/split/tiny.safetensors"}) as hub:
        proc = pull(tmp_path, hub, "modelpack/needs-models")
        assert proc.returncode == 0, proc.stderr
        models = tmp_path / "models"
        assert (models / "diffusion_models" / "tiny.safetensors").read_bytes() == WEIGHTS
        tok = models / "text_encoders" / "tiny_tokenizer"
        assert (tok / "tokenizer.json").read_bytes() == FILES["acme/tok/tokenizer/tokenizer.json"]
        assert (tok / "tokenizer_config.json").is_file()
        assert not (models / "loras" / "extra.safetensors").exists()  # optional: not asked
        # the interrupted transfer was resumed from where it stopped, not restarted
        gets = [r for r in hub.requests if r[0] == "GET" and r[1].endswith("tiny.safetensors")]
        assert len(gets) >= 2 and gets[-1][2] is not None and gets[-1][2].startswith("bytes=")
        assert gets[-1][2] != "bytes=0-"
        # never the hidden HF cache; staging cleaned up
        hf_home = tmp_path / "hf-home"
        assert not hf_home.exists() or not any(p.is_file() for p in hf_home.rglob("*"))
        assert not (models / ".downloads").exists()
        # a second pull finds everything present and fetches nothing
        before = len(hub.requests)
        again = pull(tmp_path, hub, "modelpack/needs-models")
        assert again.returncode == 0 and "are present" in again.stderr
        assert len(hub.requests) == before
        # --all adds the optional file
        assert pull(tmp_path, hub, "modelpack/needs-models", "--all").returncode == 0
        assert (models / "loras" / "extra.safetensors").read_bytes() == b"extra"


def test_pull_verifies_sizes_and_reports_errors(tmp_path: Path):
    with FakeHub(FILES) as hub:
        proc = pull(tmp_path, hub, "modelpack/wrong-size")
        assert proc.returncode == 1
        assert "24000000 bytes, the manifest expects 12345" in proc.stderr
        assert not (tmp_path / "models" / "vae" / "wrong.safetensors").exists()
        unknown = pull(tmp_path, hub, "nobody/none")
        assert unknown.returncode == 1 and "no installed pack declares" in unknown.stderr
    with FakeHub({}) as hub:
        missing = pull(tmp_path, hub, "modelpack/needs-models")
        assert missing.returncode == 1 and "cannot fetch acme/tiny/split/tiny.safetensors" in (
            missing.stderr
        )
        assert "Traceback" not in missing.stderr


def test_pull_lists_the_zimage_files(tmp_path: Path):
    with FakeHub({}) as hub:
        proc = pull(tmp_path, hub, "alibaba/z-image-turbo", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout  # the dry run's plan is its output
    assert (
        "Comfy-Org/z_image_turbo/split_files/diffusion_models/z_image_turbo_bf16.safetensors" in out
    )
    assert "split_files/vae/ae.safetensors" in out
    assert "split_files/text_encoders/qwen_3_4b.safetensors" in out
    assert "Tongyi-MAI/Z-Image-Turbo/tokenizer/tokenizer.json" in out
    assert str(tmp_path / "models" / "text_encoders" / "qwen_3_4b_tokenizer") in out
    assert hub.requests == []


def test_pull_with_the_hub_unreachable_is_one_line(tmp_path: Path):
    """`inline models pull` with nothing listening at HF_ENDPOINT: one line, exit 1."""
    with FakeHub(FILES) as hub:
        url = hub.url
    dead = SimpleNamespace(url=url)  # the same loopback address, now closed: refused
    proc = pull(tmp_path, dead, "modelpack/needs-models")  # type: ignore[arg-type]
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith(
        f"error: cannot reach {url} to fetch acme/tiny/split/tiny.safetensors ("
    )
    assert "point HF_ENDPOINT at a mirror" in lines[-1] and "resumes" in lines[-1]
    assert "Traceback" not in proc.stderr
    assert [ln for ln in lines if ln.startswith("error:")] == [lines[-1]]
    # a name that does not resolve: the same one line (the DNS error class)
    dead.url = "http://no-such-host.invalid"
    proc = pull(tmp_path, dead, "modelpack/needs-models")  # type: ignore[arg-type]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "error: cannot reach http://no-such-host.invalid to fetch" in proc.stderr
