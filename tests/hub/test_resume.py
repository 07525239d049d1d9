"""A download resumes from its staged bytes in a new process: ``inline models import`` killed
(SIGKILL) mid-file, ``inline models pull`` and ``POST /v1/downloads`` with bytes staged ask for
``Range: bytes=<staged>-``. A server that ignores the range, answers another range or 416 is
survived; the finished file is checked by size and hash; one stage has one writer."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ..api.conftest import start_server
from ..e2e.conftest import inline_exe
from ._hub import ResumeHub

ROOT = Path(__file__).resolve().parents[2]
MODELPACK = ROOT / "tests" / "packs" / "modelpack"
BIG = bytes(range(251)) * 32_000  # 8,032,000 bytes: several reads, a prime period
CUT = len(BIG) * 6 // 10  # killed at 60 %
TINY = bytes(range(256)) * 93750  # the 24,000,000 bytes modelpack's manifest expects
FILES = {
    "acme/big/config.json": json.dumps({"architectures": ["LlamaForCausalLM"]}).encode(),
    "acme/big/model.safetensors": BIG,
    "acme/tiny/split/tiny.safetensors": TINY,
    "acme/tok/tokenizer/tokenizer.json": b'{"model": {}}',
    "acme/tok/tokenizer/tokenizer_config.json": b'{"chat_template": "x"}',
}
BIG_KEY = "acme/big/model.safetensors"
TINY_KEY = "acme/tiny/split/tiny.safetensors"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def wait_until(ready: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Wait for a condition another process brings about (a staged file's size), bounded."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.01)  # polling another process's file, not a timing assumption


def staged(models: Path) -> dict[str, int]:
    """Every staged partial download under ``models/.downloads``: name -> bytes."""
    root = models / ".downloads"
    if not root.is_dir():
        return {}
    return {p.relative_to(root).as_posix(): p.stat().st_size for p in root.rglob("*.incomplete")}


def env_for(tmp_path: Path, hub: ResumeHub, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("HF_HUB_OFFLINE", "HF_TOKEN"):
        env.pop(name, None)
    env.update({"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf-home"),
                "INLINE_MODELS_DIR": str(tmp_path / "models"),
                "INLINE_DATA_DIR": str(tmp_path / "data"), "INLINE_PACK_PATHS": str(MODELPACK),
                "HF_HUB_DOWNLOAD_TIMEOUT": "120", **extra})  # fmt: skip
    return env


# the three entry points, each in a new process ------------------------------------------------
def test_an_import_killed_at_60_percent_resumes_in_a_new_process(tmp_path: Path):
    models = tmp_path / "models"
    with ResumeHub(dict(FILES)) as hub:
        served = hub.stall_at(BIG_KEY, CUT)
        env = env_for(tmp_path, hub)
        with (tmp_path / "first.log").open("wb") as log:
            first = subprocess.Popen([inline_exe(), "models", "import", "hf:acme/big"], env=env,
                                     stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        try:
            assert served.wait(120), "the import never asked for the weights"
            wait_until(lambda: sum(staged(models).values()) == CUT, f"{CUT} bytes staged")
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait(60)
        hub.release.set()
        # one stage, named after the file and its version: a new process finds it
        assert staged(models) == {f"acme--big/model.safetensors.{sha256(BIG)}.incomplete": CUT}
        again = subprocess.run([inline_exe(), "models", "import", "hf:acme/big"], env=env,
                               capture_output=True, text=True, timeout=300)  # fmt: skip
        assert again.returncode == 0, again.stderr
        resumed = hub.gets_of(BIG_KEY)[-1]
        assert (resumed.range, resumed.status, resumed.sent) == (f"bytes={CUT}-", 206,
                                                                 len(BIG) - CUT)  # fmt: skip
        assert "resuming from" in again.stderr
        assert sum(g.sent for g in hub.gets_of(BIG_KEY)) == len(BIG)  # nothing fetched twice
    dest = models / "llm" / "big"
    assert again.stdout.strip() == str(dest)
    assert (dest / "model.safetensors").read_bytes() == BIG
    assert staged(models) == {}


def test_pull_asks_for_the_rest_of_staged_bytes(tmp_path: Path):
    models = tmp_path / "models"
    part = (
        models / ".downloads" / "acme--tiny" / f"split/tiny.safetensors.{sha256(TINY)}.incomplete"
    )
    part.parent.mkdir(parents=True)
    part.write_bytes(TINY[:CUT])
    with ResumeHub(dict(FILES)) as hub:
        proc = subprocess.run([inline_exe(), "models", "pull", "modelpack/needs-models"],
                              env=env_for(tmp_path, hub), capture_output=True, text=True,
                              timeout=300)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        gets = hub.gets_of(TINY_KEY)
        assert [(g.range, g.status, g.sent) for g in gets] == [(f"bytes={CUT}-", 206,
                                                                len(TINY) - CUT)]  # fmt: skip
    assert (models / "diffusion_models" / "tiny.safetensors").read_bytes() == TINY
    assert not (models / ".downloads").exists()


def test_the_downloads_api_resumes_a_cancelled_download_from_its_stage(tmp_path: Path):
    models = tmp_path / "models"
    with ResumeHub(dict(FILES)) as hub:
        served = hub.stall_at(TINY_KEY, CUT)
        srv = start_server(tmp_path / "data", tmp_path, env_for(tmp_path, hub))
        try:
            token = (tmp_path / "data" / "operator-token").read_text().strip()
            with srv.client(headers={"Authorization": f"Bearer {token}"}) as c:
                r = c.post("/v1/downloads", json={"node": "modelpack/needs-models"})
                assert r.status_code == 202, r.text
                first = r.json()["downloadId"]
                assert served.wait(120)
                view = wait_view(c, first, lambda v: weights(v)["bytesDone"] == CUT)
                assert weights(view)["state"] == "downloading"
                cancelled = c.delete(f"/v1/downloads/{first}").json()
                assert cancelled["state"] == "cancelled"
                hub.release.set()
                assert list(staged(models).values()) == [CUT]
                again = c.post("/v1/downloads", json={"node": "modelpack/needs-models"}).json()
                done = wait_view(c, again["downloadId"], lambda v: v["state"] != "running")
                assert done["state"] == "done", done
        finally:
            srv.stop()
        resumed = hub.gets_of(TINY_KEY)[-1]
        assert (resumed.range, resumed.status, resumed.sent) == (f"bytes={CUT}-", 206,
                                                                 len(TINY) - CUT)  # fmt: skip
    assert (models / "diffusion_models" / "tiny.safetensors").read_bytes() == TINY


def weights(view: dict[str, Any]) -> dict[str, Any]:
    return next(f for f in view["files"] if f["path"] == "split/tiny.safetensors")


def wait_view(c: Any, download_id: str, ready: Callable[[dict[str, Any]], bool]) -> Any:
    """Poll a download's progress (read from the child's staged file) until ``ready``."""
    views: list[Any] = []

    def check() -> bool:
        views.append(c.get(f"/v1/downloads/{download_id}").json())
        return ready(views[-1])

    wait_until(check, f"download {download_id} in the awaited state")
    return views[-1]


# the server's answers, and verification, in this process ------------------------------------
@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[ResumeHub]:
    from huggingface_hub import constants

    with ResumeHub(dict(FILES)) as fake:
        monkeypatch.setattr(constants, "ENDPOINT", fake.url)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        yield fake


def big_fetch(models: Path, *, staged_bytes: bytes = b"", etag: str = sha256(BIG)) -> Any:
    """A fetch of acme/big's weights, with ``staged_bytes`` left by an earlier process."""
    from inline_host.hub._pull import Fetch, staging_dir
    from inline_host.hub._transfer import stage_file

    if staged_bytes:
        part = stage_file(staging_dir("acme/big", models), "model.safetensors", etag)
        part.parent.mkdir(parents=True, exist_ok=True)
        part.write_bytes(staged_bytes)
    dest = models / "checkpoints" / "big.safetensors"
    return Fetch("Weights", "acme/big", "model.safetensors", "main", dest, len(BIG))


