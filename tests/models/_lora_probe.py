"""In a pack venv: a LoRA merges into the loaded transformer without re-reading the base file,
the loaded model stays the same object, and removing the LoRA restores every weight exactly.
``_lora_probe.py MODELS_DIR``; prints JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import safetensors
import torch
from inline_primitives import LoraItem, LoraStack, inspect_model, use_loras
from inline_primitives._runtime import get_model


def probe_context() -> Any:
    """A Context for library calls outside a worker (no host: no broker, nothing reported)."""
    import logging
    import threading

    from inline_sdk import Context

    return Context(
        node_type="probe",
        node_id="probe",
        models_dir=Path("."),
        assets_dir=Path("."),
        input_roots=[],
        cwd=Path("."),
        emit_progress=lambda *a: None,
        emit_preview=lambda image: None,
        cancel_event=threading.Event(),
        logger=logging.getLogger("probe"),
    )


def main(models: Path) -> None:
    base = models / "diffusion_models" / "tiny_z_image_turbo.safetensors"
    ref = inspect_model(base, "diffusion")
    module = get_model(ref, probe_context())
    before = {k: v.clone() for k, v in module.state_dict().items()}
    opened: list[str] = []
    real = safetensors.safe_open

    def spy(path: Any, *args: Any, **kw: Any) -> Any:
        opened.append(str(path))
        return real(path, *args, **kw)

    safetensors.safe_open = spy  # the library imports it at call time
    lora = models / "loras" / "tiny_kohya.safetensors"
    use_loras(
        module, ref.file, LoraStack(loras=[LoraItem(file=str(lora), strength=1.0, layout="kohya")])
    )
    same = get_model(ref) is module
    changed = sorted(k for k, v in module.state_dict().items() if not torch.equal(before[k], v))
    use_loras(module, ref.file, None)
    restored = all(torch.equal(before[k], v) for k, v in module.state_dict().items())
    print(json.dumps({"same": same, "changed": changed, "restored": restored, "opened": opened}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
