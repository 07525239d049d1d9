"""A local stand-in for the few Hub endpoints ``hf_hub_download`` uses (HEAD and GET on
``/<repo>/resolve/<revision>/<path>``, with ranges), pointed at with ``HF_ENDPOINT``."""

from __future__ import annotations

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    """Serves ``files`` (``"org/name/path" -> bytes``) on 127.0.0.1 and records every request.
    Paths in ``cut`` have their first GET cut off halfway (an interrupted download)."""

    def __init__(self, files: dict[str, bytes], cut: set[str] | None = None) -> None:
        self.files = files
        self.cut = set(cut or ())
        self.requests: list[tuple[str, str, str | None]] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _target(self) -> tuple[str, bytes | None]:
                parts = self.path.split("?", 1)[0].lstrip("/").split("/")
                if len(parts) < 5 or parts[2] != "resolve":
                    return "", None
                key = "/".join(parts[:2] + parts[4:])
                return key, hub.files.get(key)

            def _headers(self, data: bytes, status: int, extra: dict[str, str]) -> None:
                self.send_response(status)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
                self.send_header("Accept-Ranges", "bytes")
                for k, v in extra.items():
                    self.send_header(k, v)
                self.end_headers()

            def do_HEAD(self) -> None:
                key, data = self._target()
                hub.requests.append(("HEAD", key, None))
                if data is None:
                    self.send_response(404)
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self._headers(data, 200, {"Content-Length": str(len(data))})

            def do_GET(self) -> None:
                key, data = self._target()
                rng = self.headers.get("Range")
                hub.requests.append(("GET", key, rng))
                if data is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                start = int(rng.split("=", 1)[1].split("-", 1)[0]) if rng else 0
                body = data[start:]
                extra = {"Content-Length": str(len(body))}
                if rng:
                    extra["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                self._headers(data, 206 if rng else 200, extra)
                if key in hub.cut:
                    hub.cut.discard(key)
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
