"""What this machine has, probed without torch: psutil for RAM, nvidia-ml-py for GPUs."""

from __future__ import annotations

import contextlib
from typing import Any

import psutil
from inline_core import Gpu, Inventory


def probe_gpus() -> tuple[Gpu, ...]:
    """NVIDIA GPUs through NVML; none when the library or a driver is missing."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return ()
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver, no device: a CPU machine
        return ()
    gpus = []
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem: Any = pynvml.nvmlDeviceGetMemoryInfo(handle)
            name = pynvml.nvmlDeviceGetName(handle)
            major, _minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            nvlink = False
            with contextlib.suppress(Exception):
                nvlink = bool(pynvml.nvmlDeviceGetNvLinkState(handle, 0))
            gpus.append(
                Gpu(
                    index=i,
                    name=name if isinstance(name, str) else name.decode(),
                    total_bytes=int(mem.total),
                    free_bytes=int(mem.free),
                    bf16=major >= 8,
                    nvlink=nvlink,
                )
            )
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    return tuple(gpus)


def probe() -> Inventory:
    """RAM and GPUs of this machine."""
    vm = psutil.virtual_memory()
    return Inventory(
        ram_total_bytes=int(vm.total), ram_free_bytes=int(vm.available), gpus=probe_gpus()
    )
