"""The Inline kernel: graph document, validation, planning, cache keys and scheduling.

Pure Python on top of ``inline_sdk``; never imports torch. Exceptions::

    InlineCoreError            root of everything this package raises
    ├── DocumentInvalid        a document was refused; ``issues`` lists every problem found
    │   ├── RequestInvalid     the run request itself is malformed (code ``invalid_request``)
    │   └── GraphInvalid       the graph fails shape or semantic checks (code ``invalid_graph``)
    ├── NodeFailed             a node raised during a run (``node_id``, ``node_type``, ``cause``)
    └── StaleInput             some of an executor's ``inputs`` are gone: producers run again
"""

from ._cache import OutputCache
from ._catalog import DictCatalog, ListingCatalog, NodeCatalog, NodeEntry
from ._errors import (
    DocumentInvalid,
    GraphInvalid,
    InlineCoreError,
    Issue,
    NodeFailed,
    RequestInvalid,
    StaleInput,
)
from ._estimate import HeaderError, count, estimate_paths, guess_role, read_header
from ._graph import Edge, Graph, GraphNode, parse_graph, parse_request
from ._plan import Plan, PlannedNode, compute_key, plan, resolve_params
from ._policy import (
    GIB,
    Budget,
    Component,
    ComponentPlan,
    Estimate,
    Gpu,
    Inventory,
    Placement,
    activation_bytes,
    place,
)
from ._schedule import Executor, NullListener, ProgressSink, RunListener, execute_plan
from ._schema import check_params
from ._suggest import did_you_mean
from ._validate import find_cycle, validate

__all__ = (
    "GIB",
    "Budget",
    "Component",
    "ComponentPlan",
    "Estimate",
    "Gpu",
    "HeaderError",
    "Inventory",
    "Placement",
    "activation_bytes",
    "count",
    "estimate_paths",
    "guess_role",
    "place",
    "read_header",
    "DictCatalog",
    "DocumentInvalid",
    "Edge",
    "Executor",
    "Graph",
    "GraphInvalid",
    "GraphNode",
    "InlineCoreError",
    "Issue",
    "ListingCatalog",
    "NodeCatalog",
    "NodeEntry",
    "NodeFailed",
    "NullListener",
    "OutputCache",
    "Plan",
    "PlannedNode",
    "ProgressSink",
    "RequestInvalid",
    "RunListener",
    "StaleInput",
    "check_params",
    "compute_key",
    "did_you_mean",
    "execute_plan",
    "find_cycle",
    "parse_graph",
    "parse_request",
    "plan",
    "resolve_params",
    "validate",
)
