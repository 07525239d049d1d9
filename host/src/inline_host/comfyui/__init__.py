"""Importing ComfyUI workflows (UI saves, API prompts, PNGs carrying them) as ``/v1`` runs."""

from ._cli import add_import_parser, run_import
from ._convert import Imported, Table
from ._import import import_comfyui
from ._read import ComfyImportError, NotAWorkflow, Workflow, png_text_chunks, read_workflow
from ._report import NodeReport, Report, Unmapped, render_text

__all__ = (
    "ComfyImportError",
    "Imported",
    "NodeReport",
    "NotAWorkflow",
    "Report",
    "Table",
    "Unmapped",
    "Workflow",
    "add_import_parser",
    "import_comfyui",
    "png_text_chunks",
    "read_workflow",
    "render_text",
    "run_import",
)
