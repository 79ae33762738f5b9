"""The tenants' HTTP signing secrets: their table and the customer-managed KMS key they are encrypted with.

Its own key, not the tables' (AWS-managed) one: its policy is the whole list of who may read a
secret. The stack grants through this construct only: the api manages secrets (GetItem, PutItem;
kms:Encrypt and kms:Decrypt), the worker signs with them (GetItem; kms:Decrypt only), so a worker,
which runs user code, can neither mint nor replace a tenant's secret. Every KMS grant requires the
encryption context jobsched.adapters.secrets sets ({"tenant": ...}).
"""

from __future__ import annotations

from typing import cast

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from jobsched import constants as c
from jobsched import resources
from jobsched_infra.nag import HIPAA, NIST, acknowledge_in

# Every KMS call the adapter makes names the tenant in its encryption context.
_WITH_TENANT_CONTEXT = {"Null": {"kms:EncryptionContext:tenant": "false"}}


class SigningSecrets(Construct):
    """resources.SIGNING_SECRETS_TABLE and resources.SIGNING_KEY (yearly key rotation, both retained)."""

    def __init__(self, scope: Construct, construct_id: str, *, table_key: kms.IKey | None = None) -> None:
        """`table_key`: the stack's key for the table at rest, as Storage's (None: AWS-owned); each
        secret in it is encrypted again with this construct's own key."""
        super().__init__(scope, construct_id)
        spec = resources.SIGNING_SECRETS_TABLE
        self.key = kms.Key(
            self,
            resources.SIGNING_KEY.logical_id,
            description="jobsched: tenants' HTTP signing secrets",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN,
        )
        cast(kms.CfnKey, self.key.node.default_child).override_logical_id(resources.SIGNING_KEY.logical_id)
        self.table = dynamodb.Table(
            self,
            spec.logical_id,
            partition_key=dynamodb.Attribute(name=spec.partition_key, type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name=spec.sort_key, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=(
                dynamodb.TableEncryption.CUSTOMER_MANAGED if table_key else dynamodb.TableEncryption.DEFAULT
            ),
            encryption_key=table_key,
            deletion_protection=True,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            removal_policy=RemovalPolicy.RETAIN,
        )
        cast(dynamodb.CfnTable, self.table.node.default_child).override_logical_id(spec.logical_id)
        acknowledge_in(
            self.table,
            "DynamoDBInBackupPlan",
            "Point-in-time recovery is on, as on the scheduler's other tables; an AWS Backup plan is an "
            "account-level choice left to the operator.",
            packs=(HIPAA, NIST),
        )

    def environment(self) -> dict[str, str]:
        """What a function that reads or writes secrets needs to find them."""
        return {
            c.SIGNING_SECRETS_TABLE_ENV: self.table.table_name,
            c.SIGNING_KEY_ARN_ENV: self.key.key_arn,
        }

    def grant_manage(self, fn: lambda_.Function) -> None:
        """The api: read, create and rotate secrets (encrypt and decrypt)."""
        self._grant(
            fn,
            table_actions=["dynamodb:GetItem", "dynamodb:PutItem"],
            kms_actions=["kms:Encrypt", "kms:Decrypt"],
        )

    def grant_sign(self, fn: lambda_.Function) -> None:
        """The worker: read secrets (decrypt only)."""
        self._grant(fn, table_actions=["dynamodb:GetItem"], kms_actions=["kms:Decrypt"])

    def _grant(self, fn: lambda_.Function, *, table_actions: list[str], kms_actions: list[str]) -> None:
        fn.add_to_role_policy(iam.PolicyStatement(actions=table_actions, resources=[self.table.table_arn]))
        fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=kms_actions, resources=[self.key.key_arn], conditions=_WITH_TENANT_CONTEXT
            )
        )
        for name, value in self.environment().items():
            fn.add_environment(name, value)
