"""The bad path: the failure workflow (Step Functions, ASL from jobsched.workflows) and its alert topic."""

from __future__ import annotations

import json
from typing import cast

from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from jobsched import resources
from jobsched.workflows import failure_definition
from jobsched_infra.nag import acknowledge

# SNS's AWS-managed key: its key policy already lets any principal of the account use it through
# SNS, so publishers (the workflow's role) need no kms:* grant of their own.
SNS_MANAGED_KEY_ALIAS = "alias/aws/sns"


class Workflows(Construct):
    """The alert topic and the Standard failure-workflow state machine; the stack grants their roles.

    The definition is `failure_definition()` verbatim, the one the local stack runs. It reads the
    table, queue and topic from each execution's input, so CDK cannot derive the workflow's grants
    from it: the stack grants the role exactly what the ASL's tasks call, on the concrete resources.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        topic_spec: resources.TopicSpec = resources.ALERT_TOPIC,
        workflow_spec: resources.StateMachineSpec = resources.FAILURE_WORKFLOW,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
    ) -> None:
        super().__init__(scope, construct_id)
        self.topic = sns.Topic(
            self,
            topic_spec.logical_id,
            display_name="jobsched alerts",
            master_key=kms.Alias.from_alias_name(self, "SnsManagedKey", SNS_MANAGED_KEY_ALIAS),
            enforce_ssl=True,
        )
        # As for tables and queues: the spec's logical id is the CloudFormation logical id.
        cast(sns.CfnTopic, self.topic.node.default_child).override_logical_id(topic_spec.logical_id)

        self.log_group = logs.LogGroup(self, "Logs", retention=log_retention)
        self.state_machine = sfn.StateMachine(
            self,
            workflow_spec.logical_id,
            definition_body=sfn.DefinitionBody.from_string(json.dumps(failure_definition())),
            state_machine_type=sfn.StateMachineType.STANDARD,
            tracing_enabled=True,
            # Every state transition: it runs on the bad path only, so the volume is the failure
            # rate, and an operator chasing a dead letter wants each step. The input (error
            # messages from job handlers) stays in the execution history, out of the logs.
            logs=sfn.LogOptions(
                destination=self.log_group, level=sfn.LogLevel.ALL, include_execution_data=False
            ),
        )
        cast(sfn.CfnStateMachine, self.state_machine.node.default_child).override_logical_id(
            workflow_spec.logical_id
        )

        acknowledge(
            self.state_machine.role,
            "IAM5",
            "Step Functions' log delivery (logs:CreateLogDelivery, PutResourcePolicy, ...) and X-Ray "
            "tracing take no resource-level permissions.",
            finding="Resource::*",
        )
