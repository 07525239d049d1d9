"""The host is built in floors: each folder of ``host/`` imports only the folders below it, and
only through their faces (``__init__``), never another folder's private module.

Bottom floor first. Folders on one floor (``runs`` and ``hub``) do not import each other. The
base modules (``_settings``, ``_errors``, ``_values``) are the ground every floor stands on.
Imports inside functions count as much as those at the top of a module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

HOST = Path(__file__).resolve().parents[1] / "host" / "src" / "inline_host"
BASE = ("_settings", "_errors", "_values")
FLOORS: tuple[tuple[str, ...], ...] = (
    ("comfyui", "assets"),
    ("guard",),
    ("workers",),
    ("models",),
    ("runs", "hub"),
    ("importers",),
    ("packs",),
    ("api",),
    ("cli",),
)
#: The package's own face and ``python -m inline_host``: the top, they may import any face.
TOP = ("__init__", "__main__")


def floor_of(unit: str) -> int:
    if unit in BASE:
        return -1
    for level, units in enumerate(FLOORS):
        if unit in units:
            return level
    if unit in TOP:
        return len(FLOORS)
    raise AssertionError(f"inline_host.{unit} is on no floor: add it to FLOORS in {__file__}")


def host_imports(source: str, rel: Path) -> Iterator[tuple[int, tuple[str, ...]]]:
    """Each import of ``inline_host`` in module ``rel`` (under ``inline_host/``): its line and
    the dotted parts below ``inline_host`` (``("runs", "_engine")``; ``("runs",)`` for ``from
    ..runs import X``, and one entry per name for ``from .. import X``)."""
    package = rel.parent.parts  # what a relative import starts from
    for node in ast.walk(ast.parse(source, str(rel))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("inline_host."):
                    yield node.lineno, tuple(alias.name.split(".")[1:])
        elif isinstance(node, ast.ImportFrom):
            module = node.module.split(".") if node.module else []
            if node.level == 0:
                if not module or module[0] != "inline_host":
                    continue
                parts = tuple(module[1:])
            else:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                parts = (*base, *module)
            if parts:
                yield node.lineno, parts
            else:
                for alias in node.names:
                    yield node.lineno, (alias.name,)


def problems_of(source: str, rel: Path) -> list[str]:
    """What module ``rel`` (its text ``source``) imports against the floors."""
    found: list[str] = []
    unit = rel.parts[0].removesuffix(".py")
    level = floor_of(unit)
    for line, parts in host_imports(source, rel):
        target = parts[0]
        if target == unit or target in BASE:
            continue
        where = f"{rel}:{line} imports inline_host.{'.'.join(parts)}"
        if floor_of(target) >= level:
            found.append(f"{where}: {target}/ is not below {unit}")
        if len(parts) > 1 and parts[1].startswith("_"):
            found.append(f"{where}: a private module (import from inline_host.{target})")
    return found


def problems() -> list[str]:
    found: list[str] = []
    for path in sorted(HOST.rglob("*.py")):
        found += problems_of(path.read_text(), path.relative_to(HOST))
    return found


def test_every_host_folder_imports_only_the_faces_of_folders_below_it() -> None:
    found = problems()
    assert not found, "\n".join(found)


def test_the_check_sees_a_back_import_and_a_private_one() -> None:
    """The check itself: a folder that imports one above it, or another's private module."""
    src = "def f():\n    from ..api import create_app\nfrom ..runs._engine import Engine\n"
    found = problems_of(src, Path("workers/_probe.py"))
    assert any("api/ is not below workers" in p for p in found), found
    assert any("a private module" in p and "runs._engine" in p for p in found), found
    assert problems_of("from ..guard import check_outputs\n", Path("workers/_x.py")) == []
