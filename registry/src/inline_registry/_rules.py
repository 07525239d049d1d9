"""The rules an installed pack must follow, checked before anything of it is installed.

- Requirement lines: no ``-e``, ``-r``, ``-c``, ``--find-links``, ``--index-url``, ``file://``
  or direct URLs (nor uv sources or indexes in the pyproject), unless the operator explicitly
  allows local sources.
- The SDK gate: the pack's ``inline-sdk`` requirement must admit a version of the host's major
  no newer than the host's own (a pack built against 1.0 runs on every 1.x host).
- The platform pins (torch and its build, numpy's major, the SDK): a pack asking for another
  version of a pinned distribution is refused, naming both.
- Node ids: first-party packs own the bare vocabulary; every other pack's ids start with its own
  name, and its name is not one the vocabulary uses.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Final

from inline_sdk import SDK_VERSION
from packaging.markers import InvalidMarker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import Specifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ._errors import NodeIdRefused, PackInvalid, RequirementsRefused, SdkMismatch

PACK_NAME: Final = re.compile(r"^[a-z][a-z0-9-]{0,62}[a-z0-9]$")
#: First segments of the contract's node vocabulary, and the host's own names: no third-party
#: pack may take them (its node ids would read as first-party ones).
RESERVED_NAMES: Final = frozenset(
    {
        "input", "load", "encode", "latent", "sample", "vae", "character", "control", "train",
        "alibaba", "krea", "black-forest-labs", "minimax", "lightricks", "text", "image", "video",
        "audio", "mesh", "model", "models", "builtin", "ext", "host", "core", "sdk", "registry",
        "inline", "basics", "primitives", "zimage", "diffusers", "hosted", "anthropic", "google",
    }
)  # fmt: skip
HOST_DISTRIBUTIONS: Final = frozenset({"inline", "inline-core", "inline-registry", "inline-host"})
OPTION_NAMES: Final = {
    "-e": "an editable install (-e)",
    "--editable": "an editable install (-e)",
    "-r": "an included requirements file (-r)",
    "--requirement": "an included requirements file (-r)",
    "-c": "a constraints file (-c)",
    "--constraint": "a constraints file (-c)",
    "-f": "a find-links location (--find-links)",
    "--find-links": "a find-links location (--find-links)",
    "-i": "another index (--index-url)",
    "--index-url": "another index (--index-url)",
    "--extra-index-url": "another index (--extra-index-url)",
    "--index": "another index (--index)",
    "--trusted-host": "a trusted host (--trusted-host)",
}
UV_INDEX_KEYS: Final = ("index", "index-url", "extra-index-url", "find-links", "sources")


def requirement_lines(tree: Path) -> list[tuple[str, str]]:
    """Every requirement line a pack source declares, with where it is (file and key)."""
    lines: list[tuple[str, str]] = []
    data = _pyproject(tree)
    for i, dep in enumerate(data.get("project", {}).get("dependencies", []) or []):
        lines.append((f"pyproject.toml project.dependencies[{i}]", str(dep)))
    for i, dep in enumerate(data.get("build-system", {}).get("requires", []) or []):
        lines.append((f"pyproject.toml build-system.requires[{i}]", str(dep)))
    for req_file in sorted(tree.glob("requirements*.txt")):
        for n, raw in enumerate(req_file.read_text(errors="replace").splitlines(), 1):
            line = raw.split(" #", 1)[0].strip()
            if line and not line.startswith("#"):
                lines.append((f"{req_file.name}:{n}", line))
    return lines


def extra_requirements(tree: Path) -> list[str]:
    """Lines of a ``requirements.txt`` at the pack's root (ComfyUI-style packs), resolved too."""
    path = tree / "requirements.txt"
    if not path.is_file():
        return []
    out = []
    for raw in path.read_text(errors="replace").splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def _pyproject(tree: Path) -> dict[str, Any]:
    path = tree / "pyproject.toml"
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PackInvalid(str(tree), f"pyproject.toml does not parse: {exc}") from None


def line_problem(line: str) -> str | None:
    """Why a requirement line needs ``--allow-local-sources`` (None when it is a plain one)."""
    text = line.strip()
    if text.startswith("-"):
        option = re.split(r"[\s=]", text, maxsplit=1)[0]
        return OPTION_NAMES.get(option, f"a pip option ({option})")
    if "file:" in text.lower():
        return "a local file URL (file://)"
    try:
        req = Requirement(text)
    except (InvalidRequirement, InvalidMarker):
        return "a path or URL instead of a requirement"
    if req.url:
        return f"a direct URL ({req.url})"
    return None


def check_requirement_lines(
    pack: str, tree: Path, extra: list[tuple[str, str]], *, allow_local: bool
) -> None:
    """Refuse local sources, indexes and direct URLs (unless allowed) and host packages."""
    problems: list[str] = []
    for where, line in [*requirement_lines(tree), *extra]:
        reason = None if allow_local else line_problem(line)
        if reason is not None:
            problems.append(f"{where}: '{line}' is {reason}")
            continue
        try:
            name = canonicalize_name(Requirement(line).name)
        except (InvalidRequirement, InvalidMarker):
            continue
        if name in HOST_DISTRIBUTIONS:
            problems.append(f"{where}: '{line}' names a host package (a pack gets inline-sdk only)")
    uv = _pyproject(tree).get("tool", {}).get("uv", {})
    if not allow_local and isinstance(uv, dict):
        for key in UV_INDEX_KEYS:
            if key in uv:
                problems.append(f"pyproject.toml tool.uv.{key}: packages from other sources")
    if problems:
        raise RequirementsRefused(
            pack,
            problems,
            "Packs resolve from the package index only; an operator can allow local sources "
            "with --allow-local-sources.",
        )


