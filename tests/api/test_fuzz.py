"""Property-based fuzzing of the API from its own OpenAPI schema: no 5xx, ever."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .conftest import start_server

FUZZ_SECONDS = 120


def test_two_minutes_of_schemathesis_find_no_server_error(tmp_path):
    data, inputs = tmp_path / "data", tmp_path / "inputs"
    inputs.mkdir()
    server = start_server(data, inputs)
    try:
        st = Path(sys.executable).parent / "schemathesis"
        proc = subprocess.run(
            [
                str(st),
                "run",
                f"{server.url}/schema/openapi.json",
                "--checks",
                "not_a_server_error",
                "--max-time",
                str(FUZZ_SECONDS),
                "--seed",
                "20261130",
                "--no-color",
                # path params such as /openai/v1/models/{model_id} are free strings: most
                # generated ones are filtered as invalid URLs, which is not a server error
                "--suppress-health-check=filter_too_much",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=FUZZ_SECONDS + 180,
        )
        summary = proc.stdout[-3000:]
        assert proc.returncode == 0, summary + proc.stderr[-2000:]
        assert " passed" in summary and "failed" not in summary.split("Test cases:")[-1]
    finally:
        server.stop()
    log = server.log.read_text()
    assert "Traceback" not in log, log[-3000:]
