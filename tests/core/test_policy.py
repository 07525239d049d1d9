"""The placement policy over a table of machines, with the real Z-Image sizes."""

from __future__ import annotations

import pytest
from inline_core import (
    GIB,
    Budget,
    Estimate,
    Gpu,
    Inventory,
    activation_bytes,
    estimate_paths,
    place,
)
from inline_core._policy import GPU_RESERVE, cuda_attention

from ..models._sparse import write_all


@pytest.fixture(scope="module")
def zimage(tmp_path_factory: pytest.TempPathFactory) -> Estimate:
    """The three real Z-Image Turbo files as sparse files, estimated from their headers."""
    files = write_all(tmp_path_factory.mktemp("models"))
    comps = tuple(estimate_paths(sorted(files.values())))
    return Estimate(comps, activation_bytes(1024, 1024))


def machine(ram_gb: float, *vram_gb: float, bf16: bool = True, nvlink: bool = False) -> Inventory:
    ram = int(ram_gb * GIB)
    gpus = tuple(
        Gpu(i, f"gpu{i}", int(v * GIB), int(v * GIB), bf16, nvlink) for i, v in enumerate(vram_gb)
    )
    return Inventory(ram, ram, gpus)


def test_estimates_come_from_headers_at_real_scale(zimage):
    by_role = {c.role: c for c in zimage.components}
    assert by_role["diffusion"].params == 6_154_908_736
    assert by_role["text-encoder"].params == 4_022_468_096
    assert by_role["vae"].params == 83_819_683
    assert by_role["diffusion"].bytes == 12_309_817_472  # bf16 tensor bytes (file adds header)
    assert 0.85 * GIB < zimage.activation_bytes < 0.95 * GIB


def plan_of(p):
    return {c.role: (c.device, c.dtype, c.quantization, c.offload) for c in p.components}


@pytest.mark.parametrize(
    ("name", "inventory", "expected"),
    [
        (
            "cpu only, 16 GB RAM",
            machine(16),
            {
                "diffusion": ("cpu", "fp32", "int8", "resident"),
                "text-encoder": ("cpu", "fp32", "int8", "resident"),
                "vae": ("cpu", "fp32", "none", "resident"),
            },
        ),
        (
            "6 GB laptop GPU, 32 GB RAM",
            machine(32, 6),
            {
                "diffusion": ("cuda", "bf16", "none", "sequential"),
                "text-encoder": ("cuda", "bf16", "none", "sequential"),
                "vae": ("cuda", "bf16", "none", "sequential"),
            },
        ),
        (
            "12 GB GPU",
            machine(32, 12),
            {
                "diffusion": ("cuda", "bf16", "int8", "resident"),
                "text-encoder": ("cuda", "bf16", "int8", "resident"),
                "vae": ("cuda", "bf16", "none", "resident"),
            },
        ),
        (
            "24 GB GPU",
            machine(64, 24),
            {
                "diffusion": ("cuda", "bf16", "none", "resident"),
                "text-encoder": ("cuda", "bf16", "none", "resident"),
                "vae": ("cuda", "bf16", "none", "resident"),
            },
        ),
        (
            "80 GB GPU",
            machine(128, 80),
            {
                "diffusion": ("cuda", "bf16", "none", "resident"),
                "text-encoder": ("cuda", "bf16", "none", "resident"),
                "vae": ("cuda", "bf16", "none", "resident"),
            },
        ),
    ],
)
def test_expected_plan_per_machine(zimage, name, inventory, expected):
    placement = place(inventory, zimage)
    assert placement.fits, placement.reason
    assert plan_of(placement) == expected, name


def test_16_gb_is_int8_all_resident_not_bf16_with_the_text_encoder_parked(zimage):
    # parked between encodes, the text encoder still comes back beside the resident bf16
    # transformer to encode: 20.9 GB at the peak on an H200 under a 16 GB budget. int8 of both,
    # resident, peaked at 11.5 GB there (bench/gpu_memory.py).
    p16 = place(machine(64, 16), zimage)
    assert not p16.park_text_encoder
    assert {k: v[2:] for k, v in plan_of(p16).items()} == {
        "diffusion": ("int8", "resident"),
        "text-encoder": ("int8", "resident"),
        "vae": ("none", "resident"),
    }
    assert p16.peak_vram_bytes <= 16 * GIB - GPU_RESERVE
    assert not place(machine(64, 24), zimage).park_text_encoder


def test_two_gpus_get_a_parallel_placement(zimage):
    assert place(machine(128, 80, 80), zimage).parallel == "ring"  # PCIe
    assert place(machine(128, 80, 80, nvlink=True), zimage).parallel == "ulysses"


def test_gpus_without_bf16_use_fp16(zimage):
    assert place(machine(64, 48, bf16=False), zimage).dtype == "fp16"


def test_the_attention_kernel_follows_the_device_and_dtype(zimage):
    # what the packs' denoisers run SDPA with on CUDA (INLINE_ATTENTION overrides it there)
    assert place(machine(64, 48), zimage).attention == "flash"  # bf16
    assert place(machine(64, 48, bf16=False), zimage).attention == "flash"  # fp16
    assert place(machine(64, 80), zimage, "cpu").attention == "sdpa"  # torch picks on the CPU
    assert cuda_attention("fp32") == "efficient"


def test_a_vram_budget_and_the_lowvram_profile_are_honoured(zimage):
    capped = place(machine(64, 80), zimage, budget=Budget(vram_bytes=8 * GIB))
    # int8 of both is 10.2 GB at once: one at a time on the GPU (7.1 GB at the peak on an H200)
    assert plan_of(capped)["diffusion"][2:] == ("int8", "model")
    assert capped.peak_vram_bytes <= 8 * GIB - GPU_RESERVE
    low = place(machine(64, 80), zimage, "lowvram")
    assert plan_of(low)["diffusion"][3] == "model"
    cpu = place(machine(64, 80), zimage, "cpu")
    assert cpu.device == "cpu" and cpu.dtype == "fp32"


def test_too_big_for_vram_and_ram_is_refused_naming_sizes(zimage):
    p = place(machine(4, 2), zimage)
    assert not p.fits
    assert p.reason.startswith("Won't fit: even int8 needs ")
    assert "GiB of VRAM" in p.reason and "GiB of system RAM" in p.reason
    assert "z_image_turbo_bf16.safetensors (11.5 GiB)" in p.reason
    cpu_small = place(machine(8), zimage)
    assert not cpu_small.fits and "6.8 GiB of system RAM" in cpu_small.reason
