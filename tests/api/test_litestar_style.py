"""The app declares its routes in Litestar's current style: building it (and its OpenAPI
document) warns of nothing that Litestar 3 would drop."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from inline_host.api import create_app


def test_the_app_uses_no_deprecated_litestar_style(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("INLINE_DATA_DIR", str(tmp_path))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        app = create_app()
        assert app.openapi_schema.paths  # the document is built from every handler's signature
    deprecated = [
        f"{w.filename}:{w.lineno}: {w.message}"
        for w in caught
        if issubclass(w.category, DeprecationWarning)
    ]
    assert deprecated == []
