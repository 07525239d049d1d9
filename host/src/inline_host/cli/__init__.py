"""Every ``inline`` command (``inline run`` in ``_run``, ``inline serve`` in ``_serve``, ...)."""

from ._main import main
from ._serve import add_server_flags, run_server
from ._version import version_line

__all__ = ("add_server_flags", "main", "run_server", "version_line")
