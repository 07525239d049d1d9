"""Model files enter cache keys by their content: a file replaced under its name renders anew,
an untouched one answers from the cache, and a 12 GB checkpoint is never read to plan."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import pytest
from inline_host import Engine
from inline_host.runs._model_files import SMALL_BYTES, ModelStamps
from inline_sdk.protocol import TextValue

from ._graphs import n, request
from .test_engine import Recorder

pytestmark = pytest.mark.anyio


def read(file: str) -> dict[str, Any]:
    return request("r", n("r", "testpack/read-model", {"file": file}))


def text_of(result: Any) -> str:
    value = result.outputs["text"].value
    assert isinstance(value, TextValue)
    return value.text


async def test_a_model_replaced_under_its_name_renders_anew(settings) -> None:
    vae = settings.models_dir / "vae"
    vae.mkdir(parents=True, exist_ok=True)
    (vae / "mine.safetensors").write_text("the first weights")
    async with Engine.open(settings) as engine:
        assert text_of(await engine.run(read("mine.safetensors"))) == "the first weights"
        again = Recorder()
        assert text_of(await engine.run(read("mine.safetensors"), again)) == "the first weights"
        assert again.finished == [("r", True)]  # untouched: the cache answers
        # replaced in place, as a user drops a new checkpoint of the same name
        tmp = vae / ".mine.tmp"
        tmp.write_text("other weights, same name")
        os.replace(tmp, vae / "mine.safetensors")
        replaced = Recorder()
        result = await engine.run(read("mine.safetensors"), replaced)
        assert text_of(result) == "other weights, same name"
        assert replaced.finished == [("r", False)]
        # an empty pick is the catalog's first file: its content counts the same way
        assert text_of(await engine.run(read(""))) == "other weights, same name"


def sparse_checkpoint(path: Path, size: int, meta: str) -> None:
    """A safetensors file of ``size`` bytes (sparse: nothing but its header is written)."""
    # a 64 KiB header, as real ones are: reading it again would show in ``bytes_read``
    header = json.dumps({"__metadata__": {"name": meta, "pad": "x" * (64 << 10)}}).encode()
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(header)) + header)
        fh.truncate(size)


def bytes_read() -> int:
    """What this process has read through read() so far (``/proc/self/io`` rchar)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def test_a_12_gb_checkpoint_is_stamped_by_its_header_never_read(tmp_path: Path) -> None:
    big = tmp_path / "z_image_turbo_bf16.safetensors"
    sparse_checkpoint(big, 12 << 30, "one")
    stamps = ModelStamps()
    before = bytes_read()
    first = stamps.stamp(big)
    assert bytes_read() - before < 1 << 20  # the header, not 12 GB
    assert ModelStamps().stamp(big) == first  # stable across processes' memos
    again = bytes_read()
    assert stamps.stamp(big) == first
    assert bytes_read() - again < 4096  # memoised: not the header again (this read only)
    # the same size and time but another header (a replacement copied with its mtime kept)
    st = big.stat()
    sparse_checkpoint(big, 12 << 30, "two")
    os.utime(big, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert ModelStamps().stamp(big) != first
    # another modification time is another stamp
    os.utime(big, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert ModelStamps().stamp(big) != first


def test_small_files_and_folders_are_stamped_by_content(tmp_path: Path) -> None:
    folder = tmp_path / "tiny-llm"
    folder.mkdir()
    (folder / "config.json").write_text('{"layers": 2}')
    (folder / "model.safetensors").write_bytes(b"\0" * (SMALL_BYTES + 1))
    stamps = ModelStamps()
    first = stamps.stamp(folder)
    assert ModelStamps().stamp(folder) == first
    st = (folder / "config.json").stat()
    (folder / "config.json").write_text('{"layers": 3}')  # same size, new content
    os.utime(folder / "config.json", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert ModelStamps().stamp(folder) != first
    (folder / "config.json").write_text('{"layers": 2}')
    assert ModelStamps().stamp(folder) == first  # content, not time, for small files
    (folder / "extra.bin").write_bytes(b"x")
    assert ModelStamps().stamp(folder) != first
    assert stamps.stamp(tmp_path / "absent") == "missing"
    fifo = tmp_path / "pipe.safetensors"
    os.mkfifo(fifo)
    assert stamps.stamp(fifo).startswith("special:")  # never opened: it would block
