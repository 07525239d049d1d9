"""The SDPA kernel attention runs with: the device policy's ``attention`` (the broker's
``Placed.attention``: ``flash`` for bf16/fp16 on CUDA, ``efficient`` for fp32 on CUDA),
overridden by ``INLINE_ATTENTION`` (``flash``, ``efficient``, ``cudnn``, ``math``, or ``sdpa``:
torch picks). Only CUDA has a choice: on the CPU torch picks whatever is set. Behind the chosen
kernel the math one stays enabled (and, for the policy's choice, the memory-efficient one), so a
call the chosen kernel cannot take (flash takes no mask) still runs.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any, Final

from ._settings import attention_setting

log = logging.getLogger("inline.runtime.attention")
#: ``INLINE_ATTENTION`` / policy names and torch's ``SDPBackend`` members
KERNELS: Final = {
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
    "math": "MATH",
}
ATTR: Final = "_inline_attention"
_warned: set[str] = set()


def attention_kernel(module: Any) -> str:
    """The kernel name for ``module``: ``INLINE_ATTENTION`` when set, else the policy's."""
    forced = attention_setting()
    if forced and forced != "sdpa" and forced not in KERNELS:
        if forced not in _warned:
            _warned.add(forced)
            log.warning(
                "INLINE_ATTENTION=%s is not a kernel (flash, efficient, cudnn, math, sdpa): "
                "the policy's is used",
                forced,
            )
        forced = ""
    inner = getattr(module, "module", module)  # a compiled transformer's own module
    return forced or str(getattr(inner, ATTR, "sdpa"))


@contextlib.contextmanager
def attention_on(module: Any, device: Any) -> Iterator[str]:
    """Run the block with ``module``'s kernel on ``device`` (CUDA only; elsewhere nothing)."""
    name = attention_kernel(module)
    if getattr(device, "type", str(device)) != "cuda" or name not in KERNELS:
        yield "sdpa"
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    chosen = [getattr(SDPBackend, KERNELS[name])]
    if not attention_setting():  # the policy's: a masked call flash cannot take runs efficient
        chosen.append(SDPBackend.EFFICIENT_ATTENTION)
    chosen.append(SDPBackend.MATH)
    with sdpa_kernel(list(dict.fromkeys(chosen))):
        yield name
