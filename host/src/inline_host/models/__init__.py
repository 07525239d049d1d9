"""Models: the models dir's catalogs (pickers) and the fit answer for this machine."""

from ._catalogs import CATEGORIES, ModelCatalogs, serve_descriptor

__all__ = ("CATEGORIES", "ModelCatalogs", "serve_descriptor")
