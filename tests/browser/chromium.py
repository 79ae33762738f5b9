"""Where the browser tests find Debian's chromium, and what they do without it."""

from __future__ import annotations

import os
import shutil

import pytest


def chromium_path() -> str:
    """Debian's chromium, or a skip (a failure when CI is set) saying how to install it."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    message = "Debian's chromium is missing: apt-get update && apt-get install -y chromium"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)
