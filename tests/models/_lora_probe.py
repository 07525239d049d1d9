"""In a pack venv: a LoRA merges into the loaded transformer without re-reading the base file,
the loaded model stays the same object, removing the LoRA restores every weight exactly and
strength 0 leaves every weight as it was, bit for bit.
``_lora_probe.py MODELS_DIR``; prints JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import safetensors
import torch
from _probe_ctx import probe_context
from inline_primitives import LoraItem, LoraStack, inspect_model, use_loras
from inline_primitives._runtime import get_model


def main(models: Path) -> None:
    base = models / "diffusion_models" / "tiny_z_image_turbo.safetensors"
    ref = inspect_model(base, "diffusion")
    ctx = probe_context()
    module = get_model(ref, ctx)
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
    same = get_model(ref, ctx) is module
    changed = sorted(k for k, v in module.state_dict().items() if not torch.equal(before[k], v))
    use_loras(module, ref.file, None)
    restored = all(torch.equal(before[k], v) for k, v in module.state_dict().items())
    reads = list(opened)  # what merging and removing one LoRA read
    zero = LoraStack(loras=[LoraItem(file=str(lora), strength=0.0, layout="kohya")])
    use_loras(module, ref.file, zero)
    zero_changed = sorted(
        k for k, v in module.state_dict().items() if not torch.equal(before[k], v)
    )
    use_loras(module, ref.file, None)
    print(
        json.dumps(
            {
                "same": same,
                "changed": changed,
                "restored": restored,
                "opened": reads,
                "zero_changed": zero_changed,
            }
        )
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
