"""Models: the models dir's catalogs (pickers, the ``llm`` catalog by architecture, the encoder
folders of ``embeddings``) and the fit answer for this machine."""

from ._catalogs import (
    CATEGORIES,
    CATEGORY,
    ENCODER,
    ENCODERS,
    ModelCatalogs,
    UnsafeName,
    check_name,
    encoder_entries,
    llm_entries,
    narrow,
    serve_descriptor,
)
from ._fit import PROFILES, budget_of, fit, fit_answer, inventory_for

__all__ = (
    "CATEGORIES",
    "CATEGORY",
    "ENCODER",
    "ENCODERS",
    "PROFILES",
    "ModelCatalogs",
    "UnsafeName",
    "budget_of",
    "check_name",
    "encoder_entries",
    "fit",
    "fit_answer",
    "inventory_for",
    "llm_entries",
    "narrow",
    "serve_descriptor",
)
