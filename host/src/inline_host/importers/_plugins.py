"""Sources by plugin: a package adds one without touching the host.

It declares an entry point in the group ``inline.importers`` naming a module (or object) that
implements the ``inline_importers`` hook, which returns its ``Importer`` subclasses::

    # pyproject.toml
    [project.entry-points."inline.importers"]
    example = "example_importer"

    # example_importer.py
    from inline_host.importers import Importer, hookimpl

    class ExampleImporter(Importer):
        prefix = "example"
        ...

    @hookimpl
    def inline_importers():
        return [ExampleImporter]

``importer_for("example:NAME")`` then finds it. A plugin that fails to load is named in the
log and left out; a plugin's prefix never replaces a built-in one.
"""

from __future__ import annotations

import logging
from importlib import metadata
from typing import Any, Final

import pluggy

from ..hub import SourceError
from ._base import Importer, split_model_id
from ._sources import BUILTIN

PROJECT: Final = "inline-importers"
ENTRY_POINT_GROUP: Final = "inline.importers"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
log = logging.getLogger("inline.importers")


class ImporterHooks:
    """The hook a source plugin implements."""

    @hookspec
    def inline_importers(self) -> list[type[Importer]]:  # type: ignore[empty-body]
        """The plugin's ``Importer`` subclasses (each with its own ``prefix``)."""


def plugin_manager() -> pluggy.PluginManager:
    """A plugin manager holding every installed source plugin (entry points read now)."""
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(ImporterHooks)
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            pm.register(ep.load(), name=f"{ep.name} ({ep.value})")
        except Exception as exc:  # a broken plugin never takes the others down
            log.warning("the importer plugin %s (%s) does not load: %s", ep.name, ep.value, exc)
    return pm


def importers() -> dict[str, type[Importer]]:
    """Every source by prefix: the built-in ones, then the plugins'."""
    found: dict[str, type[Importer]] = {cls.prefix: cls for cls in BUILTIN}
    pm = plugin_manager()
    for impl in pm.hook.inline_importers.get_hookimpls():  # one by one: a failing one is named
        name = impl.plugin_name
        try:
            made: Any = impl.function()
            classes: list[Any] = list(made or [])
        except Exception as exc:
            log.warning("the importer plugin %s fails: %s", name, exc)
            continue
        for cls in classes:
            ok = isinstance(cls, type) and issubclass(cls, Importer) and bool(cls.prefix)
            if not ok:
                log.warning("the importer plugin %s returns %r: not an Importer with a prefix",
                            name, cls)  # fmt: skip
            elif cls.prefix in found:
                log.warning("the importer plugin %s: prefix %r is taken by %s", name,
                            cls.prefix, found[cls.prefix].__name__)  # fmt: skip
            else:
                found[cls.prefix] = cls
    return found


def importer_for(source: str, **kw: Any) -> Importer:
    """The importer of ``PREFIX:MODEL[@REVISION]`` (``hf:ORG/NAME``, ``url:...``,
    ``file:...``, a plugin's); ``kw`` go to its constructor (``task``, ``models_dir``...).
    ``SourceError`` for a prefix no source has."""
    mid = split_model_id(source)
    known = importers()
    cls = known.get(mid.prefix)
    if cls is None:
        raise SourceError(
            f"'{source}': no source has the prefix '{mid.prefix}:' (known: "
            f"{', '.join(p + ':' for p in sorted(known))}; a plugin adds one, see "
            "inline_host.importers)"
        )
    if cls.prefix in ("url", "file"):  # a URL or a path keeps its '@'
        return cls(source.partition(":")[2], **kw)
    return cls(mid.model, revision=mid.revision, **kw)
