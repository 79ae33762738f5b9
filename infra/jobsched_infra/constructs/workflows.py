"""The failure and DAG workflows (Step Functions, ASL from jobsched.asl) and the alert topic."""

from __future__ import annotations

import json
from typing import Any, cast

from aws_cdk import Aws, Stack
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from jobsched import resources
from jobsched.asl import PARTITION, dag_definition, failure_definition
from jobsched_infra.nag import HIPAA, NIST, acknowledge, acknowledge_in

# SNS's AWS-managed key: its key policy already lets any principal of the account use it through
# SNS, so publishers (the workflow's role) need no kms:* grant of their own.
SNS_MANAGED_KEY_ALIAS = "alias/aws/sns"


class Workflows(Construct):
    """The alert topic and the Standard failure and DAG workflows; the stack grants their roles.

    Each definition is its jobsched.asl function's ASL verbatim, the one the local stack runs, with
    its task ARNs in the stack's partition (CloudFormation substitutes it). Encrypted with `key` (the
    stack's customer-managed key: topic, executions, logs), or AWS-managed/owned keys when None.
    It reads the table, queue and topic from each execution's input, so CDK cannot derive the
    workflows' grants from it: the stack grants each role exactly what its ASL's tasks call, on the
    concrete resources.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        topic_spec: resources.TopicSpec = resources.ALERT_TOPIC,
        failure_spec: resources.StateMachineSpec = resources.FAILURE_WORKFLOW,
        dag_spec: resources.StateMachineSpec = resources.DAG_WORKFLOW,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
        key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.key = key
        self.topic = sns.Topic(
            self,
            topic_spec.logical_id,
            display_name="jobsched alerts",
            master_key=key or kms.Alias.from_alias_name(self, "SnsManagedKey", SNS_MANAGED_KEY_ALIAS),
            enforce_ssl=True,
        )
        # As for tables and queues: the spec's logical id is the CloudFormation logical id.
        cast(sns.CfnTopic, self.topic.node.default_child).override_logical_id(topic_spec.logical_id)

        # Every state transition of both, no execution data. The failure workflow runs on the bad
        # path only, so its volume is the failure rate, and an operator chasing a dead letter wants
        # each step; its input (error messages from job handlers) stays in the execution history.
        # The DAG workflow runs once per upstream success with dependants: a log event costs a small
        # fraction of the Standard state transition it records, and a dependant that never fired is
        # traced step by step (Count, Recheck, Release, Enqueue).
        # Their log groups are named under /aws/vendedlogs/: CloudWatch Logs' resource policy for
        # vended log delivery is sized for that prefix (a group elsewhere can exhaust the 5,120-char
        # policy as machines are added).
        stack_name = Stack.of(self).stack_name
        self.failure_workflow = self._state_machine(
            failure_spec,
            failure_definition(PARTITION),
            self._log_group(
                "Logs", f"/aws/vendedlogs/states/{stack_name}-{failure_spec.suffix}", log_retention
            ),
        )
        self.dag_workflow = self._state_machine(
            dag_spec,
            dag_definition(PARTITION),
            self._log_group(
                "DagLogs", f"/aws/vendedlogs/states/{stack_name}-{dag_spec.suffix}", log_retention
            ),
        )

    def _log_group(self, construct_id: str, name: str, retention: logs.RetentionDays) -> logs.LogGroup:
        return logs.LogGroup(
            self, construct_id, log_group_name=name, retention=retention, encryption_key=self.key
        )

    def _state_machine(
        self, spec: resources.StateMachineSpec, definition: dict[str, Any], log_group: logs.LogGroup
    ) -> sfn.StateMachine:
        state_machine = sfn.StateMachine(
            self,
            spec.logical_id,
            definition_body=sfn.DefinitionBody.from_string(json.dumps(definition)),
            definition_substitutions={PARTITION.strip("${}"): Aws.PARTITION},
            state_machine_type=sfn.StateMachineType.STANDARD,
            encryption_configuration=(
                sfn.CustomerManagedEncryptionConfiguration(self.key) if self.key else None
            ),
            tracing_enabled=True,
            logs=sfn.LogOptions(destination=log_group, level=sfn.LogLevel.ALL, include_execution_data=False),
        )
        cast(sfn.CfnStateMachine, state_machine.node.default_child).override_logical_id(spec.logical_id)
        acknowledge(
            state_machine.role,
            "IAM5",
            "Step Functions' log delivery (logs:CreateLogDelivery, PutResourcePolicy, ...) and X-Ray "
            "tracing take no resource-level permissions.",
            finding="Resource::*",
        )
        acknowledge_in(
            state_machine.role,
            "IAMNoInlinePolicy",
            "CDK's DefaultPolicy: exactly the workflow's task calls (the stack grants them), made and "
            "deleted with the role; nothing else shares them.",
            packs=(HIPAA, NIST),
        )
        return state_machine
