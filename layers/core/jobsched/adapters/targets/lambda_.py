"""The lambda target: Invoke the tenant's function with the envelope, as the tenant's role.

    sync:  Invoke RequestResponse ──> 200, no X-Amz-Function-Error ──> its JSON answer is the result
                                  └─> X-Amz-Function-Error ──> TargetFailed(error type = the answer's
                                      errorType, message = its errorMessage): non_retryable_errors apply
    async: Invoke Event ──> 202 accepted: success (Lambda retries and dead-letters on its own side)

The client makes exactly one try (LAMBDA_CONFIG): botocore's own retry of a timed-out
RequestResponse would run the function a second time inside one attempt, unseen by the run's
history. The read timeout outlasts the longest function (900 s); the job's timeout_seconds bounds
the attempt.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from botocore.config import Config

from jobsched.adapters.targets._aws import message_of, target_call
from jobsched.adapters.targets.credentials import AssumedRoles
from jobsched.domain.targets import LambdaTarget, TargetFailed
from jobsched.handlers import RunContext

LAMBDA_CONFIG = Config(connect_timeout=10, read_timeout=910, retries={"total_max_attempts": 1})
_ERROR_TYPE = re.compile(r"^[\w.$-]{1,128}$")


class LambdaInvoker:
    """jobsched.ports.Target for a lambda target spec."""

    def __init__(self, spec: LambdaTarget, *, roles: AssumedRoles) -> None:
        self.spec = spec
        self._roles = roles

    def invoke(self, envelope: Mapping[str, Any], ctx: RunContext) -> object:
        """Invoke the function once (see the module doc for the outcomes)."""
        spec = self.spec
        client = self._roles.client("lambda", spec.role_arn, str(envelope["tenant"]))
        sync = spec.invocation == "sync"
        with target_call(f"Lambda {spec.function_arn}"):
            answer = client.invoke(
                FunctionName=spec.function_arn,
                InvocationType="RequestResponse" if sync else "Event",
                Payload=message_of(envelope).encode(),
            )
        if not sync:
            return {"accepted": True, "status_code": answer["StatusCode"]}
        raw = answer["Payload"].read() if "Payload" in answer else b""
        body = _decoded(raw)
        function_error = answer.get("FunctionError")
        if function_error:
            error_type, message = str(function_error), raw.decode("utf-8", errors="replace")[:2000]
            if isinstance(body, dict):
                given = str(body.get("errorType") or "")
                error_type = given if _ERROR_TYPE.match(given) else error_type
                message = str(body.get("errorMessage") or message)
            raise TargetFailed(f"{spec.function_arn}: {message}", error_type=error_type)
        return body


def _decoded(raw: bytes) -> object:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", errors="replace")
