"""The memory console: ``GET /ui`` (a static bundle shipped in the package) and ``GET /``.

Invariants:
- The pages carry no data and no credential: they are static files. Every datum comes from
  the tenant-bound management API, called by the page with ``Authorization: Bearer`` (the
  credential lives in the tab's ``sessionStorage``; never a cookie, never a URL), so the
  console can show nothing the API would not show to the same credential.
- Every response here carries a strict Content-Security-Policy (scripts and styles only
  from this origin, no inline script, no framing, no outbound connections), plus
  ``X-Frame-Options: DENY``, ``nosniff`` and ``Referrer-Policy: no-referrer``. The page
  renders attacker-controlled text (memories come from users' chats) with ``textContent``
  only; the policy is the second line of defence.
- Files are read once when the app is built; only the bundle's own file names are served.
- ``/favicon.ico`` is a tiny inline SVG (browsers ask for it on every page; a 404 there is
  noise in every access log and devtools console).
- The one API route only the console reads, ``GET /v1/whoami`` (``api.whoami``), comes with
  this router, so the console is one ``include_router``.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from starlette.responses import Response

from memproxy.api import whoami
from memproxy.errors import not_found

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
    "form-action 'none'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    # The bundle is tiny; revalidating on every load keeps an upgraded server's page current.
    "Cache-Control": "no-cache",
}
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}
# The console's mark: a rounded square with an "m"; SVG, since every current browser takes it
# as an icon and it is a few hundred bytes of text instead of a binary file.
FAVICON = (
    b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">'
    b'<rect width="16" height="16" rx="3" fill="#1f4e79"/>'
    b'<path d="M3.5 12V5.5h1.6l.1.9c.5-.7 1.1-1 1.9-1 .8 0 1.4.4 1.7 1 .5-.7 1.2-1 2-1 1.4 0 2.2.9 2.2 2.5V12'
    b'h-1.7V8.2c0-.9-.3-1.3-1-1.3-.6 0-1.1.5-1.1 1.3V12H7.5V8.2c0-.9-.3-1.3-1-1.3-.6 0-1.1.5-1.1 1.3V12z"'
    b' fill="#fff"/></svg>'
)
FAVICON_TYPE = "image/svg+xml"
_LANDING = b"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>memproxy</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="/favicon.ico" type="image/svg+xml"></head>
<body><h1>memproxy</h1>
<p>An OpenAI-compatible proxy with long-term memory. The API is under <code>/v1</code>.</p>
<p><a href="/ui">Open the memory console</a></p></body></html>
"""


def load_bundle() -> dict[str, tuple[bytes, str]]:
    """The console's files by name (``index.html``, ``app.js``, ...) with their content type."""
    folder = resources.files("memproxy.api").joinpath("ui")
    bundle: dict[str, tuple[bytes, str]] = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        if entry.is_file() and suffix in _TYPES:
            bundle[entry.name] = (entry.read_bytes(), _TYPES[suffix])
    return bundle


def _page(body: bytes, media_type: str) -> Response:
    return Response(body, media_type=media_type, headers=SECURITY_HEADERS)


def build_router() -> APIRouter:
    """Routes serving the bundle; built in ``create_app`` (the files are read here, once)."""
    bundle = load_bundle()
    index = bundle["index.html"]
    router = APIRouter()
    router.include_router(whoami.router)

    @router.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> Response:
        return _page(FAVICON, FAVICON_TYPE)

    @router.get("/", include_in_schema=False)
    async def landing() -> Response:
        return _page(_LANDING, _TYPES[".html"])

    @router.get("/ui", include_in_schema=False)
    async def console() -> Response:
        return _page(*index)

    @router.get("/ui/{name}", include_in_schema=False)
    async def asset(name: str) -> Response:
        if name == "index.html" or name not in bundle:
            raise not_found("file")
        return _page(*bundle[name])

    return router
