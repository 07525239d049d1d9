"""The baseline of ``diffusers_overhead``: the pipeline folder called directly through
``DiffusionPipeline``, in one process (run with a pack venv's python).

Arguments: folder, steps, size, guidance, device, dtypes (JSON: component -> torch dtype name, as
the worker placed the pipeline), threads. Warms up, prints ``ready``, then renders one image per
seed read from stdin and prints the seconds it took (the pipeline call and the PNG save)."""

import io
import json
import os
import sys
import time

# as the pack's worker does: torchao's CUDA-only kernels are absent on CPU machines
os.environ.setdefault("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", "1")
import torch
from diffusers import DiffusionPipeline


def main(
    folder: str, steps: int, size: int, guidance: float, device: str, dtypes: str, threads: int
) -> None:
    torch.set_num_threads(threads)
    torch_dtype = {k: getattr(torch, v) for k, v in json.loads(dtypes).items()}
    pipe = DiffusionPipeline.from_pretrained(
        folder, local_files_only=True, torch_dtype=torch_dtype
    ).to(device)
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
    a = sys.argv[1:]
    main(a[0], int(a[1]), int(a[2]), float(a[3]), a[4], a[5], int(a[6]))
