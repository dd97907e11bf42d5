"""The web chat page: ``GET /`` and its assets under ``/static/``, all shipped inside the package (docs/web.md).

The page is a client of the public API like any other (it reads and writes conversations with the caller's key);
nothing here knows a session. Its files are read once, when the app is made, from ``lmchat/serve/static``: a
request can only name one of them, never a path. Every answer carries a Content-Security-Policy that lets the
page run its own scripts only (no inline script, no ``eval``, no other origin), and ``nosniff``, so text that
reached the page from a model or a user can never be run as script.
"""
from __future__ import annotations

from pathlib import Path

import attrs
from fastapi import APIRouter
from fastapi.responses import Response

from .errors import ApiError

#: what the page may load and run: its own files only; images from its own origin or data: URLs (the icon)
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "X-Frame-Options": "DENY", "Cache-Control": "no-cache"}
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".mjs": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
         ".svg": "image/svg+xml", ".png": "image/png"}


@attrs.frozen
class Asset:
    body: bytes
    media_type: str


def load_assets() -> dict[str, Asset]:
    """The page's files by their path under ``static/`` (``vendor/marked.esm.js``); the package data setup.cfg
    ships. A file of another kind is left out."""
    folder = Path(__file__).with_name("static")
    return {path.relative_to(folder).as_posix(): Asset(path.read_bytes(), TYPES[path.suffix])
            for path in sorted(folder.rglob("*")) if path.is_file() and path.suffix in TYPES}


def router() -> APIRouter:
    """The page's routes over the assets as they are now (read once: an app serves the files it started with)."""
    assets = load_assets()
    routes = APIRouter()

    def answer(asset: Asset) -> Response:
        return Response(asset.body, media_type=asset.media_type, headers=HEADERS)

    @routes.get("/", include_in_schema=False)
    async def index() -> Response:
        return answer(assets["index.html"])

    @routes.get("/static/{name:path}", include_in_schema=False)
    async def static(name: str) -> Response:
        asset = assets.get(name)
        if asset is None:
            raise ApiError(404, f"no page asset {name[:100]!r}", type="invalid_request_error", code="not_found")
        return answer(asset)

    return routes
