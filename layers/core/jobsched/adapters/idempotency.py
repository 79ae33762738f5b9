"""Request idempotency for operator actions, through powertools' idempotency utility.

POST /api/jobs keeps its own idempotency record because it must be written in the same
transaction as the job (powertools writes its record before and after the function, which would
let a crash in between create a job twice). Actions whose effect is itself idempotent and only need
"the same key answers the same response" (replay) use powertools, stored in the jobs table under
their own partition-key prefix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

IDEMPOTENCY_TTL_SECONDS = 24 * 3600


def persistence(client: DynamoDBClient, table: str) -> DynamoDBPersistenceLayer:
    """Powertools' DynamoDB persistence in the jobs table (PK "idempotency#<fn>", SK the key hash)."""
    return DynamoDBPersistenceLayer(
        table_name=table,
        key_attr="PK",
        sort_key_attr="SK",
        expiry_attr="expires_at",
        status_attr="idempotency_status",
        boto3_client=client,
    )


# One config for the process: the API entry point registers each invocation's Lambda context on it
# (register_lambda_context), so a request cut off by the function's timeout leaves its key "in
# progress" only until that invocation's deadline, not for the record's 24 h. Powertools reads the
# context from the config when the wrapped function is not the Lambda handler itself.
CONFIG = IdempotencyConfig(
    event_key_jmespath="[tenant, key]",
    payload_validation_jmespath="subject",
    raise_on_no_idempotency_key=True,
    expires_after_seconds=IDEMPOTENCY_TTL_SECONDS,
)


def once_per_key(
    fn: Callable[[dict[str, Any]], dict[str, Any]],
    *,
    store: DynamoDBPersistenceLayer,
    name: str,
    config: IdempotencyConfig = CONFIG,
) -> Callable[..., dict[str, Any]]:
    """Wrap fn(request=...) so the same (tenant, key) answers the first response.

    The same key with another target (`subject`) is refused with IdempotencyValidationError.
    """
    wrapped: Callable[..., dict[str, Any]] = idempotent_function(
        data_keyword_argument="request", persistence_store=store, config=config, key_prefix=name
    )(fn)
    return wrapped
