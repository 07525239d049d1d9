"""The importer's entry point: bytes in, a ``/v1`` run document and its report out."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Final

from inline_sdk import ComfyMapping

from ._checkpoint import CHECKPOINT, DIFFUSERS, NotDiffusers, to_diffusers
from ._convert import Converter, Imported, Table
from ._errors import MAX_NODES, Budget, TooManyNodes
from ._flatten import flatten
from ._oneclick import NotOneClick, one_click
from ._packs import build_table
from ._prompt import from_api
from ._read import NotAWorkflow, Workflow, read_workflow
from ._report import NodeReport

#: What the report's rows say the primitives of a chain folded into one node became.
FOLDED: Final = ("sample ", "encode/text ", "input/text ", "latent/empty ", "vae/decode ",
                 "vae/encode ")  # fmt: skip


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
    if any(n["type"] == CHECKPOINT for n in cv.nodes):
        return _checkpoints(cv, imported, workflow, one_click_node)
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


def _checkpoints(
    cv: Converter, imported: Imported, workflow: Workflow, one_click_node: bool
) -> Imported:
    """A checkpoint's chain as one ``diffusers/generate`` node; else the checkpoint loaders
    are reported unmapped, with what stopped it (the graph is then incomplete). Such a graph
    is never Z-Image's one-click node: its model is a checkpoint."""
    if one_click_node:
        cv.warn(
            "one-click: not a Z-Image-shaped graph (a CheckpointLoaderSimple loads its model); "
            "the primitive graph is kept"
        )
    try:
        nodes, target = to_diffusers(cv.nodes, cv.target, cv.names, cv.warn)
    except NotDiffusers as exc:
        for node in cv.nodes:
            if node["type"] == CHECKPOINT:
                row = cv.reports[node["id"]]
                cv.reports[node["id"]] = NodeReport(
                    id=row.id, class_type=row.class_type, status="unmapped", title=row.title,
                    reason=f"its chain is not one {DIFFUSERS} node: {exc}",
                )  # fmt: skip
        return Imported(
            imported.graph, imported.target, cv.report(workflow.origin, workflow.kind),
            dict(imported.output_names),
        )  # fmt: skip
    # the sampler's own names are not applied: its "nearest equivalent" notes would mislead
    cv.warnings[:] = [
        w
        for w in cv.warnings
        if not (w.startswith(f"node {target} (") and "nearest equivalent" in w)
    ]
    report = cv.report(workflow.origin, workflow.kind)
    for row in report.nodes:
        if row.status != "mapped":
            continue
        if row.became.startswith(FOLDED):
            row.became = f"{DIFFUSERS} {target} ({row.became})"
        elif row.became.startswith(f"{DIFFUSERS} ("):  # the checkpoint loader's
            row.became = f"{DIFFUSERS} {target}{row.became.removeprefix(DIFFUSERS)}"
        elif row.became.startswith("the run's target ("):
            row.became = f"the run's target ({target})"
    prefix = next(iter(imported.output_names.values()), None)
    names = {target: prefix} if prefix else {}
    return Imported({"schemaVersion": 1, "nodes": nodes}, target, report, names)
