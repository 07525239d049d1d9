"""Models as a library: an importer per source names a model, sizes it, fetches it and writes
its card; the models on this machine are listed, shown and removed here.

    from inline_host.importers import importer_for

    imp = importer_for("hf:acme/tiny-llm")          # or HuggingFaceImporter("acme/tiny-llm")
    imp.name, imp.category, imp.requirements()       # sized from the headers: nothing fetched
    imp.files()                                      # what a fetch brings
    folder = imp.fetch(progress=print)               # resumable; writes models/llm/tiny-llm/
    imp.card()                                       # its inline.json

Sources: ``hf:ORG/NAME[@REVISION]`` (``HuggingFaceImporter``), ``url:https://.../x.safetensors``
(``UrlImporter``), ``file:/path/to/folder`` (``FileImporter``), and any a plugin adds through
the ``inline_importers`` hook (entry point group ``inline.importers``; see ``_plugins``).
"""

from ..hub import CardError, HubError, SourceError, WeightCount, origin_of
from ..hub import count_header as weight_count
from ..hub import folder_weights as local_weights
from ._base import FileProgress, Importer, ModelFile, ModelId, Requirements, split_model_id
from ._local import LocalModel, ModelNotFound, find_local, list_local, remove_local
from ._plugins import ENTRY_POINT_GROUP, ImporterHooks, hookimpl, importer_for, importers
from ._sources import FileImporter, HuggingFaceImporter, UrlImporter

__all__ = (
    "ENTRY_POINT_GROUP",
    "CardError",
    "FileImporter",
    "FileProgress",
    "HubError",
    "HuggingFaceImporter",
    "Importer",
    "ImporterHooks",
    "LocalModel",
    "ModelFile",
    "ModelId",
    "ModelNotFound",
    "Requirements",
    "SourceError",
    "UrlImporter",
    "WeightCount",
    "find_local",
    "hookimpl",
    "importer_for",
    "importers",
    "local_weights",
    "list_local",
    "origin_of",
    "remove_local",
    "split_model_id",
    "weight_count",
)
