"""``--version`` for ``inline``, ``main.py`` and ``./webui.sh``: the engine, SDK and protocol."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from .._settings import versions

__all__ = ("VersionAction", "version_line")


def version_line() -> str:
    """``inline 0.1.0 (sdk 1.4.0, protocol 1)``: what ``/v1/health`` reports as ``version``."""
    v = versions()
    return f"inline {v['engine']} (sdk {v['sdk']}, protocol {v['protocol']})"


class VersionAction(argparse.Action):
    """``--version``: print ``version_line()`` and exit 0 (computed only when asked)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "print the engine, SDK and protocol versions, then exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        print(version_line(), file=sys.stdout)
        parser.exit(0)
