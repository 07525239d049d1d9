"""Builds the tiny random Z-Image models the tests use, and diffusers' reference renders.

Run with a pack venv's python (it needs torch, diffusers, transformers):
``python _tiny.py OUT``. Writes, under OUT:

- ``diffusers/``: a whole ``ZImagePipeline`` folder (``save_pretrained``)
- ``comfy/``: the same weights in the ComfyUI single-file layout (original transformer keys with
  fused qkv, LDM VAE keys, ``model.``-prefixed Qwen3 keys) under ``diffusion_models/``, ``vae/``
  and ``text_encoders/``, plus the tokenizer folder ``text_encoders/qwen_3_4b_tokenizer/``
- ``reference/*.png``: direct ``ZImagePipeline`` renders (the baseline our sampler must match)
- ``report.json``: what was built (parameter counts, reference cases)

The shapes follow ``TINY_MODELS.md`` and the shipped configs (the rope axes are the real ones
scaled to the tiny head width), so the pack's shape-based detection reads them as Z-Image.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

SEED = 1234
CASES = [
    {"name": "t2i_seed7", "prompt": "a red fox in snow", "negative": "", "seed": 7,
     "steps": 4, "guidance": 0.0, "width": 256, "height": 256},
    {"name": "cfg_seed3", "prompt": "a lighthouse at dusk", "negative": "blurry", "seed": 3,
     "steps": 3, "guidance": 1.5, "width": 256, "height": 320},
]  # fmt: skip
CORPUS = [
    "a red fox in snow", "a lighthouse at dusk", "a cat on a mat", "blurry", "a photo of a dog",
    "the quick brown fox jumps over the lazy dog", "sunrise over the sea, 35mm film",
    "a bowl of fruit on a wooden table", "user assistant system think",
]  # fmt: skip
CHAT_TEMPLATE = (
    "{%- for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}"
)


def build_tokenizer(folder: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=384,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS * 4, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        padding_side="right",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(folder))
    return fast


def randomize(module: torch.nn.Module, scale: float) -> None:
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=g) * scale
            if "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + noise)
            else:
                p.copy_(noise)


def to_original_transformer(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for key, value in sd.items():
        if ".attention.to_k." in key or ".attention.to_v." in key:
            continue
        new = key.replace("all_x_embedder.2-1.", "x_embedder.")
        new = new.replace("all_final_layer.2-1.", "final_layer.")
        new = new.replace(".attention.to_out.0.", ".attention.out.")
        new = new.replace(".attention.norm_q.", ".attention.q_norm.")
        new = new.replace(".attention.norm_k.", ".attention.k_norm.")
        if ".attention.to_q.weight" in key:
            k = key.replace("to_q", "to_k")
            v = key.replace("to_q", "to_v")
            new = new.replace(".attention.to_q.weight", ".attention.qkv.weight")
            value = torch.cat([value, sd[k], sd[v]], dim=0)
        out[new] = value.contiguous()
    return out


def to_ldm_vae(sd: dict[str, torch.Tensor], levels: int) -> dict[str, torch.Tensor]:
    from diffusers.loaders.single_file_utils import DIFFUSERS_TO_LDM_MAPPING

    top = DIFFUSERS_TO_LDM_MAPPING["vae"]
    out: dict[str, torch.Tensor] = {}
    for key, value in sd.items():
        if key in top:
            out[top[key]] = value
            continue
        new = key
        for side in ("encoder", "decoder"):
            for i in range(levels):
                new = new.replace(f"encoder.down_blocks.{i}.resnets.", f"encoder.down.{i}.block.")
                new = new.replace(
                    f"encoder.down_blocks.{i}.downsamplers.0.", f"encoder.down.{i}.downsample."
                )
                j = levels - 1 - i
                new = new.replace(f"decoder.up_blocks.{i}.resnets.", f"decoder.up.{j}.block.")
                new = new.replace(
                    f"decoder.up_blocks.{i}.upsamplers.0.", f"decoder.up.{j}.upsample."
                )
            for k in range(2):
                new = new.replace(f"{side}.mid_block.resnets.{k}.", f"{side}.mid.block_{k + 1}.")
        new = new.replace("conv_shortcut", "nin_shortcut")
        if ".mid_block.attentions.0." in new:
            new = new.replace(".mid_block.attentions.0.", ".mid.attn_1.")
            new = new.replace("group_norm.", "norm.").replace("to_out.0.", "proj_out.")
            new = new.replace("to_q.", "q.").replace("to_k.", "k.").replace("to_v.", "v.")
            if value.ndim == 2:
                value = value[:, :, None, None]
        out[new] = value.contiguous()
    return out


def main(out: Path) -> None:
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        ZImagePipeline,
        ZImageTransformer2DModel,
    )
    from diffusers.loaders.single_file_utils import (
        convert_ldm_vae_checkpoint,
        convert_z_image_transformer_checkpoint_to_diffusers,
    )
    from safetensors.torch import save_file
    from transformers import Qwen3Config, Qwen3Model

    started = time.perf_counter()
    torch.manual_seed(SEED)
    comfy = out / "comfy"
    for sub in ("diffusion_models", "vae", "text_encoders"):
        (comfy / sub).mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(comfy / "text_encoders" / "qwen_3_4b_tokenizer")

    te_cfg = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=40960,
        rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    )  # fmt: skip
    text_encoder = Qwen3Model(te_cfg).eval()
    randomize(text_encoder, 0.2)
    transformer = ZImageTransformer2DModel(
        all_patch_size=(2,), all_f_patch_size=(1,), in_channels=16, dim=64, n_layers=2,
        n_refiner_layers=1, n_heads=2, n_kv_heads=2, norm_eps=1e-5, qk_norm=True,
        cap_feat_dim=32, rope_theta=256.0, t_scale=1000.0, axes_dims=[8, 12, 12],
        axes_lens=[1536, 512, 512],
    ).eval()  # fmt: skip
    randomize(transformer, 0.1)
    vae = AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=16,
        down_block_types=["DownEncoderBlock2D"] * 4, up_block_types=["UpDecoderBlock2D"] * 4,
        block_out_channels=[32, 32, 32, 32], layers_per_block=1, norm_num_groups=32,
        scaling_factor=0.3611, shift_factor=0.1159, use_quant_conv=False,
        use_post_quant_conv=False, sample_size=1024, force_upcast=True,
    ).eval()  # fmt: skip
    scheduler = FlowMatchEulerDiscreteScheduler(
        num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=False
    )
    pipe = ZImagePipeline(
        scheduler=scheduler, vae=vae, text_encoder=text_encoder, tokenizer=tokenizer,
        transformer=transformer,
    )  # fmt: skip
    pipe.save_pretrained(str(out / "diffusers"))

    # the ComfyUI single-file layout, checked against diffusers' own converters
    t_sd = {k: v.detach().clone() for k, v in transformer.state_dict().items()}
    original = to_original_transformer(t_sd)
    back = convert_z_image_transformer_checkpoint_to_diffusers(dict(original))
    assert set(back) == set(t_sd), set(back) ^ set(t_sd)
    assert all(torch.equal(back[k], t_sd[k]) for k in t_sd)
    save_file(original, str(comfy / "diffusion_models" / "tiny_z_image_turbo.safetensors"))

    v_sd = {k: v.detach().clone() for k, v in vae.state_dict().items()}
    ldm = to_ldm_vae(v_sd, 4)
    back = convert_ldm_vae_checkpoint(dict(ldm), dict(vae.config))
    assert set(back) == set(v_sd), set(back) ^ set(v_sd)
    assert all(torch.equal(back[k], v_sd[k]) for k in v_sd)
    save_file(ldm, str(comfy / "vae" / "tiny_ae.safetensors"))

    te_sd = {
        f"model.{k}": v.detach().clone().contiguous() for k, v in text_encoder.state_dict().items()
    }
    save_file(te_sd, str(comfy / "text_encoders" / "tiny_qwen3.safetensors"))

    # diffusers' reference renders, from the saved folder, offline
    ref = out / "reference"
    ref.mkdir(exist_ok=True)
    loaded = ZImagePipeline.from_pretrained(str(out / "diffusers"), local_files_only=True)
    loaded.set_progress_bar_config(disable=True)
    for case in CASES:
        image = loaded(
            prompt=case["prompt"], negative_prompt=case["negative"] or None,
            height=case["height"], width=case["width"], num_inference_steps=case["steps"],
            guidance_scale=case["guidance"],
            generator=torch.Generator("cpu").manual_seed(case["seed"]),
        ).images[0]  # fmt: skip
        image.save(ref / f"{case['name']}.png")
    report = {
        "cases": CASES,
        "params": {
            "transformer": sum(p.numel() for p in transformer.parameters()),
            "vae": sum(p.numel() for p in vae.parameters()),
            "text_encoder": sum(p.numel() for p in text_encoder.parameters()),
        },
        "seconds": round(time.perf_counter() - started, 2),
    }
    (out / "report.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
