"""/docs without a CDN: Swagger UI's files come from the installed fastapi-offline
package (FastAPI's own /docs loads them from jsDelivr, so it is blank offline).

fastapi-offline is a small, maintained package whose wheel carries the current
swagger-ui-dist bundle; we use its files with FastAPI's own page builder rather
than its ``FastAPIOffline`` constructor, so that create_app stays a plain FastAPI.
There is no /redoc: ReDoc's page loads its logo from redocly's CDN whatever it is
given, and /docs shows the same schema.
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

import fastapi_offline
from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = Path(fastapi_offline.__file__).parent / "static"
ASSETS_URL = "/docs-assets"
DOCS_URL = "/docs"

_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def _protected(page: HTMLResponse) -> HTMLResponse:
    """The page with a Content-Security-Policy: scripts from this server, and the
    page's own inline script by its hash (it carries the schema's URL); Swagger UI sets
    inline styles. Not framed anywhere (clickjacking a "Try it out" that holds a token)."""
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'"
        for s in _INLINE_SCRIPT.findall(bytes(page.body).decode())
    )
    page.headers["Content-Security-Policy"] = (
        f"default-src 'self'; script-src 'self' {hashes}; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; "
        "frame-ancestors 'none'"
    )
    page.headers["X-Frame-Options"] = "DENY"
    page.headers["X-Content-Type-Options"] = "nosniff"
    page.headers["Referrer-Policy"] = "same-origin"
    return page


def install_docs(app: FastAPI) -> None:
    """Serve Swagger UI at /docs with its script, style and icon from this process."""
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS), name="docs-assets")
    redirect_url = DOCS_URL + "/oauth2-redirect"

    @app.get(DOCS_URL, include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return _protected(
            get_swagger_ui_html(
                openapi_url=f"{root}{app.openapi_url}",
                title=f"{app.title} - API",
                oauth2_redirect_url=f"{root}{redirect_url}",
                swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
                swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
                swagger_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
            )
        )

    @app.get(redirect_url, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return _protected(get_swagger_ui_oauth2_redirect_html())
