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


SNAPSHOT = Path(__file__).resolve().parents[1] / "data" / "openapi_v1.json"


def test_the_openapi_document_is_the_one_studio_and_scripts_were_built_against(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The /v1 OpenAPI document, byte for byte but for the examples Litestar draws at random
    for a few responses (refactors of the host must not change it). A deliberate change to the
    API rewrites tests/data/openapi_v1.json in the same commit."""
    import msgspec

    monkeypatch.setenv("INLINE_DATA_DIR", str(tmp_path))
    doc = create_app().openapi_schema.to_schema()

    def drawn(raw: bytes) -> bytes:
        return msgspec.json.encode(_without_examples(msgspec.json.decode(raw)))

    now = msgspec.json.encode(doc)
    assert drawn(now) == drawn(SNAPSHOT.read_bytes()), "the OpenAPI document changed: see above"


def _without_examples(value: object) -> object:
    if isinstance(value, dict):
        return {k: _without_examples(v) for k, v in value.items() if k != "examples"}
    if isinstance(value, list):
        return [_without_examples(v) for v in value]
    return value
