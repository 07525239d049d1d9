"""The cheap path of a small take, in memory and on disk: a text take is a row and its bytes in
the run store, no file; a small blob is written without an fsync and checked against its hash
when read (a short one is missing, not served, and writing it again mends it); the run store's
short writes run at once unless they would wait; the target's take rows go in with the run's
end; one idle executor is woken per queued run."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import msgspec
import pytest
from inline_host._errors import BlobError
from inline_host.guard import InputPaths
from inline_host.runs import _blobs
from inline_host.runs._blobs import SMALL, BlobStore
from inline_host.runs._model_files import PlanReads
from inline_host.runs._queue import WakingQueue
from inline_host.runs._store import RunStore, StoredRun, TakeRecord, now_ms
from inline_host.runs._takes import TakeWriter


def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(_blobs.os, "fsync", counting)
    return calls


def test_a_small_blob_is_not_fsynced_and_a_large_one_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = fsyncs(monkeypatch)
    store = BlobStore(tmp_path / "blobs")
    small = store.put_bytes(b"hello")
    assert calls == []
    large = store.put_bytes(b"x" * SMALL)
    assert len(calls) == 1
    assert store.read(small) == b"hello" and store.read(large) == b"x" * SMALL
    assert not list((tmp_path / "blobs").rglob(".tmp-*"))  # every temp was renamed


def test_a_short_small_blob_is_missing_not_served_and_writing_it_again_mends_it(
    tmp_path: Path,
) -> None:
    data = b"a red bicycle on a beach at sunrise"
    bid = BlobStore(tmp_path / "blobs").put_bytes(data)
    path = BlobStore(tmp_path / "blobs").path(bid)
    path.write_bytes(data[:7])  # what a power loss can leave of a blob never fsynced
    store = BlobStore(tmp_path / "blobs")  # a new process: nothing known sound yet
    with pytest.raises(BlobError, match="do not match"):
        store.read(bid)
    assert store.sound_path(bid) is None and not store.has(bid)
    path.write_bytes(b"")  # empty: missing too
    assert BlobStore(tmp_path / "blobs").sound_path(bid) is None
    assert store.put_bytes(data) == bid  # the same bytes again replace the short file
    assert store.read(bid) == data and store.sound_path(bid) == path


def test_a_sound_small_blob_is_checked_once_per_process(tmp_path: Path) -> None:
    bid = BlobStore(tmp_path / "blobs").put_bytes(b"checked once")
    store = BlobStore(tmp_path / "blobs")
    assert store.sound_path(bid) is not None
    digest = bid.removeprefix("sha256-")
    assert digest in store._sound  # the next look is a stat, not a read and a hash
    assert store.read(bid) == b"checked once"


def test_a_whole_small_blob_stored_again_is_kept_not_written_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bid = BlobStore(tmp_path / "blobs").put_bytes(b"the same text")
    store = BlobStore(tmp_path / "blobs")  # a new process: checks it once, then keeps it
    created: list[str] = []
    original = _blobs.os.open

    def counting(path: str, flags: int, *args: Any) -> int:
        if flags & os.O_CREAT:
            created.append(path)
        return original(path, flags, *args)

    monkeypatch.setattr(_blobs.os, "open", counting)
    assert store.put_bytes(b"the same text") == bid
    assert store.put_bytes(b"the same text") == bid
    assert created == []  # no new file for bytes already whole
    assert store.read(bid) == b"the same text"


def test_a_media_take_links_its_blob_straight_to_its_fresh_name(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    writer = TakeWriter(blobs, tmp_path / "takes", tmp_path)
    record = writer.write(run_id="run_1", node_id="t", node_type="input/audio", cache_key="k",
                          port="audio", kind="audio", ext="wav", data=b"hi", params={},
                          graph=None)  # fmt: skip
    uri = tmp_path / record.uri
    assert record.uri == f"takes/{record.id}.wav" and uri.read_bytes() == b"hi"
    assert os.path.samefile(uri, blobs.path(record.hash))  # one inode: a hard link
    assert [p.name for p in (tmp_path / "takes").iterdir()] == [uri.name]  # no temp left
    assert record.data is None  # its bytes are the file's
    with pytest.raises(FileExistsError):  # a take's name is never written twice
        blobs.put_linked(b"other", str(uri))


def test_a_text_take_makes_no_file_and_its_bytes_go_in_with_its_row(tmp_path: Path) -> None:
    """A new file per text cost more than the rest of a trivial run: a text take's bytes are
    stored in the run store, in its row's transaction, once per content; its uri is its URL."""
    blobs = BlobStore(tmp_path / "blobs")
    writer = TakeWriter(blobs, tmp_path / "takes", tmp_path)

    def text(run_id: str, data: bytes) -> TakeRecord:
        return writer.write(run_id=run_id, node_id="t", node_type="input/text",
                            cache_key="k", port="text", kind="text", ext="txt", data=data,
                            params={}, graph=None)  # fmt: skip

    record = text("run_t", "héllo".encode())
    assert record.uri == f"/v1/takes/{record.id}/bytes"
    assert record.hash == "sha256-" + hashlib.sha256("héllo".encode()).hexdigest()
    assert not (tmp_path / "takes").exists() and not (tmp_path / "blobs").exists()
    store = RunStore(tmp_path / "inline.db")
    store.add_run(run_row("run_t"))
    store.settle("run_t", "done", {}, takes=(record,))
    again = text("run_t", "héllo".encode())  # the same bytes: one copy
    store.add_takes("run_t", [again])
    store.close()
    store = RunStore(tmp_path / "inline.db")  # a restart reads them back
    assert store.take_text(record.hash) == "héllo".encode()
    assert store._db.execute("SELECT COUNT(*) FROM take_texts").fetchone()[0] == 1
    assert [t.id for t in store.run_takes("run_t")] == [record.id, again.id]
    assert store.get_take(record.id).data is None  # type: ignore[union-attr]
    assert store.take_text("sha256-" + "0" * 64) is None
    store.close()


