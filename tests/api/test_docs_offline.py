"""Item 10: the API docs render in a browser with the network off (headless Chromium)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("CI"),
    reason="needs chromium (apt-get install chromium; ./scripts/test installs it)",
)

# Every host name fails to resolve except loopback's, and anything not on loopback goes to a
# dead proxy: the page gets what the server sends and nothing else.
OFFLINE = [
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    "--proxy-server=http://127.0.0.1:9",
    "--proxy-bypass-list=127.0.0.1",
]


def rendered(url: str, profile: Path) -> str:
    """The DOM of ``url`` after its scripts ran, offline."""
    proc = subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={profile}",
            *OFFLINE,
            "--virtual-time-budget=20000",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_the_browser_is_really_offline(tmp_path):
    page = (
        "data:text/html,<title>t</title><script src='https://cdn.jsdelivr.net/npm/redoc@2/"
        "bundles/redoc.standalone.js' onload=\"document.title='online'\" "
        "onerror=\"document.title='offline'\"></script>"
    )
    assert "<title>offline</title>" in rendered(page, tmp_path / "p")


def test_redoc_at_schema_renders_the_operations_offline(server, tmp_path):
    dom = rendered(f"{server.url}/schema", tmp_path / "p")
    for summary in (
        "Submit a run: 201 new, 200 replay of a clientRunId, 409 conflict, 422",
        "Every node descriptor (ETag: the registry version)",
        "Upload a file&#39;s raw bytes as an input asset (content-addressed)",
    ):
        assert summary in dom or summary.replace("&#39;", "'") in dom, summary


def test_swagger_ui_renders_the_operations_offline(server, tmp_path):
    dom = rendered(f"{server.url}/schema/swagger", tmp_path / "p")
    for path in ("/v1/runs", "/v1/models", "/v1/assets", "/v1/takes/{take_id}/bytes"):
        assert f'data-path="{path}"' in dom, path
