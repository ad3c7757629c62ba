"""The operator's dashboard, served by ``hipq serve`` itself at /dashboard.

Server-rendered pages (Jinja2) over the store's reads; every action a page offers
is a call of the public REST API from the browser. Every file it needs (templates,
htmx, its script and style, Swagger UI for /docs) ships inside the wheel: nothing
is loaded from a CDN.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from hipq.dashboard.access import PageCookie, session_router
from hipq.dashboard.docs import install_docs
from hipq.dashboard.pages import PREFIX, open_router, router
from hipq.dashboard.sessions import Sessions
from hipq.security.tokens import Tokens

STATIC = Path(__file__).parent / "static"

__all__ = ["install"]


def install(app: FastAPI, tokens: Tokens) -> None:
    """Add the dashboard's pages, its static files and the offline /docs to ``app``
    (created with ``docs_url=None``), after the API's ``Authentication`` middleware:
    the sign-in cookie must become a bearer header before that middleware looks."""
    app.mount(PREFIX + "/static", StaticFiles(directory=STATIC), name="dashboard-static")
    install_docs(app)
    app.include_router(router)
    app.include_router(open_router)
    sessions = Sessions()
    app.include_router(session_router(PREFIX, sessions))
    if tokens:
        app.add_middleware(PageCookie, tokens=tokens, prefix=PREFIX, sessions=sessions)
