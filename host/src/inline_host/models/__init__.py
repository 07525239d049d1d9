"""Models: the models dir's catalogs (pickers, the ``llm`` catalog by architecture) and the fit
answer for this machine."""

from ._catalogs import (
    CATEGORIES,
    CATEGORY,
    NODE_ARCH,
    Arch,
    ModelCatalogs,
    UnsafeName,
    architecture,
    check_name,
    llm_entries,
    narrow,
    serve_descriptor,
)
from ._fit import PROFILES, budget_of, fit, fit_answer, inventory_for

__all__ = (
    "CATEGORIES",
    "CATEGORY",
    "NODE_ARCH",
    "PROFILES",
    "Arch",
    "ModelCatalogs",
    "UnsafeName",
    "architecture",
    "budget_of",
    "check_name",
    "fit",
    "fit_answer",
    "inventory_for",
    "llm_entries",
    "narrow",
    "serve_descriptor",
)
