"""Limits on what a worker may hand the host: outputs over ``INLINE_MAX_OUTPUT_MB`` are refused."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from inline_sdk.protocol import MAX_FRAME, ChunkedRef, InlineBytes, MediaValue, ShmRef, TextValue

from .._errors import InlineHostError


class OutputTooLarge(InlineHostError):
    """A node returned more bytes than the host accepts."""

    def __init__(self, node_id: str, node_type: str, port: str, size: int, cap: int) -> None:
        self.node_id = node_id
        super().__init__(
            f"Node '{node_id}' ({node_type}) returned {size / 2**20:.1f} MB on '{port}', more "
            f"than the {cap / 2**20:g} MB INLINE_MAX_OUTPUT_MB allows"
        )


def value_size(value: object) -> int:
    """The bytes a wire value carries (media, text); 0 for the rest (bounded by the frame size)."""
    if isinstance(value, MediaValue):
        data = value.data
        if isinstance(data, InlineBytes):
            return len(data.data)
        if isinstance(data, ShmRef | ChunkedRef):
            return data.size
        return 0
    if isinstance(value, TextValue):
        return len(value.text)
    return 0


def check_outputs(node_id: str, node_type: str, outputs: Mapping[str, object], cap: int) -> None:
    """Raise ``OutputTooLarge`` for the first output over ``cap`` bytes."""
    for port, value in outputs.items():
        size = value_size(value)
        if size > cap:
            raise OutputTooLarge(node_id, node_type, port, size, cap)


#: How deeply a run request may nest (params are shallow; 64 leaves room for any real one).
MAX_NESTING = 64


def too_deep(value: object, limit: int = MAX_NESTING) -> bool:
    """Whether ``value`` nests lists/dicts deeper than ``limit`` (checked without recursion)."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


#: What a call's params may take of a frame (the rest is the call's envelope and inputs).
MAX_PARAMS_BYTES: Final = MAX_FRAME - (256 << 10)
INT64 = (-(2**63), 2**63 - 1)


def wide_ints(value: Any, where: str, depth: int = 0) -> Iterator[tuple[str, int]]:
    """Every integer in ``value`` beyond 64 bits (the IPC wire carries none), with its path."""
    if depth > MAX_NESTING:
        return
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        if not INT64[0] <= value <= INT64[1]:
            yield where, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from wide_ints(v, f"{where}.{k}", depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from wide_ints(v, f"{where}[{i}]", depth + 1)


def describe_int(value: int) -> str:
    """A huge integer, short: ``2^70`` style when it is a power of two, else its digit count."""
    magnitude = abs(value)
    if magnitude and magnitude & (magnitude - 1) == 0:
        return f"{'-' if value < 0 else ''}2^{magnitude.bit_length() - 1}"
    return f"a {len(str(magnitude))}-digit integer"
