"""The worker: loads one pack through pluggy and serves node calls over a socket.

The socket is inherited (``--fd N``, the local launcher) or dialled (``--connect HOST:PORT``, a
worker elsewhere): then the first frame it sends is the per-worker secret from
``INLINE_WORKER_SECRET``, which the host checks before the handshake.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
import traceback
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgspec

from ._context import Context
from ._errors import Cancelled, InlineSdkError, ProtocolError
from ._framing import FrameCodec, FrameReader
from ._handles import HandleTable
from ._kinds import HANDLE_KINDS, MEDIA_KINDS
from ._loading import (  # noqa: F401 (importable from here, as before)
    collect_mappings,
    collect_nodes,
    collect_specs,
    load_mappings,
    load_pack,
    plugin_manager,
)
from ._media import MEDIA_TYPES, Image, Media
from ._memory import Memory
from ._node import NodeSpec
from ._protocol import (
    CAP_BROKER,
    CAP_CHUNKS,
    CAP_SHARED_MEMORY,
    CAP_STATS,
    CAP_STREAM,
    CAP_WARM,
    CHUNK_SIZE,
    PROTOCOL,
    BulkChunk,
    Call,
    CallCancelled,
    Cancel,
    ChunkedRef,
    Done,
    Evict,
    Failed,
    HandleValue,
    Hello,
    InlineBytes,
    JsonValue,
    MediaValue,
    Placed,
    Preview,
    Progress,
    Refused,
    Release,
    RemoteError,
    ShmRef,
    Shutdown,
    Stream,
    TextValue,
    ToWorker,
    Value,
    Welcome,
)
from ._shm import Arena, Region, SegmentReader
from ._state import WorkerCache, WorkerStats
from ._version import SDK_VERSION

PREVIEW_LIMIT = 4 * 1024 * 1024
#: What this SDK's worker understands.
WORKER_CAPABILITIES = (
    CAP_STREAM, CAP_SHARED_MEMORY, CAP_BROKER, CAP_CHUNKS, CAP_STATS, CAP_WARM
)  # fmt: skip
SECRET_ENV = "INLINE_WORKER_SECRET"
log = logging.getLogger("inline.worker")


def agreed_capabilities(hello: Hello) -> frozenset[str]:
    """What both sides understand. A host older than capabilities (SDK < 1.4) sends none: it
    shares memory and brokers as its ``broker`` flag says, and knows no other message."""
    if not hello.capabilities:
        return frozenset({CAP_SHARED_MEMORY} | ({CAP_BROKER} if hello.broker else set()))
    return frozenset(hello.capabilities) & frozenset(WORKER_CAPABILITIES)


def remote_error(exc: BaseException) -> RemoteError:
    """An exception as the wire's error struct."""
    message = str(exc) or type(exc).__name__
    tb = "".join(traceback.format_exception(exc))
    return RemoteError(
        type=type(exc).__name__, message=_encodable(message), traceback=_encodable(tb)
    )


#: A secret's pieces this long or longer are hidden too (providers echo a key's last characters).
_PIECE = 4


def redact(error: RemoteError, values: Iterable[str]) -> RemoteError:
    """``error`` with every secret value in it replaced by ``***``: whole, and any piece of
    ``_PIECE`` characters or more of it (an API that masks a key as ``sk-...a1b2c3`` still
    hands back its tail)."""
    message, tb = error.message, error.traceback
    for value in values:
        if value:
            message, tb = scrub(message, value), scrub(tb, value)
    return RemoteError(type=error.type, message=message, traceback=tb)


def scrub(text: str, secret: str) -> str:
    """``text`` with ``secret`` and every run of at least ``_PIECE`` of its characters that
    appears in it replaced by ``***``."""
    text = text.replace(secret, "***")
    if len(secret) < 2 * _PIECE:  # too short for pieces to be told from chance
        return text
    out: list[str] = []
    i, start = 0, 0
    while i <= len(text) - _PIECE:
        if text[i : i + _PIECE] in secret:
            end = i + _PIECE
            while end < len(text) and text[i : end + 1] in secret:
                end += 1
            out += [text[start:i], "***"]
            i = start = end
        else:
            i += 1
    out.append(text[start:])
    return "".join(out)


