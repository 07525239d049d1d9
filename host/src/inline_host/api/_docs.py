"""The API docs at ``/schema``, served offline: ReDoc and Swagger UI from a package's files.

Litestar's render plugins load ReDoc and Swagger UI from CDNs by default, so the docs page is
blank on a machine without internet. The assets come instead from ``drf-spectacular-sidecar``,
a package that ships each release of Swagger UI's and ReDoc's distribution builds as static
files (its Django app is never imported). They are served under ``/schema-assets/``; ReDoc's
Google Fonts are switched off. ``/schema`` is ReDoc, ``/schema/swagger`` Swagger UI,
``/schema/openapi.json`` the document.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import RedocRenderPlugin, SwaggerRenderPlugin
from litestar.static_files import create_static_files_router

from ..runs import events_vocabulary

__all__ = ("ASSETS_PATH", "docs_assets_router", "openapi_config")

ASSETS_PATH: Final = "/schema-assets"


def assets_dir() -> Path:
    """The folder holding ``swagger-ui-dist/`` and ``redoc/`` (from the sidecar package)."""
    import drf_spectacular_sidecar

    return Path(drf_spectacular_sidecar.__file__).parent / "static" / "drf_spectacular_sidecar"


def openapi_config() -> OpenAPIConfig:
    """ReDoc at ``/schema``, Swagger UI at ``/schema/swagger``; every asset served locally."""
    swagger = f"{ASSETS_PATH}/swagger-ui-dist"
    return OpenAPIConfig(
        title="Inline",
        version="1",
        description="Inline serves typed node graphs: `POST /v1/runs` submits one, "
        "`GET /v1/runs/{runId}` reads its state and its takes, and a websocket streams its "
        "events.\n\n## Run events\n\n" + events_vocabulary(),
        path="/schema",
        render_plugins=[
            RedocRenderPlugin(
                js_url=f"{ASSETS_PATH}/redoc/bundles/redoc.standalone.js",
                google_fonts=False,
                path=["/", "/redoc"],
                favicon=f'<link rel="icon" href="{swagger}/favicon-32x32.png">',
            ),
            SwaggerRenderPlugin(
                js_url=f"{swagger}/swagger-ui-bundle.js",
                css_url=f"{swagger}/swagger-ui.css",
                standalone_preset_js_url=f"{swagger}/swagger-ui-standalone-preset.js",
                path="/swagger",
                favicon=f'<link rel="icon" href="{swagger}/favicon-32x32.png">',
            ),
        ],
    )


def docs_assets_router() -> Any:
    """The static files router of the docs' assets (not in the schema itself)."""
    return create_static_files_router(
        path=ASSETS_PATH, directories=[assets_dir()], include_in_schema=False
    )
