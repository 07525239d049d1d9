"""What keeps the host standing under hostile input and faults."""

import importlib
from typing import TYPE_CHECKING, Any, Final

from ._cleanup import remove_dead_hosts_segments, remove_orphan_temps
from ._datadir import DataDirBusy, DataDirLock, Holder, held_elsewhere, lock_data_dir
from ._http import HostPolicy, check_request, request_guard
from ._limits import (
    MAX_NESTING,
    MAX_PARAMS_BYTES,
    OutputTooLarge,
    check_outputs,
    describe_int,
    too_deep,
    wide_ints,
)
from ._operator import bearer_matches, guard_operator, guard_operator_always, operator_token
from ._paths import InputPaths, PathRefused
from ._token import InsecureBind, check_bind, is_loopback, token_middleware

if TYPE_CHECKING:
    from ._slow import GuardedH11, SlowLimits, guarded_h11

#: What subclasses uvicorn's protocol, loaded when first named (by the server): the ``inline``
#: commands that serve nothing never import the web stack.
_LAZY: Final = {"GuardedH11": "_slow", "SlowLimits": "_slow", "guarded_h11": "_slow"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = (
    "MAX_NESTING",
    "DataDirBusy",
    "DataDirLock",
    "GuardedH11",
    "Holder",
    "HostPolicy",
    "InsecureBind",
    "check_bind",
    "is_loopback",
    "token_middleware",
    "InputPaths",
    "OutputTooLarge",
    "PathRefused",
    "SlowLimits",
    "bearer_matches",
    "MAX_PARAMS_BYTES",
    "check_outputs",
    "describe_int",
    "wide_ints",
    "check_request",
    "guard_operator",
    "guard_operator_always",
    "guarded_h11",
    "held_elsewhere",
    "lock_data_dir",
    "operator_token",
    "remove_dead_hosts_segments",
    "remove_orphan_temps",
    "request_guard",
    "too_deep",
)
