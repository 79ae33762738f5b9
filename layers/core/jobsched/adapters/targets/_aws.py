"""What every AWS target shares: the envelope as the message, dedup ids, and how a call fails.

An AWS error reaches the run as a TargetFailed whose error type is AWS's own error code
(AccessDeniedException, ResourceNotFoundException, ThrottlingException...), so a job's
non_retryable_errors can name it; an unreachable endpoint is AWSUnreachable, a request botocore
will not send InvalidParameter. Codes are read from
the response, never from messages.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError

from jobsched.domain.targets import TargetFailed

# SQS and SNS deduplication ids: 1..128 of alphanumerics and punctuation.
_DEDUP_ID = re.compile(r"^[\x21-\x7e]{1,128}$")


def message_of(envelope: Mapping[str, Any]) -> str:
    """The envelope as compact JSON: every AWS target's message body (or event detail)."""
    return json.dumps(envelope, separators=(",", ":"), ensure_ascii=False)


def dedup_id(effect_key: str) -> str:
    """A deduplication id from the run's effect key: the key itself when it fits, else its SHA-256.

    The same for every attempt and delivery of one run, so SQS FIFO and SNS FIFO drop a second
    publish of one run within their 5-minute deduplication window.
    """
    if _DEDUP_ID.match(effect_key):
        return effect_key
    return hashlib.sha256(effect_key.encode()).hexdigest()


def aws_code(exc: ClientError) -> str:
    """AWS's error code of a refused call."""
    return str(exc.response.get("Error", {}).get("Code", "")) or "AWSError"


@contextmanager
def target_call(what: str) -> Iterator[None]:
    """Run one call to a tenant's AWS resource; its failure becomes a TargetFailed (see module doc)."""
    try:
        yield
    except ClientError as exc:
        code = aws_code(exc)
        detail = str(exc.response.get("Error", {}).get("Message", "")) or code
        raise TargetFailed(f"{what}: {code}: {detail}", error_type=code) from exc
    except ParamValidationError as exc:  # a request botocore refuses to send: not a network fault
        raise TargetFailed(f"{what}: {exc}", error_type="InvalidParameter") from exc
    except BotoCoreError as exc:
        raise TargetFailed(f"{what}: {exc}", error_type="AWSUnreachable") from exc
