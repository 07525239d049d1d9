"""Start Inline: ``python main.py [--listen [ADDR]] [--port N] [--token T] ...``.

Maps friendly flags onto ``INLINE_*`` variables, then serves /v1 (and, with
``--front-end-root DIR``, a local single-page app at ``/``). ``./webui.sh`` sets the workspace
up first and passes its flags here.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent
SERVE = ROOT / "host" / "src" / "inline_host" / "cli" / "_serve.py"


def _serve_module() -> ModuleType:
    """``inline serve``'s flags and runner; read from its file when the workspace is not set up
    yet (``./webui.sh --help`` on a fresh machine runs with the standard library alone)."""
    try:
        from inline_host.cli import _serve
    except ImportError:
        spec = importlib.util.spec_from_file_location("_inline_serve", SERVE)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return _serve


def build_parser() -> argparse.ArgumentParser:
    """The launcher's flags (``inline serve`` has the same ones)."""
    p = argparse.ArgumentParser(
        prog="webui.sh / main.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _serve_module().add_server_flags(p)
    p.add_argument("--version", action=_VersionAction)
    return p


class _VersionAction(argparse.Action):
    """``--version``: the engine's, SDK's and protocol's versions (as ``/v1/health`` has them)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(
            option_strings,
            dest,
            nargs=0,
            default=argparse.SUPPRESS,
            help="print the engine, SDK and protocol versions, then exit",
        )

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from inline_host.cli import version_line

        print(version_line())
        parser.exit(0)


def main(argv: list[str] | None = None) -> int:
    return _serve_module().run_server(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
