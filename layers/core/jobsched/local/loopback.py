"""An HTTP server served on a daemon thread: the local stack's API, and the peers tests and benches start.

`serve(Handler)` binds 127.0.0.1 on a free port (port 0) unless told otherwise, serves until `stop()`
(or the end of a `with` block), and then closes its socket and joins its thread. `answer` writes one
JSON (or empty) response. The standard library's ThreadingHTTPServer does the serving; this only holds
the start/stop lifecycle that every loopback peer repeated.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

JOIN_SECONDS = 5.0


class Server:
    """One ThreadingHTTPServer and the daemon thread serving it."""

    def __init__(
        self, handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1", port: int = 0, name: str = ""
    ) -> None:
        self.host = host
        self.http = ThreadingHTTPServer((host, port), handler)
        self.http.daemon_threads = True
        self.thread = threading.Thread(
            target=self.http.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=name or handler.__name__,
            daemon=True,
        )
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.http.server_address[1])

    @property
    def url(self) -> str:
        """http://<host>:<port>, the port the server bound."""
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        """Stop serving, close the socket, and join the serving thread."""
        self.http.shutdown()
        self.http.server_close()
        self.thread.join(timeout=JOIN_SECONDS)

    def __enter__(self) -> Server:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()


def serve(
    handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1", port: int = 0, name: str = ""
) -> Server:
    """Start serving `handler` on host:port (a free port by default); the caller stops it."""
    return Server(handler, host, port, name)


def answer(
    request: BaseHTTPRequestHandler, status: int, body: Any = None, headers: dict[str, str] | None = None
) -> None:
    """Write one response: `body` as JSON (None: no body), with `headers` and its Content-Length."""
    data = b"" if body is None else json.dumps(body).encode()
    request.send_response(status)
    if body is not None:
        request.send_header("Content-Type", "application/json")
    for key, value in (headers or {}).items():
        request.send_header(key, value)
    request.send_header("Content-Length", str(len(data)))
    request.end_headers()
    request.wfile.write(data)


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that does not print each request to stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        pass
