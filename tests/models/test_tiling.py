"""vae/decode decodes in tiles at 1024x1024 and above, whole below."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

PROBE = Path(__file__).with_name("_tiling_probe.py")


def test_decode_is_tiled_from_1024_pixels_square(pack_python):
    out = subprocess.run(
        [str(pack_python), str(PROBE)], capture_output=True, text=True, timeout=600, check=True
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["512"] == {"tiled": False, "shape": [512, 512, 3]}
    assert result["1024"] == {"tiled": True, "shape": [1024, 1024, 3]}
