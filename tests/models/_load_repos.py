"""Run in a pack venv: load imported folders the way the task packs do (local files only) and
print their parameter counts. argv: llm folder, diffusers folder."""

from __future__ import annotations

import json
import sys

import torch


def main() -> None:
    from diffusers import DiffusionPipeline
    from transformers import AutoModelForCausalLM

    llm = AutoModelForCausalLM.from_pretrained(sys.argv[1], local_files_only=True)
    with torch.inference_mode():
        logits = llm(torch.tensor([[1, 2, 3]])).logits
    pipe = DiffusionPipeline.from_pretrained(sys.argv[2], local_files_only=True)
    image = pipe(batch_size=1, num_inference_steps=2, output_type="np").images[0]
    print(json.dumps({
        "llm": sum(p.numel() for p in llm.parameters()), "llmClass": type(llm).__name__,
        "logits": list(logits.shape), "pipeline": type(pipe).__name__,
        "diffusers": sum(p.numel() for p in pipe.unet.parameters()), "image": list(image.shape),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
