"""The importer's entry point: bytes in, a ``/v1`` run document and its report out."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from inline_sdk import ComfyMapping

from ._convert import Converter, Imported, Table
from ._errors import MAX_NODES, Budget, TooManyNodes
from ._flatten import flatten
from ._oneclick import NotOneClick, one_click
from ._packs import build_table
from ._prompt import from_api
from ._read import NotAWorkflow, Workflow, read_workflow


def import_comfyui(
    data: bytes,
    *,
    where: str = "input",
    base_dir: Path | None = None,
    mappings: Iterable[ComfyMapping] = (),
    one_click_node: bool = False,
    budget: Budget | None = None,
) -> Imported:
    """Convert a ComfyUI workflow (UI save, API prompt, or a PNG carrying them).

    ``where`` names the input in errors; ``base_dir`` is where ``LoadImage`` files are looked
    for (the workflow's folder); ``mappings`` are packs'; ``one_click_node`` offers a
    Z-Image-shaped graph as one ``alibaba/z-image-turbo`` node; ``budget`` bounds the time
    (``TIME_LIMIT`` from now when not given) and stops it on request. Raises a
    ``ComfyImportError``: ``NotAWorkflow``, ``WorkflowTooLarge``, ``TooManyNodes`` or
    ``ImportStopped``.
    """
    budget = budget or Budget.start(where)
    budget.check()  # stopped while it waited its turn
    workflow = read_workflow(data, where)
    try:
        return _convert(workflow, build_table(mappings), base_dir, one_click_node, budget)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError) as exc:
        # a file shaped like a workflow whose insides are not (a hand edit gone wrong)
        raise NotAWorkflow(where, f"malformed ({type(exc).__name__}: {exc})") from None


def _convert(
    workflow: Workflow, table: Table, base_dir: Path | None, one_click_node: bool, budget: Budget
) -> Imported:
    if workflow.kind == "ui":
        prompt = flatten(workflow.data, table.widgets, budget)
    elif len(workflow.data) > MAX_NODES:
        raise TooManyNodes(budget.where, "nodes", len(workflow.data), MAX_NODES)
    else:
        prompt = from_api(workflow.data)
    cv = Converter(prompt, table, base_dir, budget)
    imported = cv.run(workflow.origin, workflow.kind)
    if not one_click_node:
        return imported
    try:
        nodes, target = one_click(cv.nodes, cv.target, cv.names, cv.warn)
    except NotOneClick as exc:
        cv.warn(f"one-click: not a Z-Image-shaped graph ({exc}); the primitive graph is kept")
        return imported
    report = imported.report
    report.one_click = True
    # the one node stands for the whole chain: it takes the chain's file name
    prefix = next(iter(imported.output_names.values()), None)
    names = {target: prefix} if target and prefix else {}
    return Imported({"schemaVersion": 1, "nodes": nodes}, target, report, names)
