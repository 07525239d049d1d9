"""Models: the models dir's catalogs (pickers, the ``llm`` catalog by architecture) and the fit
answer for this machine."""

from ._catalogs import (
    CATEGORIES,
    CATEGORY,
    ModelCatalogs,
    UnsafeName,
    check_name,
    llm_entries,
    narrow,
    serve_descriptor,
)
from ._fit import PROFILES, budget_of, fit, fit_answer, inventory_for

__all__ = (
    "CATEGORIES",
    "CATEGORY",
    "PROFILES",
    "ModelCatalogs",
    "UnsafeName",
    "budget_of",
    "check_name",
    "fit",
    "fit_answer",
    "inventory_for",
    "llm_entries",
    "narrow",
    "serve_descriptor",
)
