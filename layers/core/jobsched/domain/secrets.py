"""Signing secrets: what a tenant's HTTP receivers verify X-Jobsched-Signature with (pure)."""

from __future__ import annotations

import secrets as _random
from dataclasses import dataclass, field
from datetime import datetime

SECRET_BYTES = 32
"""Random bytes in a secret: HMAC-SHA256's block-sized key strength (256 bits)."""


@dataclass(frozen=True, slots=True)
class SecretRecord:
    """A tenant's signing secret and when it was made; its repr never shows the secret."""

    secret: str = field(repr=False)
    created_at: datetime
    version: int = 1
    """1 for the first secret of a tenant, + 1 per rotation (the compare-and-set's version)."""


def new_secret() -> str:
    """A fresh secret: SECRET_BYTES from the OS's CSPRNG, as lowercase hex (the HMAC key is its UTF-8)."""
    return _random.token_hex(SECRET_BYTES)
