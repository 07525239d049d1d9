"""A local stand-in for the Hub endpoints huggingface_hub calls, pointed at with ``HF_ENDPOINT``:
HEAD and GET on ``/<repo>/resolve/<revision>/<path>`` (with ranges), ``model_info``
(``/api/models/<repo>[/revision/<rev>]``, with file metadata) and the tree
(``/api/models/<repo>/tree/<rev>``). Gated repos answer 401/403 without the right token."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    """Serves ``files`` (``"org/name/path" -> bytes``) on 127.0.0.1 and records every request.
    Paths in ``cut`` have their first GET cut off halfway (an interrupted download)."""

    def __init__(
        self,
        files: dict[str, bytes],
        cut: set[str] | None = None,
        gated: set[str] | None = None,
        token: str = "hf_good_token",
    ) -> None:
        self.files = files
        self.cut = set(cut or ())
        self.gated = set(gated or ())
        self.token = token
        #: paths whose GET waits for their event (set ``reached[path]`` when it arrives)
        self.hold: dict[str, threading.Event] = {}
        self.reached: dict[str, threading.Event] = {}
        #: revision names (branches, tags) the repos know; commits are accepted as themselves
        self.revisions = {"main": COMMIT, COMMIT: COMMIT, "v1": COMMIT}
        self.requests: list[tuple[str, str, str | None]] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _target(self) -> tuple[str, bytes | None]:
                parts = self.path.split("?", 1)[0].lstrip("/").split("/")
                if len(parts) < 5 or parts[2] != "resolve" or parts[3] not in hub.revisions:
                    return "", None
                key = "/".join(parts[:2] + parts[4:])
                return key, hub.files.get(key)

            def _refused(self, repo: str) -> bool:
                """A gated repo without the right token: the Hub's 401/403 with its code."""
                if repo not in hub.gated:
                    return False
                given = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
                if given == hub.token:
                    return False
                body = json.dumps({"error": f"Access to model {repo} is restricted."}).encode()
                self.send_response(403 if given else 401)
                self.send_header("X-Error-Code", "GatedRepo")
                self.send_header("X-Error-Message", f"Access to model {repo} is restricted.")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)
                return True

            def _json(self, status: int, body: object, extra: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (extra or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _api(self) -> None:
                """``model_info`` and ``list_repo_tree``."""
                path = self.path.split("?", 1)[0]
                parts = path.removeprefix("/api/models/").split("/")
                repo = "/".join(parts[:2])
                hub.requests.append(("API", path, None))
                names = sorted(k[len(repo) + 1 :] for k in hub.files if k.startswith(repo + "/"))
                if not names:
                    self._json(404, {"error": "Repository not found"},
                               {"X-Error-Code": "RepoNotFound"})  # fmt: skip
                    return
                if self._refused(repo):
                    return
                rest = parts[2:]
                revision = rest[1] if len(rest) >= 2 and rest[0] in ("revision", "tree") else "main"
                if revision not in hub.revisions:
                    self._json(404, {"error": f"Invalid rev id: {revision}"},
                               {"X-Error-Code": "RevisionNotFound"})  # fmt: skip
                    return
                if rest and rest[0] == "tree":
                    prefix = "/".join(rest[2:])
                    entries = []
                    folders = sorted({n.rsplit("/", 1)[0] for n in names if "/" in n})
                    for d in folders:
                        if d.startswith(prefix):
                            entries.append({"type": "directory", "oid": "0" * 40, "size": 0,
                                            "path": d})  # fmt: skip
                    for n in names:
                        if not n.startswith(prefix):
                            continue
                        data = hub.files[f"{repo}/{n}"]
                        entry: dict[str, object] = {"type": "file", "size": len(data), "path": n,
                            "oid": hashlib.sha1(data).hexdigest()}  # fmt: skip
                        if n.endswith(".safetensors"):
                            entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(),
                                            "size": len(data), "pointerSize": 134}  # fmt: skip
                        entries.append(entry)
                    self._json(200, entries)
                    return
                siblings = [{"rfilename": n, "size": len(hub.files[f"{repo}/{n}"])}
                            for n in names]  # fmt: skip
                self._json(200, {"id": repo, "modelId": repo, "sha": hub.revisions[revision],
                                 "private": False, "gated": "manual" if repo in hub.gated
                                 else False, "siblings": siblings})  # fmt: skip

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
                if self._refused("/".join(key.split("/")[:2])):
                    return
                if data is None:
                    self.send_response(404)
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self._headers(data, 200, {"Content-Length": str(len(data))})

            def do_GET(self) -> None:
                if self.path.startswith("/api/models/"):
                    self._api()
                    return
                key, data = self._target()
                rng = self.headers.get("Range")
                hub.requests.append(("GET", key, rng))
                if self._refused("/".join(key.split("/")[:2])):
                    return
                if key in hub.hold:
                    hub.reached.setdefault(key, threading.Event()).set()
                    hub.hold[key].wait(timeout=120)
                if data is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                start, end = 0, len(data) - 1
                if rng:
                    first, _, last = rng.split("=", 1)[1].partition("-")
                    start = int(first)
                    end = min(int(last), len(data) - 1) if last else len(data) - 1
                body = data[start : end + 1]
                extra = {"Content-Length": str(len(body))}
                if rng:
                    extra["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
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
