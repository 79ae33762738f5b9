"""Operations (jobs table): long API work and its progress, one item each.

Key ("OP#<operation_id>", "OP"): an operation is read by its id only (GET /api/operations/{id},
a worker's chunk), so it needs no index, and its item carries neither `due_key` nor the listing
attributes, so the due index and the tenant listing never see it. The item holds the operation
as JSON (`body`, at most a few KB: 100 job ids and their results) beside `chunk`, the number the
compare-and-set of each chunk's progress conditions on, and `tenant`, for whoever reads the table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobsched.adapters.aws import aws_call
from jobsched.adapters.dynamodb.codec import dec, enc
from jobsched.adapters.dynamodb.conditions import DYNAMODB, conditional
from jobsched.domain.operations import Operation

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


def _key(operation_id: str) -> dict[str, dict[str, str]]:
    return {"PK": enc(f"OP#{operation_id}"), "SK": enc("OP")}


def _item(operation: Operation) -> dict[str, dict[str, str]]:
    return {
        **_key(operation.operation_id),
        "tenant": enc(operation.tenant),
        "chunk": enc(operation.chunk),
        "body": enc(operation.model_dump_json()),
    }


class Operations:
    """The operation items of the jobs table (a base of JobStore: the same table and client)."""

    client: DynamoDBClient
    table: str

    def put_operation(self, operation: Operation) -> bool:
        """Store a new operation; False if its id is taken."""
        return conditional(
            self.client.put_item,
            TableName=self.table,
            Item=_item(operation),
            ConditionExpression="attribute_not_exists(PK)",
        )[0]

    def get_operation(self, operation_id: str) -> Operation | None:
        """The operation (a consistent read), or None."""
        with aws_call(DYNAMODB):
            out = self.client.get_item(TableName=self.table, Key=_key(operation_id), ConsistentRead=True)
        item = out.get("Item")
        return Operation.model_validate_json(dec(item)["body"]) if item else None

    def advance_operation(self, operation: Operation, *, expected_chunk: int) -> bool:
        """Replace the operation if its stored chunk is still `expected_chunk`."""
        return conditional(
            self.client.put_item,
            TableName=self.table,
            Item=_item(operation),
            ConditionExpression="chunk = :expected",
            ExpressionAttributeValues={":expected": enc(expected_chunk)},
        )[0]