def run_fetch(f: Any, models: Path) -> list[str]:
    from inline_host.hub._pull import fetch

    said: list[str] = []
    assert fetch(f, models, say=said.append) == f.dest
    assert f.dest.read_bytes() == BIG
    assert staged(models) == {}
    return said


@pytest.mark.parametrize(
    ("quirk", "answers", "heard"),
    [
        ("ignore", [(f"bytes={CUT}-", 200)], "ignored the range"),
        ("shift", [(f"bytes={CUT}-", 206), (None, 200)], f"sent bytes {CUT + 1}-"),
        ("416", [(f"bytes={CUT}-", 416), (None, 200)], "(416): starting again from zero"),
    ],
)
def test_a_server_that_does_not_continue_the_stage_restarts_it_from_zero(
    tmp_path: Path, hub: ResumeHub, quirk: str, answers: list[tuple[str | None, int]], heard: str
):
    hub.quirk[BIG_KEY] = quirk
    said = run_fetch(big_fetch(tmp_path, staged_bytes=BIG[:CUT]), tmp_path)
    assert [(g.range, g.status) for g in hub.gets_of(BIG_KEY)] == answers
    assert any(heard in line for line in said), said


def test_a_corrupted_stage_is_deleted_said_and_fetched_again(tmp_path: Path, hub: ResumeHub):
    said = run_fetch(big_fetch(tmp_path, staged_bytes=bytes(CUT)), tmp_path)  # zeros, not BIG
    assert [(g.range, g.status) for g in hub.gets_of(BIG_KEY)] == [(f"bytes={CUT}-", 206),
                                                                  (None, 200)]  # fmt: skip
    assert any("staged file was corrupted" in line and "from zero" in line for line in said)


