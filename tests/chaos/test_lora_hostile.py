"""Hostile LoRA files through the real merge, in the primitives pack venv (torch): NaN or Inf,
ranks or shapes that do not fit, integers, an overflowing product, a truncated or garbled file.
Each is refused as a ``ModelFileError`` naming the file, the key and the shapes, before any
weight changes (a stack already merged stays as it was), and the next call without the LoRA
gets the base weights back, exactly."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .._builds import shared_packs

PROBE = Path(__file__).resolve().parent / "_lora_probe.py"
#: case -> (remote type, what its message names besides the file)
EXPECTED: dict[str, tuple[str, tuple[str, ...]]] = {
    "nan_down": ("LoraRefused", ("NaN or Inf", "lora_unet_b.lora_down.weight")),
    "inf_up": ("LoraRefused", ("NaN or Inf", "lora_unet_b.lora_up.weight")),
    "nan_alpha": ("LoraRefused", ("NaN or Inf", "lora_unet_b.alpha")),
    "nan_original": ("LoraRefused", ("NaN or Inf", "lora_unet_qkv.lora_up.weight")),
    "rank_mismatch": ("LoraRefused", ("up [4, 3] and down [2, 6]", "lora_unet_b.lora_up.weight")),
    "flat_down": ("LoraRefused", ("down [6]", "lora_unet_b.lora_down.weight")),
    "wrong_shape": ("LoraRefused", ("delta is [5, 6]", "weight it names is [4, 6]", "lora_unet_b")),
    "wrong_original_shape": ("LoraRefused", ("delta is [10, 8]", "is [12, 8]", "lora_unet_qkv")),
    "alpha_not_scalar": ("LoraRefused", ("shape [2]", "lora_unet_b.alpha")),
    "int_tensors": ("LoraRefused", ("torch.int32", "lora_unet_b.lora_up.weight")),
    "overflow": ("LoraRefused", ("overflows float32", "lora_unet_b.lora_up.weight")),
    "truncated": ("NotSafetensors", ("truncated", "an interrupted download")),
    "bad_header": ("NotSafetensors", ("not JSON",)),
}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The probe's records, run once in the session's primitives venv."""
    registry = shared_packs(tmp_path_factory, ("primitives",))
    python = registry.packs["primitives"].env.root / "venv" / "bin" / "python"
    work = tmp_path_factory.mktemp("lora-hostile")
    proc = subprocess.run(
        [str(python), str(PROBE), str(work)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.parametrize("start", ["base", "stacked"])
@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_refused_naming_file_and_key_and_weights_untouched(
    report: dict[str, Any], case: str, start: str
) -> None:
    record = next(r for r in report["records"] if r["case"] == case and r["start"] == start)
    kind, names = EXPECTED[case]
    assert (record["type"], record["file_error"]) == (kind, True), record
    for part in (record["file"], *names):
        assert part in record["message"], (part, record["message"])
    assert record["unchanged"], f"{case} over {start}: weights changed by a refused stack"
    assert record["base_after"], f"{case} over {start}: removing the LoRAs left other weights"


def test_every_case_checked_and_the_good_stack_still_applies(report: dict[str, Any]) -> None:
    assert {r["case"] for r in report["records"]} == set(EXPECTED)
    assert report["good_applies"] and report["good_removed"]
