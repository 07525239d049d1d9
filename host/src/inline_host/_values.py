"""What the host holds of a worker's values (and the file extension each is written with), and
what a worker's handshake says it can do."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from inline_sdk.protocol import (
    CAP_BROKER,
    CAP_SHARED_MEMORY,
    HandleValue,
    MediaValue,
    Preview,
    Progress,
    ShmRef,
    Stream,
    TextValue,
    Value,
    Welcome,
)


@dataclass(frozen=True, slots=True)
class HostValue:
    """A value as the host holds it: the wire value and the worker generation that made it.

    ``pack`` is ``"host"`` for values the host itself holds (takes read back, chunked bytes).
    """

    value: Value
    pack: str
    generation: int

    @property
    def portable(self) -> bool:
        """Whether any worker can use it (not tied to one worker's handle table)."""
        return not isinstance(self.value, HandleValue)


CallEvent = Progress | Preview | Stream
EventCallback = Callable[[CallEvent], None]
#: The progress phase of a node whose pack's venv is being built for its first call.
PREPARING: Final = "preparing"


def worker_capabilities(welcome: Welcome) -> frozenset[str]:
    """What a worker understands. SDKs before 1.4 announce nothing: they share memory, and
    since 1.3 they take part in the memory broker."""
    if welcome.capabilities:
        return frozenset(welcome.capabilities)
    major, _, rest = welcome.sdk_version.partition(".")
    try:
        brokers = (int(major), int(rest.partition(".")[0])) >= (1, 3)
    except ValueError:
        brokers = False
    return frozenset({CAP_SHARED_MEMORY} | ({CAP_BROKER} if brokers else set()))


def foreign_handles(
    inputs: dict[str, list[HostValue]], pack: str, generation: int
) -> list[tuple[str, int]]:
    """The (port, index) of every input handle that worker ``generation`` of ``pack`` did not
    make: a handle names a slot in its own worker's table, and in any other worker that slot
    is empty or holds something else."""
    return [
        (port, i)
        for port, values in inputs.items()
        for i, hv in enumerate(values)
        if isinstance(hv.value, HandleValue) and (hv.pack, hv.generation) != (pack, generation)
    ]


def owned_handles(values: Any) -> list[int]:
    """The worker-table ids behind wire values (engine handles, shared-memory regions)."""
    ids: list[int] = []
    for v in values:
        if isinstance(v, HandleValue):
            ids.append(v.id)
        elif isinstance(v, MediaValue) and isinstance(v.data, ShmRef) and v.region is not None:
            ids.append(v.region)
    return ids


def media_extension(value: HostValue) -> str:
    """The file extension an output value is written with."""
    v = value.value
    if isinstance(v, MediaValue):
        return v.ext
    if isinstance(v, TextValue):
        return "txt"
    return "json"