def test_bytes_that_do_not_match_the_hash_are_refused(tmp_path: Path, hub: ResumeHub):
    from inline_host.hub._pull import Fetch, PullError, fetch

    hub.wrong[BIG_KEY] = BIG[:-1] + b"\xff"  # the right size, one wrong byte
    f = big_fetch(tmp_path)
    with pytest.raises(PullError) as err:
        fetch(f, tmp_path, say=lambda _: None)
    assert "do not match the Hub's sha256" in str(err.value) and "removed it" in str(err.value)
    assert not f.dest.exists() and staged(tmp_path) == {}
    # a small file is checked against its git blob id (its ETag)
    config = FILES["acme/big/config.json"]
    hub.wrong["acme/big/config.json"] = config.replace(b"LM", b"XX")
    small = Fetch("Config", "acme/big", "config.json", "main", tmp_path / "c.json", None)
    with pytest.raises(PullError, match="do not match the Hub's git-sha1"):
        fetch(small, tmp_path, say=lambda _: None)
    # a body of another size than the Hub's metadata declares
    hub.wrong["acme/big/config.json"] = b"{}"
    with pytest.raises(PullError, match=f"the server sends 2 bytes, the file has {len(config)}"):
        fetch(small, tmp_path, say=lambda _: None)
    assert not small.dest.exists() and staged(tmp_path) == {}


def test_a_stage_of_another_version_is_dropped(tmp_path: Path, hub: ResumeHub):
    said = run_fetch(big_fetch(tmp_path, staged_bytes=BIG[:CUT], etag="0" * 64), tmp_path)
    assert [(g.range, g.status) for g in hub.gets_of(BIG_KEY)] == [(None, 200)]
    assert any("of another version" in line for line in said)


def test_a_second_download_of_the_same_file_is_refused(tmp_path: Path, hub: ResumeHub):
    from inline_host.hub._pull import PullError, fetch, staging_dir

    f = big_fetch(tmp_path, staged_bytes=BIG[:CUT])
    lock = staging_dir("acme/big", tmp_path) / "model.safetensors.lock"
    with lock.open("a") as held:  # another download of the file, under way
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(PullError, match="is being downloaded by another process"):
            fetch(f, tmp_path, say=lambda _: None)
    assert hub.gets_of(BIG_KEY) == []
    assert list(staged(tmp_path).values()) == [CUT]  # its stage untouched
    run_fetch(f, tmp_path)  # once it is gone, the next one resumes
    assert [g.range for g in hub.gets_of(BIG_KEY)] == [f"bytes={CUT}-"]
