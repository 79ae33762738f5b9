"""DynamoDB tables, generated from `jobsched.resources` (TABLES, and the alerts table)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from constructs import Construct

from jobsched import resources
from jobsched_infra.nag import HIPAA, NIST, acknowledge_in


class Storage(Construct):
    """One on-demand table per TableSpec; `tables` maps each spec's logical_id to its table.

    Encrypted with `key` (the stack's customer-managed key), or with an AWS-owned key when None;
    deletion-protected and retained: a deleted table is every job lost.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        specs: Sequence[resources.TableSpec] = resources.TABLES,
        key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.key = key
        self.tables: dict[str, dynamodb.Table] = {spec.logical_id: self._table(spec) for spec in specs}

    def _table(self, spec: resources.TableSpec) -> dynamodb.Table:
        table = dynamodb.Table(
            self,
            spec.logical_id,
            partition_key=_string(spec.partition_key),
            sort_key=_string(spec.sort_key),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=(
                dynamodb.TableEncryption.CUSTOMER_MANAGED if self.key else dynamodb.TableEncryption.DEFAULT
            ),
            encryption_key=self.key,
            deletion_protection=True,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            time_to_live_attribute=spec.ttl_attribute,
            removal_policy=RemovalPolicy.RETAIN,
        )
        for index in spec.indexes:
            table.add_global_secondary_index(
                index_name=index.name,
                partition_key=_string(index.partition_key),
                sort_key=_string(index.sort_key),
                projection_type=dynamodb.ProjectionType.INCLUDE,
                non_key_attributes=list(index.non_key_attributes),
            )
        for local in spec.local_indexes:
            table.add_local_secondary_index(
                index_name=local.name,
                sort_key=_string(local.sort_key),
                projection_type=dynamodb.ProjectionType.ALL,
            )
        # The spec's logical id is the CloudFormation logical id: moving the table in the construct
        # tree can never replace it (a replaced table is an empty table), and the template can be
        # compared with the local stack's resources by name.
        cast(dynamodb.CfnTable, table.node.default_child).override_logical_id(spec.logical_id)
        acknowledge_in(
            table,
            "DynamoDBInBackupPlan",
            "Point-in-time recovery is on: any second of the last 35 days can be restored; an AWS Backup "
            "plan is an account-level choice (vault, retention, copies) left to the operator.",
            packs=(HIPAA, NIST),
        )
        return table


def _string(name: str) -> dynamodb.Attribute:
    return dynamodb.Attribute(name=name, type=dynamodb.AttributeType.STRING)
