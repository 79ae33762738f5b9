"""The ECS Fargate worker: a cluster, a Fargate task definition built from the core package, a service
scaled on its queue's depth (to zero when idle), a least-privilege task role and a log group.

The container runs `python -m jobsched.ecsworker` (the same package the Lambda layer ships, copied into
the image with the user's handler modules), which long-polls resources.ECS_QUEUE. The image is a
DockerImageAsset: `cdk synth` only stages its directory (no Docker is needed, nor here available);
`cdk deploy` builds and pushes it.

Scaling counts the queue's visible and in-flight messages (ApproximateNumberOfMessagesVisible +
NotVisible), not the visible ones alone: a run in progress is in flight, and a service scaled on the
visible count would stop the task running it as soon as it had taken its message.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import jsii
from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as events_targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from jobsched import constants as c
from jobsched import resources
from jobsched.domain.ecs_tasks import stopped_pattern
from jobsched_infra.nag import HIPAA, NIST, SERVERLESS, acknowledge, acknowledge_in
from jobsched_infra.project import REPO_ROOT

# A stopped task's event is retried this long and this often (by EventBridge to reach the function,
# then by Lambda when the function fails) before it is parked in the events' dead-letter queue; the
# ECS worker's poll records the run meanwhile, so a parked event costs latency, never the run.
EVENT_RETRIES = 8
EVENT_MAX_AGE = Duration.hours(6)
FUNCTION_RETRIES = 2
# The worker's container definition: its Dockerfile beside the other entry points.
DOCKERFILE = REPO_ROOT / "functions" / "ecs_worker" / "Dockerfile"
CONTAINER_NAME = "worker"


@jsii.implements(lambda_.IDestination)
class SendOnly:
    """A Lambda destination on an SQS queue granting sqs:SendMessage only (CDK's SqsDestination grants
    grant_send_messages, which adds wildcard key actions; the stack grants the key's calls itself)."""

    def __init__(self, queue: sqs.IQueue) -> None:
        self.queue = queue

    def bind(self, scope: Construct, fn: lambda_.IFunction, *, type: Any = None) -> lambda_.DestinationConfig:
        """Grant the function SendMessage on the queue; the queue is the destination."""
        self.queue.grant(fn, "sqs:SendMessage")
        return lambda_.DestinationConfig(destination=self.queue.queue_arn)


def stage_image(layer_dir: Path, handler_dir: Path | None) -> Path:
    """The image's build context: the Dockerfile, the layer's python/ tree, the user's handler modules."""
    stage = Path(tempfile.mkdtemp(prefix="jobsched-ecs-image-"))
    shutil.copy(DOCKERFILE, stage / "Dockerfile")
    shutil.copytree(layer_dir / "python", stage / "python")
    handlers = stage / "handlers"
    if handler_dir is not None:
        shutil.copytree(handler_dir, handlers, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    else:
        handlers.mkdir()
    return stage


class EcsWorkers(Construct):
    """The ECS worker service on resources.ECS_QUEUE (props keyword-only; the stack wires its grants).

    `task_role` is what the stack grants the worker's calls to, as it does the worker function's role.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        queue: sqs.IQueue,
        layer_dir: Path,
        environment: Mapping[str, str],
        handler_dir: Path | None = None,
        max_tasks: int = 10,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
        container_task_roles: Sequence[str] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        self.container_task_roles = tuple(container_task_roles)
        # Public subnets only, no NAT gateway (its hourly price would dwarf an idle service's zero):
        # the tasks reach SQS, DynamoDB and Step Functions over the internet gateway, TLS only, and
        # take no inbound traffic (their security group allows none).
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            max_azs=2,
            nat_gateways=0,
            subnet_configuration=[ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC)],
        )
        self.vpc.add_flow_log("FlowLog")
        insights = ecs.ContainerInsights.ENABLED
        self.cluster = ecs.Cluster(self, "Cluster", vpc=self.vpc, container_insights_v2=insights)
        self.log_group = logs.LogGroup(
            self, "Logs", retention=log_retention, removal_policy=RemovalPolicy.DESTROY
        )
        self.task_role = iam.Role(
            self,
            "TaskRole",
            assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
            description="jobsched ECS worker: the worker's own calls, granted by the stack",
        )
        # A family of its own name: the worker runs a Python run bigger than its task in a task of
        # this family's latest revision (the worker cannot be told its own ARN: a circular reference).
        self.family = f"{Stack.of(self).stack_name}-EcsWorker"
        self.task_definition = ecs.FargateTaskDefinition(
            self,
            "TaskDefinition",
            family=self.family,
            cpu=resources.ECS_WORKER_CPU,
            memory_limit_mib=resources.ECS_WORKER_MEMORY_MIB,
            task_role=self.task_role,
            runtime_platform=ecs.RuntimePlatform(
                cpu_architecture=ecs.CpuArchitecture.ARM64,
                operating_system_family=ecs.OperatingSystemFamily.LINUX,
            ),
        )
        self.container = self.task_definition.add_container(
            CONTAINER_NAME,
            image=ecs.ContainerImage.from_asset(str(stage_image(layer_dir, handler_dir))),
            environment=dict(environment),
            logging=ecs.LogDrivers.aws_logs(stream_prefix="run", log_group=self.log_group),
            readonly_root_filesystem=True,
            # Between SIGTERM and SIGKILL: the worker drains, then hands back what still runs.
            stop_timeout=Duration.seconds(30),
        )
        self.service = ecs.FargateService(
            self,
            "Service",
            cluster=self.cluster,
            task_definition=self.task_definition,
            desired_count=0,
            assign_public_ip=True,
            vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PUBLIC),
            min_healthy_percent=0,
            circuit_breaker=ecs.DeploymentCircuitBreaker(rollback=True),
        )
        queue.grant_consume_messages(self.task_role)
        self._container_targets(log_retention)
        self._own_tasks()
        minute = Duration.minutes(1)
        depth = cloudwatch.MathExpression(
            expression="visible + inflight",
            using_metrics={
                "visible": queue.metric_approximate_number_of_messages_visible(period=minute),
                "inflight": queue.metric_approximate_number_of_messages_not_visible(period=minute),
            },
            period=minute,
        )
        self.scaling = self.service.auto_scale_task_count(min_capacity=0, max_capacity=max_tasks)
        # Exact counts by depth: none when the queue is empty (idle costs nothing), one for a few runs,
        # then more. Each task runs up to JOBSCHED_WORKER_CONCURRENCY runs at once.
        self.scaling.scale_on_metric(
            "QueueDepth",
            metric=depth,
            adjustment_type=appscaling.AdjustmentType.EXACT_CAPACITY,
            scaling_steps=[
                appscaling.ScalingInterval(upper=0, change=0),
                appscaling.ScalingInterval(lower=1, upper=20, change=1),
                appscaling.ScalingInterval(lower=20, upper=100, change=min(3, max_tasks)),
                appscaling.ScalingInterval(lower=100, change=max_tasks),
            ],
            cooldown=Duration.minutes(1),
        )
        execution_role = self.task_definition.obtain_execution_role()
        acknowledge(
            self.container_execution_role,
            "IAM5",
            "Container targets' execution role: ecr:GetAuthorizationToken takes no resource-level "
            "permission, and a container target's image may be in any of the account's repositories.",
            finding="Resource::*",
        )
        acknowledge(
            self.task_role,
            "IAM5",
            "Container targets: ecs:RegisterTaskDefinition and DescribeTaskDefinition take no "
            "resource-level permission; RunTask, DescribeTasks and StopTask are conditioned on this cluster.",
            finding="Resource::*",
        )
        acknowledge(
            execution_role,
            "IAM5",
            "ECS's execution role: ecr:GetAuthorizationToken takes no resource-level permission; the "
            "image pull and the log writes are scoped by CDK to the asset repository and this log group.",
            finding="Resource::*",
        )
        acknowledge(
            self,
            "ECS2",
            "The environment holds resource names and URLs only (tables, queues, workflow ARNs); no secret.",
        )
        for rule, reason in (
            (
                "VPCSubnetAutoAssignPublicIpDisabled",
                "The worker tasks reach AWS's APIs through the internet gateway (no NAT gateway to pay "
                "for while idle); they take no inbound traffic: their security group allows none.",
            ),
            ("VPCNoUnrestrictedRouteToIGW", "The tasks' way out to AWS's public endpoints, TLS only."),
            ("VPCDefaultSecurityGroupClosed", "No resource uses the default security group."),
            (
                "IAMNoInlinePolicy",
                "CDK's DefaultPolicy: each role's own least-privilege statements, made and deleted with it.",
            ),
        ):
            acknowledge_in(self, rule, reason, packs=(HIPAA, NIST))

    def _container_targets(self, log_retention: logs.RetentionDays) -> None:
        """What container targets (jobsched.adapters.targets.ecs) need: their tasks' security group
        (no inbound), the log group their output goes to (awslogs, a stream per task), the execution
        role of the task definitions registered for images (the image pull; streams and events in
        that group only), and the ECS worker's calls: RunTask/DescribeTasks/StopTask in this cluster,
        ListTasks of it, the task definitions, tagging at RunTask, and passing the execution role.
        The worker is told where."""
        self.container_security_group = ec2.SecurityGroup(
            self,
            "ContainerTasks",
            vpc=self.vpc,
            description="jobsched container targets tasks: no inbound, out to AWS and image registries",
            allow_all_outbound=True,
        )
        spec = resources.CONTAINER_LOG_GROUP
        self.container_log_group = logs.LogGroup(
            self, spec.logical_id, retention=log_retention, removal_policy=RemovalPolicy.DESTROY
        )
        cast(logs.CfnLogGroup, self.container_log_group.node.default_child).override_logical_id(
            spec.logical_id
        )
        self.container_execution_role = iam.Role(
            self,
            "ContainerExecutionRole",
            assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
            description="jobsched container targets: pull the image, write the task's output",
        )
        # The awslogs driver makes the task's stream at its start and puts its lines: in this group
        # only (its ARN ends ":*": its streams). Not grant_write: that adds DescribeLogStreams too.
        self.container_execution_role.add_to_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                resources=[self.container_log_group.log_group_arn],
            )
        )
        self.container_execution_role.add_to_policy(
            iam.PolicyStatement(
                actions=[
                    "ecr:GetAuthorizationToken",
                    "ecr:BatchCheckLayerAvailability",
                    "ecr:GetDownloadUrlForLayer",
                    "ecr:BatchGetImage",
                ],
                resources=["*"],
            )
        )
        in_cluster = {"ArnEquals": {"ecs:cluster": self.cluster.cluster_arn}}
        role = self.task_role
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["ecs:RunTask", "ecs:DescribeTasks", "ecs:StopTask"],
                resources=["*"],
                conditions=in_cluster,
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(actions=["ecs:ListTasks"], resources=["*"], conditions=in_cluster)
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["ecs:RegisterTaskDefinition", "ecs:DescribeTaskDefinition"], resources=["*"]
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["ecs:TagResource"],
                resources=["*"],
                conditions={"StringEquals": {"ecs:CreateAction": "RunTask"}},
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(actions=["iam:PassRole"], resources=[self.container_execution_role.role_arn])
        )
        if self.container_task_roles:
            # A caller's own task_definition_arn may name its task and execution roles: RunTask passes
            # them, so the worker may pass exactly those the deployer listed (`-c container_task_roles=`),
            # to ECS tasks only. None listed: such a definition's RunTask is refused (AccessDenied).
            role.add_to_policy(
                iam.PolicyStatement(
                    actions=["iam:PassRole"],
                    resources=list(self.container_task_roles),
                    conditions={"StringEquals": {"iam:PassedToService": "ecs-tasks.amazonaws.com"}},
                )
            )
        for name, value in (
            (c.ECS_CLUSTER_ENV, self.cluster.cluster_name),
            (c.ECS_SUBNETS_ENV, ",".join(s.subnet_id for s in self.vpc.public_subnets)),
            (c.ECS_SECURITY_GROUPS_ENV, self.container_security_group.security_group_id),
            (c.ECS_EXECUTION_ROLE_ARN_ENV, self.container_execution_role.role_arn),
            (c.ECS_LOG_GROUP_ENV, self.container_log_group.log_group_name),
        ):
            self.container.add_environment(name, value)

    def _own_tasks(self) -> None:
        """A Python run bigger than the worker's task runs in a task of the worker's own definition at
        its placed size (jobsched.adapters.targets.TargetFactory.for_worker_task): RunTask, DescribeTasks
        and StopTask in this cluster are the container targets' grants already (RunTask on any
        definition, the cluster its condition); what more it takes is passing the definition's own two
        roles (its task role: itself; its execution role: the image pull and the logs) to ECS tasks,
        and no other role. The task definition's container has no hard memory limit, so the task's
        memory override is the run's. The worker is told the family."""
        execution_role = self.task_definition.obtain_execution_role()
        self.task_role.add_to_policy(
            iam.PolicyStatement(
                actions=["iam:PassRole"],
                resources=[self.task_role.role_arn, execution_role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": "ecs-tasks.amazonaws.com"}},
            )
        )
        self.container.add_environment(c.ECS_WORKER_FAMILY_ENV, self.family)

    def track_stopped_tasks(
        self, *, function: lambda_.IFunction, dead_letter_queue: sqs.IQueue
    ) -> events.Rule:
        """Container targets' stopped tasks to `function` (functions/task_events): an EventBridge rule
        on this cluster's "ECS Task State Change" events with lastStatus STOPPED, of tasks no ECS
        service started (jobsched.domain.ecs_tasks.stopped_pattern: the ECS worker's own tasks are
        its service's). EventBridge invokes the function through the permission CDK adds to it (a
        Lambda target takes no role); what neither EventBridge nor the function's own retries could
        deliver lands in `dead_letter_queue` (resources.TASK_EVENTS_DLQ)."""
        self.task_events_dlq = dead_letter_queue
        reason = "It is a dead-letter queue: stopped-task events that could not be recorded, kept 14 days."
        acknowledge(dead_letter_queue, "SQS3", reason)
        acknowledge(dead_letter_queue, "SQSRedrivePolicy", reason, pack=SERVERLESS)
        pattern = stopped_pattern(self.cluster.cluster_arn)
        self.stopped_tasks_rule = events.Rule(
            self,
            "StoppedTasks",
            description="jobsched: container targets' stopped tasks record their run attempt",
            event_pattern=events.EventPattern(
                source=pattern["source"], detail_type=pattern["detail-type"], detail=pattern["detail"]
            ),
        )
        self.stopped_tasks_rule.add_target(
            events_targets.LambdaFunction(
                function,
                dead_letter_queue=dead_letter_queue,
                retry_attempts=EVENT_RETRIES,
                max_event_age=EVENT_MAX_AGE,
            )
        )
        function.configure_async_invoke(
            retry_attempts=FUNCTION_RETRIES,
            max_event_age=EVENT_MAX_AGE,
            on_failure=SendOnly(dead_letter_queue),
        )
        return self.stopped_tasks_rule