class Worker:
    """Serves one pack's nodes to the host over a connected socket."""

    def __init__(
        self,
        sock: socket.socket,
        hello: Hello,
        nodes: list[NodeSpec],
        reader: FrameReader[Any] | None = None,
    ) -> None:
        self.sock = sock
        self.hello = hello
        self.nodes = {n.type: n for n in nodes}
        self.codec: FrameCodec[Any] = FrameCodec(ToWorker)
        #: Where frames from the host are read (the one that read the hello, if given).
        self.frames = reader if reader is not None else FrameReader(sock, self.codec)
        #: Each node type's output ports by id, and its logger: made once, not per call.
        self._ports = {n.type: {b.port.id: b.port for b in n.outputs} for n in nodes}
        self._loggers: dict[str, logging.Logger] = {}
        self.table = HandleTable()
        self.arena = Arena(hello.shm_prefix)
        self.reader = SegmentReader()
        self.calls: dict[int, threading.Event] = {}
        # the host runs at most ``concurrency`` calls of each node at once: room for all of them
        threads = max(hello.max_threads, sum(n.descriptor.concurrency for n in nodes))
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="call")
        self._send_lock = threading.Lock()
        self._roots = [Path(os.path.realpath(r)) for r in hello.input_roots]
        self._models_dir = Path(hello.models_dir)
        self._assets_dir = Path(hello.assets_dir)
        self._cwd = Path(hello.cwd)
        self.caps = agreed_capabilities(hello)
        self.memory = Memory(self.send if CAP_BROKER in self.caps else None)
        #: Shared by every call of this worker (``ctx.cache``, ``ctx.stats``).
        self.cache = WorkerCache()
        self.stats = WorkerStats(self.send if CAP_STATS in self.caps else None)
        #: Blobs arriving in chunks (``chunks``), by id, until the message naming them.
        self._incoming: dict[int, bytearray] = {}
        self._done_blobs: dict[int, bytes] = {}
        self._blob_ids = iter(range(1, 1 << 62))

    def send(self, msg: object) -> None:
        frame = self.codec.encode(msg)
        with self._send_lock:
            self.sock.sendall(frame)

    def serve(self) -> None:
        """Read messages until the host says goodbye or goes away."""
        try:
            while True:
                try:
                    msg = self.frames.read()
                except ProtocolError as exc:
                    log.info("connection ended: %s", exc)
                    return
                match msg:
                    case Call():
                        self.calls[msg.id] = threading.Event()
                        self.pool.submit(self.run_call, msg)
                    case Cancel(id=cid):
                        event = self.calls.get(cid)
                        if event is not None:
                            event.set()
                    case Release(handles=hids):
                        self.table.release(hids)
                    case Placed():
                        self.memory.answered(msg)
                    case Evict(slots=slots):
                        # freeing may wait on a slot's lock held by a loading call, and that
                        # call may wait on this reader for its answer: never free inline
                        threading.Thread(
                            target=self.memory.evict, args=(slots,), name="evict", daemon=True
                        ).start()
                    case BulkChunk(blob=blob, data=data, last=last):
                        buf = self._incoming.setdefault(blob, bytearray())
                        buf += data
                        if last:
                            self._done_blobs[blob] = bytes(self._incoming.pop(blob))
                    case Shutdown():
                        return
                    case _:
                        log.warning("unexpected message %s", type(msg).__name__)
        finally:
            for event in list(self.calls.values()):
                event.set()
            self.pool.shutdown(wait=False, cancel_futures=True)

    # a call ------------------------------------------------------------------------------------
    def run_call(self, msg: Call) -> None:
        cancel = self.calls[msg.id]
        try:
            spec = self.nodes.get(msg.node)
            if spec is None:
                raise LookupError(f"this pack has no node '{msg.node}'")
            params = spec.decode_params(msg.params)
            if msg.warm:  # load what the params pick, run nothing
                spec.warm(self.context(msg, spec, cancel), params)
                reply: object = Done(id=msg.id, outputs={})
            else:
                inputs = {
                    b.port.id: self.take_inputs(msg.inputs.get(b.port.id, []), b.is_list)
                    for b in spec.inputs
                }
                outputs = spec.invoke(self.context(msg, spec, cancel), inputs, params)
                ports = self._ports[spec.type]
                wire = {
                    pid: self.export(value, ports[pid].kind, portable=ports[pid].portable)
                    for pid, value in outputs.items()
                }
                reply = Done(id=msg.id, outputs=wire)
        except Cancelled:
            reply = CallCancelled(id=msg.id)
        except BaseException as exc:  # node code may raise anything; it crosses as data
            reply = Failed(id=msg.id, error=redact(remote_error(exc), msg.secrets.values()))
        finally:
            self.calls.pop(msg.id, None)
        try:
            self.send(reply)
        except (OSError, InlineSdkError, ValueError, TypeError) as exc:
            # the reply could not be encoded or sent (too large, not encodable): say so now,
            # never leave the host waiting for a reply that will not come
            log.error("call %d: cannot send its reply: %s", msg.id, exc)
            with contextlib.suppress(OSError, InlineSdkError):
                self.send(Failed(id=msg.id, error=remote_error(exc)))

    def context(self, msg: Call, spec: NodeSpec, cancel: threading.Event) -> Context:
        def emit_progress(
            phase: str, fraction: float, status: str, step: int | None, total: int | None
        ) -> None:
            self.send(
                Progress(
                    id=msg.id,
                    phase=phase,
                    fraction=fraction,
                    status=status,
                    step=step,
                    step_count=total,
                )
            )

        def emit_stream(port: str, text: str) -> None:
            if CAP_STREAM in self.caps and text:
                self.send(Stream(id=msg.id, port=port, text=_encodable(text)))

        def emit_preview(image: Image) -> None:
            if len(image.data) > PREVIEW_LIMIT:
                log.warning(
                    "preview of %d bytes dropped (limit %d)", len(image.data), PREVIEW_LIMIT
                )
                return
            value = MediaValue(kind="image", ext=image.ext, data=InlineBytes(data=image.tobytes()))
            self.send(Preview(id=msg.id, image=value))

        return Context(
            node_type=spec.type,
            node_id=msg.node_id,
            models_dir=self._models_dir,
            assets_dir=self._assets_dir,
            input_roots=self._roots,
            cwd=self._cwd,
            emit_progress=emit_progress,
            emit_preview=emit_preview,
            emit_stream=emit_stream,
            cancel_event=cancel,
            logger=self._logger(spec.type),
            memory=self.memory,
            secrets=msg.secrets,
            cache=self.cache,
            stats=self.stats,
        )

    def _logger(self, node_type: str) -> logging.Logger:
        logger = self._loggers.get(node_type)
        if logger is None:
            name = f"inline.pack.{self.hello.pack}.{node_type}"
            logger = self._loggers[node_type] = logging.getLogger(name)
        return logger

    def take_inputs(self, values: list[Value], is_list: bool) -> Any:
        items = [self.materialize(v) for v in values]
        if is_list:
            return items
        return items[0] if items else None

    def materialize(self, value: Value) -> Any:
        match value:
            case TextValue(text=text):
                return text
            case MediaValue(kind=kind, ext=ext, data=data):
                if isinstance(data, InlineBytes):
                    raw: bytes | memoryview = data.data
                elif isinstance(data, ChunkedRef):
                    raw = self._done_blobs.pop(data.blob)
                else:
                    raw = self.reader.view(data)
                return MEDIA_TYPES.get(kind, Media)(raw, ext)
            case HandleValue(id=hid):
                return self.table.get(hid)
            case JsonValue(value=v):
                return v
        raise ProtocolError(f"unknown value {value!r}")

    def export(self, value: Any, kind: str, *, portable: bool = False) -> Value:
        if portable:  # plain data (a Struct, a dict...): any pack may read it
            return JsonValue(value=msgspec.to_builtins(value))
        if kind in MEDIA_KINDS and isinstance(value, Media):
            size = len(memoryview(value.data).cast("B"))
            params = dict(value.params) if value.params is not None else None
            if size < self.hello.shm_threshold:
                return MediaValue(
                    kind=value.kind,
                    ext=value.ext,
                    data=InlineBytes(data=value.tobytes()),
                    params=params,
                )
            if CAP_SHARED_MEMORY not in self.caps:
                ref = self.send_chunks(memoryview(value.data).cast("B"))
                return MediaValue(kind=value.kind, ext=value.ext, data=ref, params=params)
            region = self.arena.put(value.data)
            hid = self.table.add(region, self._free_region)
            ref = ShmRef(segment=region.segment, offset=region.offset, size=region.size)
            return MediaValue(kind=value.kind, ext=value.ext, data=ref, region=hid, params=params)
        if kind == "text" and isinstance(value, str):
            return TextValue(text=_encodable(value))
        if kind in HANDLE_KINDS:
            return HandleValue(kind=kind, id=self.table.add(value))
        return JsonValue(value=value)

    def send_chunks(self, data: memoryview) -> ChunkedRef:
        """Send ``data`` as bounded ``BulkChunk`` frames; the ref that names it afterwards."""
        blob = next(self._blob_ids)
        size = len(data)
        for start in range(0, max(size, 1), CHUNK_SIZE):
            piece = bytes(data[start : start + CHUNK_SIZE])
            self.send(BulkChunk(blob=blob, data=piece, last=start + CHUNK_SIZE >= size))
        return ChunkedRef(blob=blob, size=size)

    def _free_region(self, region: Region) -> None:
        self.arena.free(region)


