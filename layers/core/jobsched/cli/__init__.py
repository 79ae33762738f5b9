"""The `jobsched` command line: the local stack, the API client, and cron previews.

app.py     the parser, the job commands (submit, get, edit, ...) and main()
http.py    one API request, SigV4-signed for API Gateway in the API's own region
ops.py     the operator's commands: list, stats, logs, runs --watch, actions, backfill progress
render.py  rich tables and progress (the `cli` extra), or JSON
"""

from __future__ import annotations

from jobsched.cli.app import UsageError, call, edit_body, main, parser, submit_body
from jobsched.cli.http import region_of, signed_headers

_signed_headers = signed_headers  # the name the first tests knew it by

__all__ = ["UsageError", "call", "edit_body", "main", "parser", "region_of", "signed_headers", "submit_body"]
