"""The ``inline`` command."""

from ._main import main
from ._version import version_line

__all__ = ("main", "version_line")
