"""What keeps the host standing under hostile input and faults."""

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
from ._slow import GuardedH11, SlowLimits, guarded_h11
from ._token import InsecureBind, check_bind, is_loopback, token_middleware

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
