"""The embedded AWS: moto's server on loopback, one request at a time.

moto's backends are not thread-safe: two TransactWriteItems at once fail inside moto with
"dictionary changed size during iteration" (seen under a burst of concurrent creates). Real AWS has
no such limit, so the embedded server serializes requests itself instead of the scheduler bending to
it: a WSGI wrapper holds one lock around each request. Nothing may therefore hold a request open
(no SQS long polling against it: the local pollers short-poll).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

from werkzeug.serving import BaseWSGIServer, make_server


class _OneAtATime:
    """WSGI middleware: run the wrapped app under one lock, the response body included."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self._app = app
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        with self._lock:
            return list(self._app(environ, start_response))


class EmbeddedAws:
    """moto's server on host:port in a daemon thread, with Step Functions executing for real."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint_url(self) -> str:
        """The endpoint boto3 clients use."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> EmbeddedAws:
        """Serve, then switch on state machine execution."""
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's per-request access log
        # moto's state machine executor calls DynamoDB/SQS/SNS over HTTP at localhost:$MOTO_PORT.
        os.environ["MOTO_PORT"] = str(self.port)
        app = _OneAtATime(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(
            self.host, self.port, app, threaded=True, request_handler=MotoRequestHandler
        )
        self._thread = threading.Thread(target=self._server.serve_forever, name="jobsched-moto", daemon=True)
        self._thread.start()
        request = urllib.request.Request(
            f"{self.endpoint_url}/moto-api/config",
            data=json.dumps({"stepfunctions": {"execute_state_machine": True}}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        urllib.request.urlopen(request, timeout=10).close()
        return self

    def stop(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
