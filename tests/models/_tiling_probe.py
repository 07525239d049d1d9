"""Decodes latents with a tiny FLUX-style VAE through the primitives library and prints JSON:
whether the tiled path ran, and the image size (run in a pack venv)."""

import json
import sys


def main() -> None:
    import torch
    from diffusers import AutoencoderKL
    from inline_primitives._images import decode

    torch.manual_seed(0)
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        latent_channels=16,
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(8, 8, 8, 8),
        layers_per_block=1,
        norm_num_groups=4,
        scaling_factor=0.3611,
        shift_factor=0.1159,
        use_quant_conv=False,
        use_post_quant_conv=False,
    ).eval()
    calls = []
    original = vae.tiled_decode

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    vae.tiled_decode = counting
    out = {}
    for side in (512, 1024):
        calls.clear()
        (image,) = decode(vae, torch.randn(1, 16, side // 8, side // 8))
        out[str(side)] = {"tiled": bool(calls), "shape": list(image.shape)}
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
