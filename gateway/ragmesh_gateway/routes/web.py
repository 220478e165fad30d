"""The web page at `/`: static HTML, CSS and JavaScript from this package (no build step, no CDN). The page is
open like /health; the API calls it makes carry the key the user enters (`Authorization: Bearer`)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

WEB_DIR = Path(__file__).resolve().parent.parent / "web"
# Everything comes from the gateway itself; nothing may frame the page.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

router = APIRouter(tags=["web"])


@router.get("/", include_in_schema=False)
async def page() -> FileResponse:
    """The web page: ask or search a collection, streamed answers with their sources, uploads."""
    return FileResponse(WEB_DIR / "index.html", media_type="text/html", headers=SECURITY_HEADERS)


def mount(app: FastAPI) -> None:
    """Serve the page at / and its files under /web/."""
    app.include_router(router)
    app.mount("/web", StaticFiles(directory=WEB_DIR), name="web")
