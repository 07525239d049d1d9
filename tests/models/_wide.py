"""Writes a wider random Z-Image transformer (~60 MB in fp32) in the ComfyUI single-file layout.

Big enough that int8 and frees show in a worker's ``RssAnon``, small enough to render at 256x256
in a second on two cores. It pairs with the tiny text encoder (``cap_feat_dim`` 32) and VAE.
Run with a pack venv's python: ``python _wide.py OUT_FILE``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tiny import randomize, to_original_transformer


def main(out: Path) -> None:
    from diffusers import ZImageTransformer2DModel
    from safetensors.torch import save_file

    torch.manual_seed(5)
    transformer = ZImageTransformer2DModel(
        all_patch_size=(2,), all_f_patch_size=(1,), in_channels=16, dim=512, n_layers=2,
        n_refiner_layers=1, n_heads=8, n_kv_heads=8, norm_eps=1e-5, qk_norm=True,
        cap_feat_dim=32, rope_theta=256.0, t_scale=1000.0, axes_dims=[16, 24, 24],
        axes_lens=[1536, 512, 512],
    ).eval()  # fmt: skip
    randomize(transformer, 0.02)
    sd = {k: v.detach().clone() for k, v in transformer.state_dict().items()}
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file(to_original_transformer(sd), str(out))
    print(sum(v.numel() for v in sd.values()))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