def _encodable(text: str) -> str:
    """``text`` with lone surrogates replaced, so that it always encodes as UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def dial(address: str, codec: FrameCodec[Any]) -> socket.socket:
    """Connect to the host at ``HOST:PORT`` and present the secret (the first frame)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {address!r}")
    secret = os.environ.pop(SECRET_ENV, "")
    if not secret:
        raise ValueError(f"{SECRET_ENV} is not set")
    sock = socket.create_connection((host.strip("[]"), int(port)), timeout=30)
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(len(secret).to_bytes(4, "big") + secret.encode())
    return sock


def run(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m inline_sdk.worker --fd N --pack NAME``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m inline_sdk.worker")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--fd", type=int, help="inherited socket fd")
    where.add_argument(
        "--connect",
        metavar="HOST:PORT",
        help=f"dial the host over TCP (the secret is read from {SECRET_ENV})",
    )
    parser.add_argument("--pack", required=True, help="entry point name of the pack to serve")
    args = parser.parse_args(argv)

    # stdout is a log stream, never the protocol: point fd 1 at stderr before any node code runs.
    sys.stdout.flush()
    os.dup2(2, 1)
    logging.basicConfig(
        level=os.environ.get("INLINE_WORKER_LOG", "INFO").upper(),
        format=f"%(asctime)s [{args.pack}] %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    codec: FrameCodec[Any] = FrameCodec(ToWorker)
    if args.fd is not None:
        sock = socket.socket(fileno=args.fd)
    else:
        try:
            sock = dial(args.connect, codec)
        except (OSError, ValueError) as exc:
            log.error("cannot reach the host at %s: %s", args.connect, exc)
            return 2
    reader = FrameReader(sock, codec)
    try:
        hello = reader.read()
    except ProtocolError as exc:
        log.error("no handshake from the host: %s", exc)
        return 2
    if not isinstance(hello, Hello) or hello.protocol != PROTOCOL:
        got = hello.protocol if isinstance(hello, Hello) else type(hello).__name__
        err = RemoteError(
            type="ProtocolMismatch",
            message=f"worker speaks IPC protocol {PROTOCOL}, host sent {got}",
        )
        sock.sendall(codec.encode(Refused(error=err)))
        return 3
    try:
        version, nodes = load_pack(hello.pack)
        mappings = load_mappings(hello.pack)
    except BaseException as exc:
        sock.sendall(codec.encode(Refused(error=remote_error(exc))))
        return 4
    worker = Worker(sock, hello, nodes, reader)
    worker.send(
        Welcome(
            protocol=PROTOCOL,
            sdk_version=SDK_VERSION,
            pack=hello.pack,
            pack_version=version,
            descriptors=[n.descriptor for n in nodes],
            pid=os.getpid(),
            capabilities=list(WORKER_CAPABILITIES),
            comfyui_mappings=mappings,
        )
    )
    try:
        worker.serve()
    finally:
        worker.arena.close()
        sys.stderr.flush()
    # Node threads may still be blocked in native code; the host asked us to go, so go.
    os._exit(0)
