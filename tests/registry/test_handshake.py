"""The handshake probe against a real child process: a worker that refuses, one built for
another SDK major, one that dies before answering, and many probes of one env at once."""

from __future__ import annotations

import concurrent.futures
import os
import sys
from pathlib import Path

import pytest
from inline_registry import HandshakeFailed, PackEnv, PackSource, SdkMismatch, probe
from inline_sdk import SDK_VERSION

FAKE = Path(__file__).resolve().parent / "_fake_worker.py"


@pytest.fixture(autouse=True)
def unsandboxed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake venv's python is a script running the test's interpreter on a file of the
    tests: no sandbox would show it those (the sandboxed handshake: tests/sandbox)."""
    monkeypatch.setenv("INLINE_SANDBOX", "off")


def fake_env(tmp_path: Path, answer: str) -> PackEnv:
    """A pack env whose venv python is the fake worker, answering as ``answer`` says."""
    root = tmp_path / "acme" / "f00d"
    bin_dir = root / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    python = bin_dir / "python"
    python.write_text(
        f'#!/bin/sh\nINLINE_FAKE_ANSWER={answer} exec "{sys.executable}" "{FAKE}" "$@"\n'
    )
    python.chmod(0o755)
    source = PackSource(name="acme", path=tmp_path, first_party=False)
    return PackEnv(source=source, fingerprint="f00d", root=root)


def test_a_refusal_is_a_handshake_failure_with_the_workers_reason(tmp_path: Path) -> None:
    env = fake_env(tmp_path, "refused")
    with pytest.raises(HandshakeFailed) as info:
        probe(env, timeout=60)
    assert info.value.pack == "acme"
    assert info.value.reason == "No module named 'acme_missing'"
    assert info.value.traceback == "Traceback: here"
    assert str(info.value).startswith("Pack 'acme' failed its handshake: No module named")
    assert not env.descriptors_file.exists()  # nothing cached for a refused pack


def test_a_pack_of_another_sdk_major_is_refused_naming_both(tmp_path: Path) -> None:
    env = fake_env(tmp_path, "sdk9")
    with pytest.raises(SdkMismatch) as info:
        probe(env, timeout=60)
    assert (info.value.pack_sdk, info.value.host_sdk) == ("9.0.0", SDK_VERSION)
    assert "inline-sdk 9.0.0" in str(info.value) and f"inline-sdk {SDK_VERSION}" in str(info.value)
    assert not env.descriptors_file.exists()


def test_a_worker_that_exits_before_answering_says_how_with_its_stderr(tmp_path: Path) -> None:
    env = fake_env(tmp_path, "exit")
    with pytest.raises(HandshakeFailed) as info:
        probe(env, timeout=60)
    assert info.value.reason == "worker exited with code 3"
    assert "gives up before answering" in info.value.traceback


def test_probes_of_one_env_at_once_all_succeed_and_leave_no_temp_files(tmp_path: Path) -> None:
    """Eight threads probing one uncached env (concurrent registry loads): each answers, the
    cache is written whole, and no temp file is left behind."""
    env = fake_env(tmp_path, "welcome")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        welcomes = list(pool.map(lambda _: probe(env, timeout=60), range(8)))
    assert {w.pack for w in welcomes} == {"acme"}
    assert env.descriptors_file.is_file()
    assert probe(env) in welcomes  # later loads answer from the cache, no worker
    leftovers = [p.name for p in env.root.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == [], leftovers
    assert os.listdir(env.root / "venv" / "bin") == ["python"]
