"""A pack's ComfyUI mappings: how the host's importer turns a ComfyUI node into one of its nodes.

A pack returns these from ``inline_comfyui_mappings`` (see ``hookspecs``); they travel to the host
as data in the handshake, so the importer's vocabulary grows with the packs installed.
"""

from __future__ import annotations

from typing import Any

import msgspec


class ComfyMapping(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One ComfyUI ``class_type`` -> one Inline node ``node``.

    ``params``: ComfyUI input name -> Inline param (literal widget values); ``inputs``: ComfyUI
    input name -> Inline input port (linked values); ``outputs``: the Inline output port for each
    ComfyUI output slot, in order; ``widgets``: the ComfyUI widget names in ``widgets_values``
    order (for UI saves; ``control_after_generate`` where the frontend puts one); ``fixed``:
    params always set; ``output``: ComfyUI runs it as an output node (it becomes the target).
    """

    class_type: str
    node: str
    params: dict[str, str] = {}
    inputs: dict[str, str] = {}
    outputs: list[str] = []
    widgets: list[str] = []
    fixed: dict[str, Any] = {}
    output: bool = False
