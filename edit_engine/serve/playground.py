"""The web playground: ``GET /`` (the page) and ``GET /playground/{name}`` (its script, style sheet and icon).

The files live in ``static/`` next to this module and are served from a fixed allow-list, each with its content
type, an ``ETag`` (a request that sends it back gets 304), ``Cache-Control: no-cache`` (revalidate, so an upgraded
package is picked up at once) and a strict ``Content-Security-Policy``: the page runs only its own script and
style sheet and talks only to its own server. Everything here is public: the page holds no secret; the API key,
typed into the page, guards the websocket the page opens (``docs/playground.md``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import Response

PAGE = "index.html"
# Served under /playground/; nothing else is.
ASSETS: dict[str, str] = {
    "playground.js": "text/javascript; charset=utf-8",
    "playground.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self' ws: wss:; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'; require-trusted-types-for 'script'")
HEADERS = {
    "Content-Security-Policy": CSP,
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # a link to the page carries a document in its query
    "Cross-Origin-Opener-Policy": "same-origin",
}
# The paths to answer without the API key (the server's list of public paths takes them).
PUBLIC_PATHS = frozenset({"/", *(f"/playground/{name}" for name in ASSETS)})


@dataclass(frozen=True)
class StaticFile:
    body: bytes
    media_type: str
    etag: str


@cache
def static_file(name: str) -> StaticFile:
    """One file of ``static/`` (read once)."""
    media_type = "text/html; charset=utf-8" if name == PAGE else ASSETS[name]
    body = (resources.files("edit_engine.serve") / "static" / name).read_bytes()
    return StaticFile(body, media_type, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')


def file_response(request: Request, f: StaticFile) -> Response:
    headers = {**HEADERS, "ETag": f.etag}
    sent = request.headers.get("if-none-match", "")
    if f.etag in (tag.strip().removeprefix("W/") for tag in sent.split(",")) or sent.strip() == "*":
        return Response(status_code=304, headers=headers)
    return Response(f.body, media_type=f.media_type, headers=headers)


router = APIRouter()


@router.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
async def page(request: Request) -> Response:
    return file_response(request, static_file(PAGE))


@router.api_route("/playground/{name}", methods=["GET", "HEAD"], include_in_schema=False)
async def asset(name: str, request: Request) -> Response:
    if name not in ASSETS:
        raise HTTPException(status_code=404, detail="Not Found")
    return file_response(request, static_file(name))
