"""The client's public face, and that it imports only httpx and msgspec (and the stdlib)."""

from __future__ import annotations

import subprocess
import sys

import inline_client
import inline_host.api.openai


def test_all_matches_public_names() -> None:
    for module in (inline_client, inline_host.api.openai):
        public = {
            n
            for n, v in vars(module).items()
            if not n.startswith("_") and n != "annotations" and not isinstance(v, type(sys))
        }
        assert set(module.__all__) == public
        assert isinstance(module.__all__, tuple)


def test_client_imports_only_httpx_and_msgspec() -> None:
    code = (
        "import sys, inline_client\n"
        "roots = {m.split('.')[0] for m in sys.modules}\n"
        "print(sorted(r for r in roots if r in {'inline_sdk', 'inline_core', 'inline_host', "
        "'inline_registry', 'torch', 'websockets', 'litestar', 'anyio', 'pydantic'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
