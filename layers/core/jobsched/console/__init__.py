"""The operator console: static assets (index.html, ES modules, one stylesheet) and how to serve them.

Why plain files and no framework or build step: the console is a few hundred lines of pages over
an API that already exists. Plain ES modules keep it a small codebase that still reads the same in
ten years, with zero supply chain (no npm tree, no bundler, no CDN at run time), and the files ship
as they are: as package data in the wheel and inside the Lambda layer (which copies the package
tree), so the local stack (`/console`) and `jobsched console --api URL` serve the same bytes.

`asset(path)` is the one place that maps a request path to a file, so both servers refuse directory
traversal the same way: only the names in this folder are served, never a path with a separator.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent
PREFIX = "/console"

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}


def is_console_path(path: str) -> bool:
    """True for `/console`, `/console/` and `/console/<anything>` (query string ignored)."""
    bare = path.split("?", 1)[0]
    return bare == PREFIX or bare.startswith(PREFIX + "/")


def asset(path: str) -> tuple[int, str, bytes]:
    """(status, content type, body) for a console request path: 200 with a file, 404 otherwise.

    `/console` and `/console/` answer index.html. Any other name must be one file directly in this
    folder with a known suffix: no `..`, no `/` or `\\`, no percent-encoded trick survives, because
    the name is compared against the folder's own listing, never joined onto a path.
    """
    bare = path.split("?", 1)[0].split("#", 1)[0]
    name = bare[len(PREFIX) :].lstrip("/") if is_console_path(bare) else ""
    if not is_console_path(bare):
        return _not_found()
    name = name or "index.html"
    served = {p.name: p for p in ROOT.iterdir() if p.is_file() and p.suffix in CONTENT_TYPES}
    file = served.get(name)
    if file is None:
        return _not_found()
    return 200, CONTENT_TYPES[file.suffix], file.read_bytes()


def page_weight() -> dict[str, int]:
    """Bytes of every served asset, by name (what a first visit downloads)."""
    return {p.name: p.stat().st_size for p in sorted(ROOT.iterdir()) if p.suffix in CONTENT_TYPES}


def _not_found() -> tuple[int, str, bytes]:
    body = b'{"error": {"code": "not_found", "message": "no such console asset"}}'
    return 404, "application/json", body
