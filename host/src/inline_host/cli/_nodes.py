"""``inline nodes [--json]`` and ``inline nodes TYPE``: the node types this host serves.

Read from the registry as ``GET /v1/models`` serves it: no venv is built to list them (packs
not built yet are described from their sources), no worker is started.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

import msgspec
from inline_core import did_you_mean
from inline_registry import MergedRegistry, load_registry
from inline_sdk import Descriptor

from .._settings import Settings

__all__ = ("add_nodes_parser", "run_nodes")

EXIT_UNKNOWN = 2


def add_nodes_parser(sub: Any) -> None:
    """``inline nodes``."""
    nodes = sub.add_parser("nodes", help="list node types (or show one) with ports and params")
    nodes.add_argument("type", nargs="?", help="a node type to show, such as image/resize")
    nodes.add_argument("--json", action="store_true", help="descriptors as JSON")


def run_nodes(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Print every node type, or one."""
    settings = Settings.from_env()
    registry = load_registry(settings.packs_dir, settings.extra_packs)
    for name, reason in registry.failed.items():
        print(f"warning: pack '{name}' is unavailable: {reason}", file=sys.stderr)
    if args.type is not None:
        entry = registry.lookup(args.type)
        if entry is None:
            hint = did_you_mean(args.type, registry.node_types())
            print(f"error: unknown node type {args.type!r}.{hint}", file=sys.stderr)
            return EXIT_UNKNOWN
        if args.json:
            out.write(json.dumps(_as_json(registry, entry.descriptor), indent=2) + "\n")
        else:
            out.write(_show(registry, entry.descriptor))
        return 0
    descriptors = registry.descriptors()
    if args.json:
        out.write(json.dumps([_as_json(registry, d) for d in descriptors], indent=2) + "\n")
        return 0
    for d in descriptors:
        out.write(_summary(registry, d))
    return 0


def _pack(registry: MergedRegistry, d: Descriptor) -> str:
    entry = registry.lookup(d.type)
    return entry.pack if entry is not None else "?"


def _as_json(registry: MergedRegistry, d: Descriptor) -> dict[str, Any]:
    body = msgspec.to_builtins(d)
    body.pop("paramsSchema", None)
    return {"type": d.type, "pack": _pack(registry, d), **body}


def _ports(ports: Any, *, inputs: bool = True) -> str:
    optional = ", optional"
    shown = [f"{p.id} ({p.kind}{optional if inputs and not p.required else ''})" for p in ports]
    return ", ".join(shown) or "-"


def _value(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _param(p: Any) -> str:
    text = f"{p.key}={_value(p.default)}"
    bounds = [f"{k} {_value(v)}" for k, v in (("min", p.min), ("max", p.max), ("step", p.step))]
    bounds = [b for b, v in zip(bounds, (p.min, p.max, p.step), strict=True) if v is not None]
    if p.options:
        bounds.append("one of " + "|".join(o.value for o in p.options))
    return text + (f" ({', '.join(bounds)})" if bounds else "")


def _summary(registry: MergedRegistry, d: Descriptor) -> str:
    params = ", ".join(_param(p) for p in d.params) or "-"
    return (
        f"{d.type}  [{_pack(registry, d)}]  {d.title}\n"
        f"    inputs:  {_ports(d.inputs)}\n"
        f"    outputs: {_ports(d.outputs, inputs=False)}\n"
        f"    params:  {params}\n"
    )


def _show(registry: MergedRegistry, d: Descriptor) -> str:
    lines = [
        f"{d.type}: {d.title}",
        f"  pack:     {_pack(registry, d)} (node version {d.version})",
        f"  category: {d.category}" + ("  (hidden from add-node menus)" if d.hidden else ""),
        "  inputs:",
        *(f"    {p.id:<16} {p.kind:<12} {p.label}" + ("" if p.required else "  (optional)")
          for p in d.inputs),
        "  outputs:",
        *(f"    {p.id:<16} {p.kind:<12} {p.label}" for p in d.outputs),
        "  params:",
        *(f"    {_param(p)}  -- {p.label}" for p in d.params),
    ]  # fmt: skip
    if not d.inputs:
        lines.insert(lines.index("  inputs:") + 1, "    -")
    if not d.params:
        lines.append("    -")
    for m in d.models:
        state = "present" if m.present else "missing: inline models pull " + d.type
        lines.append(f"  model: {m.category}/{m.file} ({state})")
    return "\n".join(lines) + "\n"
