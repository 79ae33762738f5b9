"""Opaque page cursors: a DynamoDB LastEvaluatedKey, encoded for a client and checked on the way back.

A cursor is only ever accepted with exactly the key attributes it was made from and with the values
the caller pins (the tenant's partition, the job's partition), so a forged or foreign cursor is a
400, never a read of someone else's data.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from jobsched.errors import ValidationFailed


def encode(key: Mapping[str, Any]) -> str:
    """The cursor for a LastEvaluatedKey of string attributes."""
    flat = {k: v["S"] for k, v in key.items()}
    return base64.urlsafe_b64encode(json.dumps(flat, separators=(",", ":")).encode()).decode().rstrip("=")


def decode(
    cursor: str, *, keys: set[str], pinned: Mapping[str, str], prefixes: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The ExclusiveStartKey of a cursor we issued; raises ValidationFailed (field "cursor") otherwise.

    `keys`: the exact attribute names; `pinned`: attributes that must have these values;
    `prefixes`: attributes whose values must start with these.
    """
    try:
        flat = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise ValidationFailed("cursor: not a cursor this API issued", field="cursor") from None
    valid = (
        isinstance(flat, dict)
        and set(flat) == keys
        and all(isinstance(v, str) for v in flat.values())
        and all(flat.get(k) == v for k, v in pinned.items())
        and all(str(flat.get(k, "")).startswith(p) for k, p in (prefixes or {}).items())
    )
    if not valid:
        raise ValidationFailed("cursor: not a cursor this API issued", field="cursor")
    return {k: {"S": v} for k, v in flat.items()}
