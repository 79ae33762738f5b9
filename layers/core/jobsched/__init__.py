"""jobsched: a serverless distributed job scheduler for AWS (the core library and Lambda layer)."""

from __future__ import annotations

__version__ = "0.1.0"
