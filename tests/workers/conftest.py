"""The host's IPC pieces on their own: the frame channel, the calls' mailboxes, the probe."""

from __future__ import annotations

import pytest


@pytest.fixture(
    params=[pytest.param(("asyncio", {}), id="asyncio"),
            pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop")]
)  # fmt: skip
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, bool]]:
    """asyncio's own loop (the engine, the benches) and uvloop's (uvicorn's, in the server)."""
    return request.param
