"""The baseline of ``diffusers_overhead``: the pipeline folder called directly through
``DiffusionPipeline``, in one process (run with a pack venv's python). Warms up, prints
``ready``, then renders one image per seed read from stdin and prints the seconds it took."""

import io
import os
import sys
import time

# as the pack's worker does: torchao's CUDA-only kernels are absent on CPU machines
os.environ.setdefault("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", "1")
import torch
from diffusers import DiffusionPipeline


def main(folder: str, steps: int, size: int, guidance: float) -> None:
    pipe = DiffusionPipeline.from_pretrained(folder, local_files_only=True)
    pipe.set_progress_bar_config(disable=True)

    def once(seed: int) -> float:
        started = time.perf_counter()
        image = pipe(
            prompt="a red fox in snow", height=size, width=size, num_inference_steps=steps,
            guidance_scale=guidance, generator=torch.Generator("cpu").manual_seed(seed),
        ).images[0]  # fmt: skip
        image.save(io.BytesIO(), format="PNG")  # a saved image, as our node returns
        return time.perf_counter() - started

    for seed in range(2):
        once(seed)
    print("ready", flush=True)
    for line in sys.stdin:
        print(f"{once(int(line)):.6f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