# the SDK gate ----------------------------------------------------------------------------------
def _bounds(spec: SpecifierSet) -> list[tuple[str, Version]]:
    out = []
    for clause in spec:
        try:
            out.append((clause.operator, Version(clause.version.removesuffix(".*"))))
        except InvalidVersion:
            continue
    return out


def sdk_gate(pack: str, requires: list[str], manifest_sdk: str = "1") -> str:
    """Check the pack's ``inline-sdk`` requirement; the SDK version it was built against."""
    host = Version(SDK_VERSION)
    reqs = [r for r in _parse(requires) if canonicalize_name(r.name) == "inline-sdk"]
    if not reqs:
        raise PackInvalid(
            pack,
            f'it does not depend on inline-sdk (add "inline-sdk>={host.major}.0,<'
            f'{host.major + 1}" to its dependencies)',
        )
    spec = SpecifierSet()
    for r in reqs:
        spec &= r.specifier
    wanted = f"inline-sdk{spec}" if str(spec) else "inline-sdk"
    try:
        manifest_major = int(manifest_sdk.split(".")[0])
    except ValueError:
        raise PackInvalid(pack, f"tool.inline.sdk: '{manifest_sdk}' is not a version") from None
    if manifest_major != host.major:
        raise SdkMismatch(pack, f"{manifest_sdk} ([tool.inline] sdk)", SDK_VERSION)
    bounds = _bounds(spec)
    candidates = {host, *(v for _, v in bounds if v.major == host.major and v <= host)}
    candidates |= {Version(f"{host.major}.{m}") for m in range(host.minor + 1)}
    fitting = sorted(v for v in candidates if spec.contains(v, prereleases=True))
    if fitting:
        lows = [v for op, v in bounds if op in ("==", "===", "~=", ">=") and v.major == host.major]
        return str(min(lows) if lows else fitting[0])
    lows = [v for op, v in bounds if op in ("==", "===", "~=", ">=", ">")]
    built_for = f"{min(lows)} ({wanted})" if lows else wanted
    if lows and min(lows).major == host.major:
        raise SdkMismatch(
            pack, built_for, SDK_VERSION, note=f"it needs a newer {host.major}.x: upgrade Inline"
        )
    raise SdkMismatch(pack, built_for, SDK_VERSION)


def _parse(requires: list[str]) -> list[Requirement]:
    out = []
    for line in requires:
        try:
            req = Requirement(line)
        except (InvalidRequirement, InvalidMarker):
            continue
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            out.append(req)
    return out


# platform pins -------------------------------------------------------------------------------
def platform_pins(path: Path | None) -> dict[str, SpecifierSet]:
    """The distributions the constraints file pins, and how."""
    pins: dict[str, SpecifierSet] = {}
    if path is None or not path.is_file():
        return pins
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        try:
            req = Requirement(line)
        except (InvalidRequirement, InvalidMarker):
            continue
        name = canonicalize_name(req.name)
        pins[name] = pins.get(name, SpecifierSet()) & req.specifier
    return pins


def check_platform(
    pack: str, requires: list[str], pins: dict[str, SpecifierSet], where: Path | None
) -> None:
    """Refuse requirements that contradict the platform pins (torch, numpy's major...)."""
    problems = []
    for req in _parse(requires):
        name = canonicalize_name(req.name)
        pin = pins.get(name)
        if pin is None or not str(req.specifier) or _compatible(req.specifier, pin):
            continue
        problems.append(
            f"it requires {req.name}{req.specifier}, but the platform pins {req.name}{pin} "
            f"({where}): no pack can change {req.name}"
        )
    if problems:
        raise RequirementsRefused(
            pack, problems, "Install a version of the pack made for this platform."
        )


def _compatible(req: SpecifierSet, pin: SpecifierSet) -> bool:
    """False when ``req`` clearly excludes everything ``pin`` allows (uv judges the rest)."""
    pin_bounds = _bounds(pin)
    exact = [v for op, v in pin_bounds if op in ("==", "===")]
    if exact:
        return any(req.contains(v, prereleases=True) for v in exact)
    for op, v in _bounds(req):
        if op in ("==", "===") and not pin.contains(v, prereleases=True):
            return False
        if op in (">=", "~=", ">"):
            uppers = [u for o, u in pin_bounds if o in ("<", "<=")]
            if any(v >= u for u in uppers):
                return False
        if op in ("<", "<="):
            lowers = [low for o, low in pin_bounds if o in (">=", ">", "~=")]
            if any(v <= low for low in lowers):
                return False
    return True


# names and node ids --------------------------------------------------------------------------
def check_pack_name(name: str, reserved: frozenset[str] | set[str] = RESERVED_NAMES) -> None:
    """A third-party pack's name: lowercase, dashes, not a name the vocabulary uses."""
    if not PACK_NAME.match(name):
        raise PackInvalid(
            name,
            "a pack name is 2-64 characters: lowercase letters, digits and '-', "
            "starting with a letter",
        )
    if name in reserved:
        raise PackInvalid(name, f"'{name}' is reserved for first-party packs and the vocabulary")


def check_node_ids(pack: str, node_types: list[str]) -> None:
    """Every id of a third-party pack starts with ``<pack>/``."""
    problems = [
        f"'{t}' must start with '{pack}/' (first-party packs own the bare vocabulary)"
        for t in node_types
        if not t.startswith(f"{pack}/")
    ]
    if problems:
        raise NodeIdRefused(pack, problems)


def specifier_text(spec: Specifier | SpecifierSet) -> str:
    """A specifier as text (for messages)."""
    return str(spec)
