"""Fetching a deployment's model onto a cluster node (the node's side, without Ray: the reads
come from the host's real files): what is missing or stale is fetched and checked, a partial
file from a start that died is resumed, and bytes that do not hash right never land."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from inline_host.workers import _ray_models
from inline_host.workers._ray_models import (
    CHUNK,
    ModelFetchError,
    ModelSource,
    fetch_models,
    model_manifest,
)


def host_models(tmp_path: Path) -> Path:
    root = tmp_path / "host"
    (root / "llm" / "tiny-llm" / "sub").mkdir(parents=True)
    (root / "llm" / "tiny-llm" / "config.json").write_text('{"a": 1}')
    (root / "llm" / "tiny-llm" / "sub" / "weights.bin").write_bytes(bytes(range(256)) * 40_000)
    return root


class Reads:
    """The host's ``ModelSource`` read directly, counting the bytes it served."""

    def __init__(self, source: ModelSource) -> None:
        self.source, self.served = source, 0

    def __call__(self, rel: str, offset: int, size: int) -> bytes:
        block = self.source.read(rel, offset, size)
        self.served += len(block)
        return block


def test_a_folder_model_lands_whole_and_a_second_start_fetches_nothing(tmp_path: Path):
    root = host_models(tmp_path)
    entries = model_manifest([tmp_path / "elsewhere", root], "tiny-llm")
    weights = (root / "llm" / "tiny-llm" / "sub" / "weights.bin").read_bytes()
    assert entries == [
        ("llm/tiny-llm/config.json", 8, hashlib.sha256(b'{"a": 1}').hexdigest()),
        ("llm/tiny-llm/sub/weights.bin", len(weights), hashlib.sha256(weights).hexdigest()),
    ]
    assert len(weights) > CHUNK  # more than one read
    source = ModelSource()
    source.allow([str(root)], entries)
    node = tmp_path / "node"
    reads = Reads(source)
    assert fetch_models(entries, node, reads) == [e[0] for e in entries]
    assert (node / "llm" / "tiny-llm" / "sub" / "weights.bin").read_bytes() == weights
    assert reads.served == len(weights) + 8
    again = Reads(source)
    assert fetch_models(entries, node, again) == [] and again.served == 0
    assert model_manifest([root], "no-such-model") == []


def test_a_partial_fetch_is_resumed_and_one_of_other_bytes_is_fetched_again(tmp_path: Path):
    root = host_models(tmp_path)
    entries = model_manifest([root], "tiny-llm")[1:]  # the weights
    source = ModelSource()
    source.allow([str(root)], entries)
    weights = (root / entries[0][0]).read_bytes()
    dest = tmp_path / "node" / entries[0][0]
    dest.parent.mkdir(parents=True)
    partial = dest.with_name(".weights.bin.partial")
    partial.write_bytes(weights[:1000])  # a start that died after 1,000 bytes
    reads = Reads(source)
    fetch_models(entries, tmp_path / "node", reads)
    assert dest.read_bytes() == weights and reads.served == len(weights) - 1000
    assert not partial.exists()

    dest.unlink()
    partial.write_bytes(b"\xff" * 1000)  # a partial of other bytes: discarded, fetched anew
    reads = Reads(source)
    fetch_models(entries, tmp_path / "node", reads)
    assert dest.read_bytes() == weights and reads.served == 2 * len(weights) - 1000


def test_bytes_that_never_hash_right_are_refused_and_only_allowed_files_are_served(
    tmp_path: Path,
):
    root = host_models(tmp_path)
    rel, size, _sha = model_manifest([root], "tiny-llm")[0]
    source = ModelSource()
    with pytest.raises(PermissionError, match="not a file the host lets its nodes fetch"):
        source.read(rel, 0, 10)
    source.allow([str(root)], [(rel, size, "0" * 64)])
    with pytest.raises(ModelFetchError, match=f"{rel}: fetched bytes hash .*, the host's 0000"):
        fetch_models([(rel, size, "0" * 64)], tmp_path / "node", source.read)
    assert not (tmp_path / "node" / rel).exists()
    assert [p.name for p in (tmp_path / "node" / "llm" / "tiny-llm").iterdir()] == [
        ".config.json.lock"
    ]  # no partial, no hash kept
    with pytest.raises(ModelFetchError, match="the host's copy ended at 8 of 20 bytes"):
        fetch_models([(rel, 20, "0" * 64)], tmp_path / "node2", source.read)


def test_a_files_hash_is_kept_beside_it_for_the_next_process_and_never_listed(tmp_path: Path):
    root = host_models(tmp_path)
    weights = root / "llm" / "tiny-llm" / "sub" / "weights.bin"
    entries = model_manifest([root], "tiny-llm")
    sidecar = weights.with_name(".weights.bin.sha256")
    stamp = f"{weights.stat().st_size} {weights.stat().st_mtime_ns} "
    assert sidecar.read_text() == stamp + hashlib.sha256(weights.read_bytes()).hexdigest()
    assert model_manifest([root], "tiny-llm") == entries  # the hashes beside are not files of it
    _ray_models._hashes.clear()  # a new process: the hash beside the file is what it reads
    sidecar.write_text(stamp + "a" * 64)
    assert _ray_models.sha256_of(weights) == "a" * 64
    weights.write_bytes(b"changed")  # another size and time: hashed again, and kept
    assert _ray_models.sha256_of(weights) == hashlib.sha256(b"changed").hexdigest()
    assert sidecar.read_text().endswith(hashlib.sha256(b"changed").hexdigest())


def test_a_node_folder_that_cannot_be_written_says_what_to_set(tmp_path: Path):
    root = host_models(tmp_path)
    entries = model_manifest([root], "tiny-llm")
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    with pytest.raises(ModelFetchError, match="set INLINE_RAY_MODELS_DIR"):
        fetch_models(entries, blocked, ModelSource().read)
