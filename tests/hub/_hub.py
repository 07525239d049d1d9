"""A local stand-in for the Hub, for resumed downloads: the endpoints huggingface_hub and the
importer call (``model_info``, the tree, HEAD and GET on ``/<repo>/resolve/<rev>/<path>``) in
the Hub's wire format, with the misbehaviours a resume must survive.

The ETag is what the Hub sends: an LFS file's sha256 (``.safetensors`` here), a small file's
git blob sha1. Every GET is recorded with its ``Range`` header, status and the bytes sent.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "89abcdef0123456789abcdef0123456789abcdef"
#: Seconds between the bytes of a ``trickle`` GET.
TRICKLE = 0.05


@dataclass
class Get:
    """One GET of a file: its ``Range`` header, the status answered, the body bytes sent."""

    key: str
    range: str | None
    status: int
    sent: int = 0


def etag_of(key: str, data: bytes) -> str:
    """The Hub's ETag: the LFS sha256 of a weights file, the git blob sha1 of another."""
    if key.endswith(".safetensors"):
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class ResumeHub:
    """Serves ``files`` (``"org/name/path" -> bytes``) on 127.0.0.1.

    - ``stall[key] = n``: the next GET of ``key`` (a transfer: no ``Range``, or an open one,
      ``bytes=N-``; a header's ranged read passes) sends the file up to byte ``n``, sets
      ``served[key]``, then holds the connection until ``release`` is set, and drops it;
    - ``quirk[key]``: how ranged GETs of ``key`` are answered: ``"ignore"`` (200, the whole
      file), ``"shift"`` (206 from another byte than asked), ``"416"``;
    - ``wrong[key]``: bytes GETs of ``key`` send instead of the file (HEAD still tells the
      file's size and ETag);
    - ``bare``: keys served as a plain mirror would: no size or hash in the tree, no ETag, HEAD
      without a Content-Length;
    - ``short[key] = n``: every GET of ``key`` declares the whole Content-Length but sends only
      ``n`` body bytes, then closes the connection;
    - ``unframed``: keys whose GETs send no Content-Length (the body ends when the connection
      closes, as HTTP/1.0 allows), so a cut-short body looks whole;
    - ``drip``: keys whose GETs send one byte, set ``served[key]``, then send nothing more
      until ``release`` is set;
    - ``trickle``: keys whose GETs send one byte every ``TRICKLE`` seconds (no read ever
      times out, and the file never arrives) until ``release`` is set;
    - ``tree_extra``: entries added to every tree listing (a hostile path).
    """

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.stall: dict[str, int] = {}
        self.served: dict[str, threading.Event] = {}
        self.release = threading.Event()
        self.quirk: dict[str, str] = {}
        self.wrong: dict[str, bytes] = {}
        self.bare: set[str] = set()
        self.short: dict[str, int] = {}
        self.unframed: set[str] = set()
        self.drip: set[str] = set()
        self.trickle: set[str] = set()
        self.tree_extra: list[dict[str, object]] = []
        self.gets: list[Get] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _key(self) -> str:
                parts = self.path.split("?", 1)[0].lstrip("/").split("/")
                if len(parts) < 5 or parts[2] != "resolve":
                    return ""
                return "/".join(parts[:2] + parts[4:])

            def _send(self, status: int, headers: dict[str, str], body: bytes = b"") -> None:
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                if body:
                    self.wfile.write(body)

            def _json(self, status: int, body: object) -> None:
                data = json.dumps(body).encode()
                self._send(status, {"Content-Type": "application/json",
                                    "Content-Length": str(len(data))}, data)  # fmt: skip

            def _file_headers(self, key: str, data: bytes) -> dict[str, str]:
                if key in hub.bare:
                    return {"X-Repo-Commit": COMMIT, "Accept-Ranges": "bytes"}
                return {"X-Repo-Commit": COMMIT, "ETag": f'"{etag_of(key, data)}"',
                        "Accept-Ranges": "bytes"}  # fmt: skip

            def _api(self) -> None:
                parts = self.path.split("?", 1)[0].removeprefix("/api/models/").split("/")
                repo = "/".join(parts[:2])
                names = sorted(k[len(repo) + 1 :] for k in hub.files if k.startswith(repo + "/"))
                if not names:
                    self._json(404, {"error": "Repository not found"})
                    return
                if parts[2:3] == ["tree"]:
                    entries: list[dict[str, object]] = []
                    for n in names:
                        data = hub.files[f"{repo}/{n}"]
                        entry: dict[str, object] = {"type": "file", "size": len(data), "path": n,
                            "oid": etag_of("", data)}  # fmt: skip
                        if f"{repo}/{n}" in hub.bare:
                            entry = {"type": "file", "path": n, "size": None, "oid": "0" * 40}
                        elif n.endswith(".safetensors"):
                            entry["lfs"] = {"oid": etag_of(n, data), "size": len(data),
                                            "pointerSize": 134}  # fmt: skip
                        entries.append(entry)
                    self._json(200, entries + hub.tree_extra)
                    return
                siblings = [{"rfilename": n} for n in names]
                self._json(200, {"id": repo, "modelId": repo, "sha": COMMIT, "private": False,
                                 "gated": False, "siblings": siblings})  # fmt: skip

            def do_HEAD(self) -> None:
                key = self._key()
                data = hub.files.get(key)
                if data is None:
                    self._send(404, {"X-Error-Code": "EntryNotFound", "Content-Length": "0"})
                    return
                length = {} if key in hub.bare else {"Content-Length": str(len(data))}
                self._send(200, {**self._file_headers(key, data), **length})

            def do_GET(self) -> None:
                if self.path.startswith("/api/models/"):
                    self._api()
                    return
                key = self._key()
                real = hub.files.get(key)
                rng = self.headers.get("Range")
                if real is None:
                    hub.gets.append(Get(key, rng, 404))
                    self._send(404, {"X-Error-Code": "EntryNotFound", "Content-Length": "0"})
                    return
                data = hub.wrong.get(key, real)
                quirk = hub.quirk.get(key) if rng else None
                start = int(rng.split("=", 1)[1].split("-", 1)[0]) if rng else 0
                headers = self._file_headers(key, real)
                if quirk == "416":
                    hub.gets.append(Get(key, rng, 416))
                    self._send(416, {**headers, "Content-Range": f"bytes */{len(real)}",
                                     "Content-Length": "0"})  # fmt: skip
                    return
                if quirk == "ignore" or not rng:
                    status, start = 200, 0
                else:
                    status = 206
                    start = start + 1 if quirk == "shift" else start
                    headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                body = data[start:]
                if key not in hub.unframed:
                    headers["Content-Length"] = str(len(body))
                get = Get(key, rng, status)
                hub.gets.append(get)
                if key in hub.short or key in hub.drip or key in hub.trickle:
                    self._misbehave(key, status, headers, body, get)
                    return
                if key in hub.stall and not (rng and not rng.endswith("-")):  # not a header read
                    body = body[: max(0, hub.stall.pop(key) - start)]
                    with contextlib.suppress(OSError):
                        self._send(status, headers, body)
                        self.wfile.flush()
                    get.sent = len(body)
                    hub.served.setdefault(key, threading.Event()).set()
                    hub.release.wait(120)
                    self.close_connection = True
                    return
                with contextlib.suppress(OSError):
                    self._send(status, headers, body)
                    get.sent = len(body)

            def _misbehave(
                self, key: str, status: int, headers: dict[str, str], body: bytes, get: Get
            ) -> None:
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self._send(status, headers)
                    if key in hub.short:
                        self.wfile.write(body[: hub.short[key]])
                        get.sent = min(len(body), hub.short[key])
                        return  # the connection closes short of the Content-Length
                    if key in hub.trickle:  # a byte every TRICKLE seconds, never enough
                        for i in range(len(body)):
                            self.wfile.write(body[i : i + 1])
                            self.wfile.flush()
                            get.sent = i + 1
                            hub.served.setdefault(key, threading.Event()).set()
                            if hub.release.wait(TRICKLE):
                                return
                        return
                    self.wfile.write(body[:1])
                    self.wfile.flush()
                    get.sent = 1
                    hub.served.setdefault(key, threading.Event()).set()
                    hub.release.wait(120)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def stall_at(self, key: str, n: int) -> threading.Event:
        """Make the next GET of ``key`` stop after byte ``n``; the event it sets then."""
        self.stall[key] = n
        return self.served.setdefault(key, threading.Event())

    def gets_of(self, key: str) -> list[Get]:
        """The GETs of ``key``, in order."""
        return [g for g in self.gets if g.key == key]

    def __enter__(self) -> ResumeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