def test_the_prefix_folders_are_made_once_when_the_store_opens(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    store.make_folders()
    assert len(list((tmp_path / "blobs" / "sha256").iterdir())) == 256
    store.make_folders()  # again: nothing to make, nothing fails
    data = b"in a folder made already"
    bid = store.put_bytes(data)
    assert store.path(bid).parent.name == hashlib.sha256(data).hexdigest()[:2]


def run_row(run_id: str) -> StoredRun:
    return StoredRun(run_id=run_id, target="t", status="queued", request={"graph": {}},
                     state=None, client_run_id=None, request_hash="h",
                     created_at=now_ms())  # fmt: skip


def test_a_store_write_that_would_wait_is_refused_at_once_and_writes_nothing(
    tmp_path: Path,
) -> None:
    store = RunStore(tmp_path / "inline.db")
    lock = sqlite3.connect(tmp_path / "inline.db", isolation_level=None)
    try:
        lock.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
        started = time.monotonic()
        assert store.attempt(store.add_run, run_row("run_a")) == (False, None)
        assert time.monotonic() - started < 1  # not the 5 s busy timeout
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    assert store.get_run("run_a") is None
    assert store._db.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000  # restored
    assert store.attempt(store.add_run, run_row("run_a")) == (True, None)
    assert store.get_run("run_a") is not None and store.get_run("run_a").state is None  # type: ignore[union-attr]
    store.close()


def test_the_last_nodes_takes_go_in_with_the_runs_end(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "inline.db")
    store.add_run(run_row("run_b"))
    take = TakeRecord(id="take_0123456789ab", run_id="run_b", node_id="t", port="text",
                      kind="text", ext="txt", uri="/v1/takes/take_0123456789ab/bytes",
                      hash="sha256-" + "0" * 64, params={}, cache_key="k",
                      created_at=1, data=b"text")  # fmt: skip
    store.settle("run_b", "done", {"fraction": 1.0}, takes=(take,))
    assert store.get_run("run_b").status == "done"  # type: ignore[union-attr]
    stored = msgspec.structs.replace(take, data=None)  # read back without its bytes
    assert store.run_takes("run_b") == [stored] and store.takes_for_key("k") == [stored]
    assert store.take_text(take.hash) == b"text"
    store.close()


@pytest.mark.anyio
async def test_a_queued_run_wakes_one_idle_executor() -> None:
    queue: WakingQueue[str] = WakingQueue()
    woken: list[str] = []
    done = anyio.Event()

    async def consume(name: str) -> None:
        item = await queue.take()
        woken.append(f"{name}:{item}")
        if len(woken) == 2:
            done.set()

    async with anyio.create_task_group() as tg:
        for name in ("a", "b", "c"):
            tg.start_soon(consume, name)
        await anyio.wait_all_tasks_blocked()  # every consumer waits
        assert len(queue._idle) == 3
        queue.put("r1")
        assert len(queue._idle) == 2  # one woken, the others still waiting
        queue.put("r2")
        await done.wait()
        assert sorted(w.split(":")[1] for w in woken) == ["r1", "r2"] and len(queue._idle) == 1
        tg.cancel_scope.cancel()
    assert not queue._idle  # a cancelled waiter leaves no stale wake-up slot


def test_only_plans_that_read_files_leave_the_event_loop(tmp_path: Path) -> None:
    picker = SimpleNamespace(params=[SimpleNamespace(options_from="checkpoints")])
    entries = {"input/text": SimpleNamespace(descriptor=SimpleNamespace(params=[])),
               "load/model": SimpleNamespace(descriptor=picker)}  # fmt: skip
    registry = SimpleNamespace(lookup=entries.get, node_manifest=lambda t: None)
    inputs = InputPaths([tmp_path], tmp_path, 1 << 20)

    def graph(*nodes: tuple[str, dict[str, Any]]) -> dict[str, Any]:
        listed = [{"id": f"n{i}", "type": t, "params": p} for i, (t, p) in enumerate(nodes)]
        return {"graph": {"schemaVersion": 1, "nodes": listed}, "target": "n0"}

    reads = PlanReads()
    assert not reads.check(registry, inputs, graph(("input/text", {"text": "hi"})))
    image = {"image": {"ref": "path", "path": "a.png"}}
    assert reads.check(registry, inputs, graph(("input/text", {"text": "hi"}), ("x/y", image)))
    assert reads.check(registry, inputs, graph(("load/model", {})))  # stamps model files
    assert reads.check(registry, inputs, graph(*[("input/text", {})] * 65))  # a large graph
    assert not reads.check(registry, inputs, {"graph": "not a graph"})
