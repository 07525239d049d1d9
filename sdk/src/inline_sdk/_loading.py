"""Loading a pack in its worker: its pluggy plugin from the entry point, and what it declares."""

from __future__ import annotations

from importlib import metadata

import pluggy

from . import hookspecs
from ._comfyui import ComfyMapping
from ._errors import NodeDeclarationError
from ._node import NodeSpec


def _plugins(pack: str) -> tuple[metadata.EntryPoint, pluggy.PluginManager]:
    eps = metadata.entry_points(group=hookspecs.ENTRY_POINT_GROUP, name=pack)
    if not eps:
        raise LookupError(
            f"no pack named '{pack}' in this environment (entry point group "
            f"'{hookspecs.ENTRY_POINT_GROUP}')"
        )
    ep = next(iter(eps))
    return ep, plugin_manager(pack, ep.load())


def plugin_manager(pack: str, plugin: object) -> pluggy.PluginManager:
    """A plugin manager with the SDK's hookspecs and the loaded pack module registered."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.register(plugin, name=pack)
    return pm


def collect_mappings(pm: pluggy.PluginManager) -> list[ComfyMapping]:
    """What the registered plugins return from ``inline_comfyui_mappings``; raise
    ``NodeDeclarationError`` naming anything that is not a ``ComfyMapping``."""
    found: list[ComfyMapping] = []
    problems: list[str] = []
    for group in pm.hook.inline_comfyui_mappings():
        for item in group or ():
            if isinstance(item, ComfyMapping):
                found.append(item)
            else:
                problems.append(f"inline_comfyui_mappings returned {item!r}, not a ComfyMapping")
    if problems:
        raise NodeDeclarationError(problems)
    return found


def load_mappings(pack: str) -> list[ComfyMapping]:
    """The ComfyUI mappings the pack named ``pack`` declares."""
    return collect_mappings(_plugins(pack)[1])


def load_pack(pack: str) -> tuple[str, list[NodeSpec]]:
    """Load the pack named ``pack`` from this environment's entry points; its version and nodes."""
    ep, pm = _plugins(pack)
    specs = collect_specs(pm)
    version = ep.dist.version if ep.dist is not None else "0.0.0"
    return version, specs


def collect_nodes(pack: str, plugin: object) -> list[NodeSpec]:
    """The nodes a loaded pack module declares through its ``inline_nodes`` hook, checked."""
    return collect_specs(plugin_manager(pack, plugin))


def collect_specs(pm: pluggy.PluginManager) -> list[NodeSpec]:
    """The nodes the registered plugins declare, checked (all problems at once)."""
    specs: list[NodeSpec] = []
    problems: list[str] = []
    for group in pm.hook.inline_nodes():
        for item in group or ():
            if isinstance(item, NodeSpec):
                specs.append(item)
            else:
                problems.append(f"inline_nodes returned {item!r}, which is not a @node")
    seen: set[str] = set()
    for spec in specs:
        if spec.type in seen:
            problems.append(f"node type '{spec.type}' is declared twice")
        seen.add(spec.type)
    if problems:
        raise NodeDeclarationError(problems)
    return specs
