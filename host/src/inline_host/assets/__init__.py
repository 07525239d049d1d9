"""Input assets: what an upload is, decided from its bytes."""

from ._sniff import EMPTY_HINT, RAW_HINT, AssetRefused, sniff_kind

__all__ = ("EMPTY_HINT", "RAW_HINT", "AssetRefused", "sniff_kind")
