"""The jobsched scheduler construct (composes the constructs, wires the least-privilege grants between
them) and the stack `cdk deploy` ships, a thin wrapper around it."""

from __future__ import annotations

import inspect
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, cast

from aws_cdk import (
    App,
    Aws,
    CfnOutput,
    CfnResource,
    CustomResource,
    Duration,
    Fn,
    RemovalPolicy,
    Stack,
    Validations,
)
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks, HIPAASecurityChecks, NIST80053R5Checks, ServerlessChecks
from constructs import Construct

from jobsched import constants as c
from jobsched import resources
from jobsched.domain.fargate_vcpu import DEFAULT_FARGATE_VCPU_QUOTA
from jobsched_infra import shard_guard
from jobsched_infra.constructs.api import Api
from jobsched_infra.constructs.dispatch import Dispatch
from jobsched_infra.constructs.ecs import EcsWorkers
from jobsched_infra.constructs.functions import ARCHITECTURE, RUNTIME, CoreLayer, JobschedFunction
from jobsched_infra.constructs.observability import Observability
from jobsched_infra.constructs.queue_function import QueueFunction
from jobsched_infra.constructs.queues import Queues
from jobsched_infra.constructs.secrets import _WITH_TENANT_CONTEXT as WITH_TENANT_CONTEXT
from jobsched_infra.constructs.secrets import SigningSecrets
from jobsched_infra.constructs.storage import Storage
from jobsched_infra.constructs.workflows import Workflows
from jobsched_infra.layer import NO_DEPS_ENV, build_layer, stage_handlers
from jobsched_infra.nag import HIPAA, NIST, SERVERLESS, acknowledge, acknowledge_in
from jobsched_infra.project import cdk_context

# The dispatcher's tick, in one place: the EventBridge rate and the functions' setting.
TICK = Duration.minutes(1)
# A worker must be dead before its message's lease (the queue's visibility timeout) runs out, or
# a second worker could start the run while the first still writes (QueueFunction refuses a timeout
# that is not below it). The heartbeat extends live leases only.
WORKER_TIMEOUT = Duration.seconds(resources.WORKER_TIMEOUT_SECONDS)
DISPATCHER_TIMEOUT = Duration.seconds(60)
# A role a caller's task definition may name (`-c container_task_roles=`), in any partition.
ROLE_ARN = re.compile(r"arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+")
# Runs one ECS worker task executes at once (its size: resources.ECS_WORKER_CPU / _MEMORY_MIB).
ECS_WORKER_CONCURRENCY = 4
API_TIMEOUT = Duration.seconds(10)
# Below the dead-letter queue's visibility timeout, which SQS event source mappings require.
RECONCILER_TIMEOUT = Duration.seconds(30)
# One stopped task's record: a few reads, one conditional write, a workflow start.
TASK_EVENTS_TIMEOUT = Duration.seconds(30)
TASK_EVENTS_CONCURRENCY = 5
DEFAULT_SHARD_COUNT = 16
# A recurring job's ticks go out this far ahead (SQS allows 900 s of delay), so a frequent job's
# due entry moves once per 14 minutes instead of once per tick: the cheapest healthy run.
HANDOVER_HORIZON_SECONDS = 840
# Due entries a shard pass hands over per second at most: 80% of a due-index partition's 1,000 write
# units a second, the partition a burst's entries move out of (`-c dispatch_pace=N`, 0: unpaced).
DEFAULT_DISPATCH_PACE = 800
METRICS_NAMESPACE = "jobsched"
# What reserving, releasing and sweeping Fargate vCPU calls (jobsched.adapters.dynamodb.fargate_vcpu).
FARGATE_VCPU_ACTIONS = (
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:Query",
)
# Limits (issue 17): the API's stage throttle and its function's reserved concurrency, and the WAF
# rule's requests per IP in 5 minutes (-c waf=true). The dispatcher reserves two invocations per
# tick target: a pass may run into the next tick (its timeout is the tick), never more.
API_RATE_LIMIT = 100
API_BURST_LIMIT = 200
API_DAILY_QUOTA = 1_000_000
API_RESERVED_CONCURRENCY = 20
WAF_RATE_LIMIT = 2_000
KeyChoice = Literal["customer", "aws-owned"]
KEY_LOGICAL_ID = "JobschedKey"

# Powertools reads these (aws_lambda_powertools.shared.constants); jobsched's own are in jobsched.constants.
POWERTOOLS_SERVICE_NAME_ENV = "POWERTOOLS_SERVICE_NAME"
POWERTOOLS_METRICS_NAMESPACE_ENV = "POWERTOOLS_METRICS_NAMESPACE"


class JobschedScheduler(Construct):
    """The whole scheduler as a construct a user instantiates in their own CDK app (or JobschedStack does).

    Tables, queues, alert topic, failure and DAG workflows (jobsched.resources); 4 functions; API;
    tick; signing secrets. Props, keyword-only: `layer_dir` (a built core layer; None: built now,
    with its pip dependencies unless JOBSCHED_LAYER_NO_DEPS=1), `handler_dir` and `handler_modules`
    (the user's handler code, shipped as a second layer on every function, and the modules each
    imports at cold start), `demo_handlers` (register demo.*: off unless asked), and the fleet's
    sizing (`shard_count`, `dispatcher_invocations`, `dispatch_pace`).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        layer_dir: Path | None = None,
        handler_dir: Path | None = None,
        handler_modules: Sequence[str] = (),
        demo_handlers: bool = False,
        shard_count: int = DEFAULT_SHARD_COUNT,
        dispatcher_invocations: int = 1,
        dispatch_pace: int = DEFAULT_DISPATCH_PACE,
        kms_keys: KeyChoice = "customer",
        worker_invocations: int = resources.WORKER_EVENT_SOURCE.max_invocations,
        waf: bool = False,
        fargate_vcpu_quota: int = DEFAULT_FARGATE_VCPU_QUOTA,
        container_task_roles: Sequence[str] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        for arn in container_task_roles:
            if not ROLE_ARN.fullmatch(arn):
                raise ValueError(
                    f"container_task_roles: {arn!r} is not an IAM role ARN "
                    "(arn:aws:iam::<account>:role/<name>)"
                )
        if layer_dir is None:
            layer_dir = build_layer(
                Path(tempfile.mkdtemp(prefix="jobsched-layer-")),
                with_dependencies=os.environ.get(NO_DEPS_ENV) != "1",
            )
        lease_seconds = resources.EXECUTION_QUEUE.visibility_timeout_seconds
        # One customer-managed key for the tables, queues, topic, logs and workflows (`-c kms=aws-owned`:
        # AWS-owned/managed keys instead, no key to pay for or to lose).
        self.key = self._key() if kms_keys == "customer" else None
        storage = Storage(
            self,
            "Storage",
            specs=(
                *resources.TABLES,
                resources.ALERTS_TABLE,
                *resources.LIMIT_TABLES,
                resources.WORKERS_TABLE,
            ),
            key=self.key,
        )
        queues = Queues(self, "Queues", key=self.key)
        jobs = storage.tables[resources.JOBS_TABLE.logical_id]
        runs = storage.tables[resources.RUNS_TABLE.logical_id]
        alerts = storage.tables[resources.ALERTS_TABLE.logical_id]
        limits = storage.tables[resources.LIMITS_TABLE.logical_id]
        quotas = storage.tables[resources.QUOTAS_TABLE.logical_id]
        fargate_vcpu = storage.tables[resources.FARGATE_VCPU_TABLE.logical_id]
        worker_pools = storage.tables[resources.WORKERS_TABLE.logical_id]
        execution_queue = queues.queues[resources.EXECUTION_QUEUE.logical_id]
        dead_letter_queue = queues.queues[resources.EXECUTION_DLQ.logical_id]
        ecs_queue = queues.queues[resources.ECS_QUEUE.logical_id]
        workflows = Workflows(self, "Workflows", key=self.key)
        topic = workflows.topic
        failure_workflow, dag_workflow = workflows.failure_workflow, workflows.dag_workflow
        layer = CoreLayer(self, "CoreLayer", asset_dir=layer_dir)
        secrets = SigningSecrets(self, "SigningSecrets", table_key=self.key)

        shared_env = {
            c.JOBS_TABLE_ENV: jobs.table_name,
            c.RUNS_TABLE_ENV: runs.table_name,
            c.EXECUTION_QUEUE_URL_ENV: execution_queue.queue_url,
            c.EXECUTION_DLQ_URL_ENV: dead_letter_queue.queue_url,
            # Runs placed on ECS (jobsched.domain.compute) go there: the dispatcher and the api send
            # them, the Lambda worker forwards those that reach it.
            c.ECS_QUEUE_URL_ENV: ecs_queue.queue_url,
            c.FAILURE_WORKFLOW_ARN_ENV: failure_workflow.state_machine_arn,
            c.DAG_WORKFLOW_ARN_ENV: dag_workflow.state_machine_arn,
            c.ALERT_TOPIC_ARN_ENV: topic.topic_arn,
            c.ALERTS_TABLE_ENV: alerts.table_name,
            c.LIMITS_TABLE_ENV: limits.table_name,
            c.QUOTAS_TABLE_ENV: quotas.table_name,
            c.FARGATE_VCPU_TABLE_ENV: fargate_vcpu.table_name,
            c.FARGATE_VCPU_QUOTA_ENV: str(fargate_vcpu_quota),
            c.SHARD_COUNT_ENV: str(shard_count),
            c.LEASE_SECONDS_ENV: str(lease_seconds),
            c.TICK_SECONDS_ENV: str(int(TICK.to_seconds())),
            c.HANDOVER_HORIZON_SECONDS_ENV: str(HANDOVER_HORIZON_SECONDS),
            c.WORKER_CONCURRENCY_ENV: str(resources.WORKER_EVENT_SOURCE.concurrency),
            c.DISPATCH_PACE_ENV: str(dispatch_pace),
            c.DEMO_HANDLERS_ENV: "true" if demo_handlers else "false",
            POWERTOOLS_METRICS_NAMESPACE_ENV: METRICS_NAMESPACE,
        }
        if handler_modules:
            shared_env[c.HANDLER_MODULES_ENV] = ",".join(handler_modules)

        def env(service: str, **extra: str) -> dict[str, str]:
            return {**shared_env, POWERTOOLS_SERVICE_NAME_ENV: f"jobsched-{service}", **extra}

        self.api = Api(
            self,
            "Api",
            layer=layer,
            timeout=API_TIMEOUT,
            environment=env("api", **{c.TENANT_SOURCE_ENV: "iam"}),
            rate_limit=API_RATE_LIMIT,
            burst_limit=API_BURST_LIMIT,
            daily_quota=API_DAILY_QUOTA,
            reserved_concurrency=API_RESERVED_CONCURRENCY,
            waf_rate_limit=WAF_RATE_LIMIT if waf else None,
        )
        self.dispatch = Dispatch(
            self,
            "Dispatch",
            layer=layer,
            tick=TICK,
            timeout=DISPATCHER_TIMEOUT,
            environment=env("dispatcher"),
            shard_count=shard_count,
            invocations=dispatcher_invocations,
            reserved_concurrency=2 * min(max(dispatcher_invocations, 1), shard_count),
        )
        # Runs per worker invocation and how many of them run at once: resources.WORKER_EVENT_SOURCE,
        # which the local stack plays too. A run is due now (SQS already held it back until its
        # second): the mapping never waits to fill a batch.
        self.workers = QueueFunction(
            self,
            "Workers",
            name="worker",
            source=resources.WORKER_EVENT_SOURCE,
            queues=queues,
            mapping_id="ExecutionQueue",
            layer=layer,
            environment=env("worker"),
            timeout=WORKER_TIMEOUT,
            memory_size=resources.WORKER_MEMORY_MIB,
            max_batching_window=Duration.seconds(0),
            max_concurrency=worker_invocations,
        )
        # A message lands in the DLQ after the execution queue's maxReceiveCount (workers kept dying
        # on it); the reconciler dead-letters its run through the failure workflow, so nothing is
        # lost in a queue nobody reads. A record it fails stays in the DLQ until the DLQ's retention.
        self.reconciler = QueueFunction(
            self,
            "Reconciler",
            name="reconciler",
            source=resources.RECONCILER_EVENT_SOURCE,
            queues=queues,
            mapping_id="DeadLetterQueue",
            layer=layer,
            environment=env("reconciler"),
            timeout=RECONCILER_TIMEOUT,
        )
        # The ECS Fargate worker: the same package in a container, on its own queue (constructs/ecs.py).
        self.ecs = EcsWorkers(
            self,
            "EcsWorkers",
            queue=ecs_queue,
            layer_dir=layer_dir,
            handler_dir=handler_dir,
            container_task_roles=container_task_roles,
            environment=env(
                "ecs-worker",
                **{c.WORKER_LANE_ENV: "ecs", c.WORKER_CONCURRENCY_ENV: str(ECS_WORKER_CONCURRENCY)},
            ),
        )
        # Container targets' stopped tasks: ECS's task state change events record their run attempts
        # (services/task_events.py), beside the ECS worker's polls (constructs/ecs.py).
        self.task_events = JobschedFunction(
            self,
            "TaskEvents",
            name="task_events",
            layer=layer,
            environment=env("task-events"),
            timeout=TASK_EVENTS_TIMEOUT,
            # A burst of stops past it is throttled, and Lambda retries throttled events (up to
            # the event's max age); the ECS worker's polls record the runs meanwhile.
            reserved_concurrency=TASK_EVENTS_CONCURRENCY,
        )
        task_events_dlq = queues.queues[resources.TASK_EVENTS_DLQ.logical_id]
        self.ecs.track_stopped_tasks(function=self.task_events.function, dead_letter_queue=task_events_dlq)
        self.storage, self.queues, self.workflows, self.secrets = storage, queues, workflows, secrets

        # Grants, least privilege. DynamoDB: exactly the calls each function's adapters make
        # (jobsched.adapters.dynamodb), on the tables, and Query on the indexes it reads, by name.
        # TransactWriteItems is authorized per item: PutItem, UpdateItem, ConditionCheckItem. The api,
        # the dispatcher and the worker write jobs and runs; the api also deletes (the replay's
        # powertools idempotency record, on the jobs table, when a replay fails), queries the
        # dead-letter index and the two listing indexes, and batch-reads the jobs a listing page
        # names; the dispatcher alone queries the due index. The api (which hands a job
        # due within the look-ahead straight to the queue) and the dispatcher send runs; only the
        # worker receives, deletes and extends (heartbeat) messages (its QueueFunction grants that,
        # as the reconciler's does on the DLQ).
        api_fn, dispatcher_fn, worker_fn, reconciler_fn = (
            self.api.entry_point.function,
            self.dispatch.entry_point.function,
            self.workers.entry_point.function,
            self.reconciler.entry_point.function,
        )
        task_events_fn = self.task_events.function
        # Every function builds the same services (jobsched.wiring), so every one imports the
        # handler modules at cold start: the api to check a job's handler, the worker to run it.
        self.handlers_layer: lambda_.LayerVersion | None = None
        if handler_dir is not None:
            self.handlers_layer = lambda_.LayerVersion(
                self,
                "HandlersLayer",
                code=lambda_.Code.from_asset(str(stage_handlers(handler_dir, handler_modules))),
                compatible_runtimes=[RUNTIME],
                compatible_architectures=[ARCHITECTURE],
                description="jobsched: the user's handler modules",
            )
            for fn in (api_fn, dispatcher_fn, worker_fn, reconciler_fn, task_events_fn):
                fn.add_layers(self.handlers_layer)
        # Signing secrets: the api manages them, the worker signs with them; no other function may.
        secrets.grant_manage(api_fn)
        secrets.grant_sign(worker_fn)
        # AWS targets (lambda, sqs, sns, eventbridge, stepfunctions) act through the tenant's own role,
        # assumed with ExternalId = <tenant> (the role's trust policy demands it: docs/deploy.md); the
        # scheduler's roles hold no rights on user resources, only this one call.
        worker_fn.add_to_role_policy(
            iam.PolicyStatement(actions=["sts:AssumeRole"], resources=[f"arn:{Aws.PARTITION}:iam::*:role/*"])
        )
        assert worker_fn.role is not None
        acknowledge(
            worker_fn.role,
            "IAM5",
            "A target's role_arn is the tenant's own role, in any account: which roles a worker may "
            "assume is decided by each role's trust policy (ExternalId = tenant), not by this one.",
            finding="Resource::arn:<AWS::Partition>:iam::*:role/*",
        )
        # GET /api/runs/{id} links a run to the worker's log lines (filtered by the run id).
        api_fn.add_environment(c.WORKER_LOG_GROUP_ENV, self.workers.entry_point.log_group.log_group_name)
        # GET /api/runs/{id}/logs reads them back (FilterLogEvents on that group only).
        api_fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=["logs:FilterLogEvents"],
                resources=[self.workers.entry_point.log_group.log_group_arn],
            )
        )
        # ... and what container targets' tasks printed (GetLogEvents on their streams in that group).
        api_fn.add_environment(c.ECS_LOG_GROUP_ENV, self.ecs.container_log_group.log_group_name)
        api_fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=["logs:GetLogEvents"], resources=[self.ecs.container_log_group.log_group_arn]
            )
        )

        self.table_access = {
            api_fn: {
                jobs: (*READ, *WRITE, "dynamodb:DeleteItem", "dynamodb:BatchGetItem"),
                # BatchGetItem: a listing page's packed one-offs' runs (services/packs.py)
                runs: (*READ, *WRITE, "dynamodb:BatchGetItem"),
            },
            dispatcher_fn: {jobs: (*READ, *WRITE), runs: (*READ, *WRITE)},
            worker_fn: {jobs: (*READ, *WRITE), runs: (*READ, *WRITE)},
            # The bad path: the reconciler turns the DLQ's poison messages into dead-lettered runs: it
            # reads the job, moves its run to FAILED and starts the workflow; it never writes a job.
            reconciler_fn: {jobs: READ, runs: (*READ, *WRITE)},
            # A stopped task's event: reads the run and its job, records the attempt (a conditional
            # UpdateItem on the run), and settles it: a one-off's COMPLETED (UpdateItem on the job),
            # a failure's alert (below) and workflow start. It never creates a job or a run.
            task_events_fn: {
                jobs: (*READ, "dynamodb:UpdateItem"),
                runs: (*READ, "dynamodb:UpdateItem"),
            },
        }
        # External worker pools (adapters/dynamodb/workers.py): the api serves the worker API, so it
        # reads and writes the workers table (items by key, partitions by Query); the worker only
        # puts a due worker-pool run in its pool's queue (one PutItem).
        api_fn.add_environment(c.WORKERS_TABLE_ENV, worker_pools.table_name)
        worker_fn.add_environment(c.WORKERS_TABLE_ENV, worker_pools.table_name)
        self.table_access[worker_fn][worker_pools] = ("dynamodb:PutItem",)
        self.table_access[api_fn][worker_pools] = (
            "dynamodb:GetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:DeleteItem",
            "dynamodb:Query",
        )
        # Alerts (services/alerts.py): whoever detects one keeps it (one conditional PutItem on the
        # alerts table) and publishes it: the worker (failed, late, skipped), the dispatcher (late,
        # missed, skipped), the reconciler (a poison run's failure) and the api (a resume's missed
        # ticks, a due-soon hand-over). Only the api reads them, through the recent index (below).
        for fn in (api_fn, dispatcher_fn, worker_fn, reconciler_fn, task_events_fn):
            self.table_access[fn][alerts] = ("dynamodb:PutItem",)
            # (not topic.grant_publish: it adds kms:GenerateDataKey* on the key; _grant_key grants
            # exactly the key calls SNS makes.)
            fn.add_to_role_policy(iam.PolicyStatement(actions=["sns:Publish"], resources=[topic.topic_arn]))
        # Tenant limits (jobsched.adapters.dynamodb.limits): the worker takes, renews and frees
        # concurrency-key slots (a consistent GetItem, a conditional PutItem, UpdateItem); the api
        # takes a day's backfill budget (UpdateItem), renews and frees a worker-pool run's key slots
        # (UpdateItem: its pool holds them from hand-off to settling) and reads quotas (GetItem), as
        # do the dispatcher (max_runs_per_second) and the worker (max_concurrent_runs), each cached
        # 30 s per warm Lambda.
        # Quotas are written by an operator's own credentials only (`jobsched admin quota`): no
        # function may write them.
        self.table_access[worker_fn][limits] = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem")
        self.table_access[api_fn][limits] = ("dynamodb:UpdateItem",)
        for fn in (api_fn, dispatcher_fn, worker_fn):
            self.table_access[fn][quotas] = ("dynamodb:GetItem",)
        # Fargate vCPU reservations (jobsched.adapters.dynamodb.fargate_vcpu): the worker reserves before
        # an ECS-placed run (transactions: UpdateItem on the counters, PutItem of the run's record),
        # releases it (GetItem, DeleteItem, UpdateItem) and finds lapsed records (Query). The ECS task
        # role gets the same calls (_grant_ecs_worker); no other function touches the table.
        self.table_access[worker_fn][fargate_vcpu] = FARGATE_VCPU_ACTIONS
        self.index_access = {
            # the dead letters, and GET /api/jobs (newest first, or by next run)
            api_fn: [
                (alerts, resources.ALERTS_RECENT_INDEX),
                (runs, resources.DEAD_LETTER_INDEX),
                (jobs, resources.TENANT_JOBS_INDEX),
                (jobs, resources.TENANT_NEXT_RUN_INDEX),
            ],
            dispatcher_fn: [(jobs, resources.DUE_INDEX)],
        }
        for fn, tables in self.table_access.items():
            for table, actions in tables.items():
                fn.add_to_role_policy(iam.PolicyStatement(actions=list(actions), resources=[table.table_arn]))
        # One write more: a chunk of a long backfill or bulk action the queue gave up on ends its
        # operation FAILED (services/operations.py abandon). A PutItem on operation items only: their
        # partition keys start "OP#" (adapters/dynamodb/operations.py), never a job's.
        reconciler_fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=["dynamodb:PutItem"],
                resources=[jobs.table_arn],
                conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["OP#*"]}},
            )
        )
        for fn, indexes in self.index_access.items():
            for table, index in indexes:
                fn.add_to_role_policy(
                    iam.PolicyStatement(
                        actions=["dynamodb:Query"], resources=[f"{table.table_arn}/index/{index.name}"]
                    )
                )
        # (queue.grant, not grant_send_messages: that one adds kms:GenerateDataKey* on the key, and
        # _grant_key grants exactly the key calls below.)
        for fn in (api_fn, dispatcher_fn, worker_fn):
            # The worker sends too: the copy that wakes a buffer_one tick sleeping behind the run it held.
            execution_queue.grant(fn, *SEND)
            ecs_queue.grant(fn, *SEND)  # ECS-placed runs: handed over, or forwarded by the worker
        ecs_role = self._grant_ecs_worker(
            self.ecs,
            tables=self.table_access[worker_fn],
            queues=(execution_queue, ecs_queue),
            workflows=(failure_workflow, dag_workflow),
            topic_arn=topic.topic_arn,
            secrets=secrets,
        )

        # A worker hands a failed attempt to the workflow, the api starts a replay, the reconciler
        # dead-letters a poison message's run through it.
        for fn in (api_fn, worker_fn, reconciler_fn, task_events_fn):
            failure_workflow.grant_start_execution(fn)
        # The good path of a DAG: the DAG workflow counts a run's success into its dependants. The
        # worker starts it when a run succeeds; the api and the reconciler build the same services
        # (jobsched.wiring), whose completion path starts it too. The dispatcher never completes a run.
        for fn in (api_fn, worker_fn, reconciler_fn, task_events_fn):
            dag_workflow.grant_start_execution(fn)

        # The failure workflow's role: exactly the three calls its ASL makes, on the concrete resources
        # (the ASL takes their names from the execution input, so no grant can be derived from it).
        # A conditional UpdateItem on a run, and on the job a run's dead letter ends or its replay
        # restores; never on an index, never any other write.
        failure_workflow.add_to_role_policy(
            iam.PolicyStatement(actions=["dynamodb:UpdateItem"], resources=[runs.table_arn, jobs.table_arn])
        )
        execution_queue.grant(failure_workflow, "sqs:SendMessage")
        failure_workflow.add_to_role_policy(
            iam.PolicyStatement(actions=["sns:Publish"], resources=[topic.topic_arn])
        )
        # RecordAlert: the dead letter's alert item, one conditional PutItem, before it is published.
        failure_workflow.add_to_role_policy(
            iam.PolicyStatement(actions=["dynamodb:PutItem"], resources=[alerts.table_arn])
        )

        # The DAG workflow's role, likewise exactly its ASL's calls: a conditional UpdateItem (count,
        # release) and a consistent GetItem (recheck, existing run) on the runs table itself, never
        # an index, and SendMessage for the released run. It creates no job and publishes nothing.
        dag_workflow.add_to_role_policy(
            iam.PolicyStatement(
                actions=["dynamodb:UpdateItem", "dynamodb:GetItem"], resources=[runs.table_arn]
            )
        )
        execution_queue.grant(dag_workflow, "sqs:SendMessage")
        senders = [fn.role for fn in (api_fn, dispatcher_fn, worker_fn)]
        self._only_the_stack_sends_runs(
            execution_queue, worker_fn, [*senders, failure_workflow.role, dag_workflow.role, ecs_role]
        )
        self._only_the_stack_sends_runs(
            ecs_queue, worker_fn, [*senders, ecs_role], container=self.ecs.container
        )
        stack_roles = [
            cast(iam.Role, r)
            for r in [fn.role for fn in (api_fn, dispatcher_fn, worker_fn, reconciler_fn, task_events_fn)]
            + [failure_workflow.role, dag_workflow.role, ecs_role]
        ]
        # Resource policies: every table's and every queue's data to the stack's own roles only,
        # whatever IAM grants elsewhere in the account. The quotas table also lets in the stack's
        # quota operator role, the one principal that writes it (`jobsched admin quota`: no function
        # may). Step Functions has no resource-based policy on a state machine (its IAM guide:
        # "Resource-based policies: No"), so who may start the workflows is decided by identity
        # policies alone: only these roles are granted states:StartExecution, on the two workflows'
        # ARNs (tests/infra/test_hardening.py proves it on the template; docs/operations.md).
        self.quota_operator_role = self._quota_operator_role(quotas)
        for table in (*storage.tables.values(), secrets.table):
            users = [*stack_roles, self.quota_operator_role] if table is quotas else stack_roles
            self._only_the_stack_reads_and_writes(table, users)
        for queue in queues.queues.values():
            self._only_the_stack_uses_the_queue(queue, stack_roles)
        if self.key is not None:
            self._grant_key(self.key, stack_roles)
        self.shard_guard = self._shard_guard(shard_count)
        dispatcher_fn.node.add_dependency(self.shard_guard)
        # The dashboard and the alarms (constructs/observability.py), notifying the alert topic.
        fns = {
            "api": api_fn,
            "dispatcher": dispatcher_fn,
            "worker": worker_fn,
            "reconciler": reconciler_fn,
            "task_events": task_events_fn,
        }
        self.observability = Observability(
            self,
            "Observability",
            topic=topic,
            functions=fns,
            dead_letter_queue=dead_letter_queue,
            workflows=[failure_workflow, dag_workflow],
            tick=TICK,
            task_events_dlq=self.ecs.task_events_dlq,
        )
        # CloudWatch alarms publish to the topic, under its key (an AWS-managed SNS key cannot grant that).
        topic.add_to_resource_policy(
            iam.PolicyStatement(
                actions=["sns:Publish"],
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                resources=[topic.topic_arn],
                conditions={"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}},
            )
        )
        if self.key is not None:
            # CloudWatch publishes the alarms to the encrypted topic; EventBridge sends the stopped-task
            # events it could not deliver to their encrypted dead-letter queue. Scoped to the account,
            # not the rule's ARN: the queue's key naming the rule that names the queue would be a
            # dependency cycle.
            for service in ("cloudwatch.amazonaws.com", "events.amazonaws.com"):
                self.key.add_to_resource_policy(
                    iam.PolicyStatement(
                        principals=[iam.ServicePrincipal(service)],
                        actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                        resources=["*"],
                        conditions={"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}},
                    )
                )
        self._encrypt_log_groups()  # last: every log group made above

    def _key(self) -> kms.Key:
        """The stack's customer-managed key (rotated yearly, retained), usable by CloudWatch Logs."""
        key = kms.Key(
            self,
            "Key",
            description="jobsched: tables, queues, alert topic, logs and workflows",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN,
        )
        cast(kms.CfnKey, key.node.default_child).override_logical_id(KEY_LOGICAL_ID)
        # CloudWatch Logs encrypts the stack's log groups with it (only groups of this account and
        # region); Step Functions' vended log delivery writes through CloudWatch Logs.
        key.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal(f"logs.{Aws.REGION}.amazonaws.com")],
                actions=["kms:Encrypt", "kms:Decrypt", "kms:GenerateDataKey", "kms:DescribeKey"],
                resources=["*"],
                conditions={
                    "ArnLike": {
                        "kms:EncryptionContext:aws:logs:arn": (
                            f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:log-group:*"
                        )
                    }
                },
            )
        )
        return key

    @staticmethod
    def _grant_key(key: kms.IKey, roles: list[iam.Role]) -> None:
        """Every stack role uses the key, and only the calls the encrypted services make for it."""
        for role in roles:
            role.add_to_policy(iam.PolicyStatement(actions=list(KEY_USE), resources=[key.key_arn]))

    def _encrypt_log_groups(self) -> None:
        """Every log group of the stack under the key (the functions', the API's, the workflows')."""
        for node in self.node.find_all():
            if not isinstance(node, logs.CfnLogGroup):
                continue
            if self.key is not None:
                node.kms_key_id = self.key.key_arn
                continue
            acknowledge_in(
                node,
                "CloudWatchLogGroupEncrypted",
                "-c kms=aws-owned, the operator's choice: CloudWatch Logs encrypts the group with its own "
                "keys; the default deploy uses the stack's customer-managed key.",
                packs=(HIPAA, NIST),
            )

    @staticmethod
    def _only_the_stack_reads_and_writes(table: Any, roles: list[iam.Role]) -> None:
        """The table's resource policy: its data to the stack's roles only, whatever IAM grants elsewhere."""
        table.add_to_resource_policy(
            iam.PolicyStatement(
                sid="OnlyTheStackUsesTheData",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=list(TABLE_DATA_ACTIONS),
                resources=["*"],
                conditions={"ArnNotEquals": {"aws:PrincipalArn": [role.role_arn for role in roles]}},
            )
        )

    @staticmethod
    def _only_the_stack_uses_the_queue(queue: Any, roles: list[iam.Role]) -> None:
        """The queue's resource policy: its messages to the stack's roles only.

        An AWS service acting itself is left out of the deny (aws:PrincipalIsAWSService): SQS moving
        a message to the dead-letter queue after maxReceiveCount must never be refused, or a poison
        message would stay on the execution queue. No service has an Allow on these queues anyway.
        """
        queue.add_to_resource_policy(
            iam.PolicyStatement(
                sid="OnlyTheStackUsesTheMessages",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=list(QUEUE_DATA_ACTIONS),
                resources=[queue.queue_arn],
                conditions={
                    "ArnNotEquals": {"aws:PrincipalArn": [role.role_arn for role in roles]},
                    "Bool": {"aws:PrincipalIsAWSService": "false"},
                },
            )
        )

    def _quota_operator_role(self, quotas: Any) -> iam.Role:
        """The role an operator assumes to run `jobsched admin quota` (set, get, list) on AWS.

        Trusted by the account: which of its users and roles may assume it is the account's IAM
        decision (sts:AssumeRole on its ARN, the stack output QuotaOperatorRoleArn). It is the only
        principal the quotas table's resource policy lets write quotas.
        """
        role = iam.Role(
            self,
            "QuotaOperatorRole",
            assumed_by=iam.AccountRootPrincipal(),
            description="jobsched: operators set tenant quotas (jobsched admin quota)",
        )
        # A managed policy, not an inline one: an operator's access is reviewed and versioned as such.
        statements = [iam.PolicyStatement(actions=list(QUOTA_OPERATOR_ACTIONS), resources=[quotas.table_arn])]
        if self.key is not None:  # the table is encrypted under the stack's key
            statements.append(iam.PolicyStatement(actions=list(KEY_USE), resources=[self.key.key_arn]))
        iam.ManagedPolicy(self, "QuotaOperatorPolicy", statements=statements, roles=[role])
        CfnOutput(self, "QuotaOperatorRoleArn", value=role.role_arn)
        return role

    def _shard_guard(self, shard_count: int) -> CustomResource:
        """The custom resource that fails a deploy lowering the shard count (jobsched_infra.shard_guard)."""
        # The guard's log group, function and custom resource, together under one construct.
        scope = Construct(self, "ShardGuard")
        log_group = logs.LogGroup(
            scope, "Logs", retention=logs.RetentionDays.ONE_MONTH, encryption_key=self.key
        )
        function = lambda_.Function(
            scope,
            "Function",
            description="jobsched: refuses a deploy that lowers the shard count",
            runtime=lambda_.Runtime.PYTHON_3_12,
            architecture=lambda_.Architecture.ARM_64,
            handler="index.handler",
            code=lambda_.Code.from_inline(inspect.getsource(shard_guard)),
            timeout=Duration.seconds(30),
            memory_size=128,
            reserved_concurrent_executions=1,  # one deploy at a time
            log_group=log_group,
        )
        assert function.role is not None
        acknowledge(
            function.role,
            "IAM4",
            "AWSLambdaBasicExecutionRole is Lambda's standard logging grant: CloudWatch Logs writes only.",
            finding="Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        )
        acknowledge(function, "L1", "Python 3.12, as every jobsched function.")
        acknowledge(
            function, "LambdaLatestVersion", "Python 3.12, as every jobsched function.", pack=SERVERLESS
        )
        acknowledge_in(
            function,
            "LambdaDLQ",
            "CloudFormation invokes it and waits for its answer; a lost answer fails the deploy.",
            packs=(HIPAA, NIST, SERVERLESS),
        )
        acknowledge_in(
            function,
            "LambdaInsideVPC",
            "It reaches only CloudFormation's presigned S3 URL, over TLS.",
            packs=(HIPAA, NIST),
        )
        acknowledge(
            function,
            "LambdaTracing",
            "A deploy-time check run once per deploy: its trace would show one HTTPS PUT.",
            pack=SERVERLESS,
        )
        guard = CustomResource(
            scope,
            "ShardCount",
            service_token=function.function_arn,
            resource_type="Custom::JobschedShardCount",
            properties={shard_guard.PROPERTY: str(shard_count)},
        )
        cast(CfnResource, guard.node.default_child).override_logical_id("ShardCountGuard")
        self.shard_guard_function = function
        return guard

    @staticmethod
    def _grant_ecs_worker(
        workers: EcsWorkers,
        *,
        tables: dict[Any, tuple[str, ...]],
        queues: tuple[Any, ...],
        workflows: tuple[Any, ...],
        topic_arn: str,
        secrets: SigningSecrets,
    ) -> iam.Role:
        """The ECS worker's task role: exactly the worker function's calls (it runs the same code)."""
        role = workers.task_role
        for table, actions in tables.items():
            role.add_to_policy(iam.PolicyStatement(actions=list(actions), resources=[table.table_arn]))
        role.add_to_policy(iam.PolicyStatement(actions=["sns:Publish"], resources=[topic_arn]))
        for queue in queues:  # retries' wake-ups and hand-backs; it receives from its own (construct)
            queue.grant(role, *SEND)
        for workflow in workflows:
            workflow.grant_start_execution(role)
        role.add_to_policy(
            iam.PolicyStatement(actions=["dynamodb:GetItem"], resources=[secrets.table.table_arn])
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["kms:Decrypt"], resources=[secrets.key.key_arn], conditions=WITH_TENANT_CONTEXT
            )
        )
        for name, value in secrets.environment().items():
            workers.container.add_environment(name, value)
        role.add_to_policy(
            iam.PolicyStatement(actions=["sts:AssumeRole"], resources=[f"arn:{Aws.PARTITION}:iam::*:role/*"])
        )
        acknowledge(
            role,
            "IAM5",
            "As the worker function's: a target's role_arn is the tenant's own role in any account "
            "(its trust policy decides, ExternalId = tenant); workflow executions are named per run.",
            finding="Resource::arn:<AWS::Partition>:iam::*:role/*",
        )
        return role

    @staticmethod
    def _only_the_stack_sends_runs(
        queue: Any, worker_fn: lambda_.Function, senders: list[Any], *, container: Any = None
    ) -> None:
        """A run on the execution queue comes from the stack's own roles, and the worker checks it.

        The queue's policy denies SendMessage to every other principal, whatever it was granted
        elsewhere; the worker runs a message only if its SQS SenderId is a session of one of these
        roles (their RoleIds in JOBSCHED_TRUSTED_SENDERS; jobsched.domain.senders).
        """
        roles = [cast(iam.Role, role) for role in senders]
        queue.add_to_resource_policy(
            iam.PolicyStatement(
                sid="OnlyTheStackSendsRuns",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=["sqs:SendMessage"],
                resources=[queue.queue_arn],
                conditions={"ArnNotEquals": {"aws:PrincipalArn": [role.role_arn for role in roles]}},
            )
        )
        trusted = Fn.join(",", [role.role_id for role in roles])
        if container is not None:  # the ECS worker's queue: its container checks its senders
            container.add_environment(c.TRUSTED_SENDERS_ENV, trusted)
            return
        worker_fn.add_environment(c.TRUSTED_SENDERS_ENV, trusted)


class JobschedStack(Stack):
    """The stack `cdk deploy` ships (infra/app.py): one JobschedScheduler, its props passed through.

    The scheduler's id is "Default", which CDK leaves out of logical ids, so every resource keeps the
    logical id it had when the stack built them itself: an existing deployment updates in place.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        layer_dir: Path | None = None,
        handler_dir: Path | None = None,
        handler_modules: Sequence[str] = (),
        demo_handlers: bool = False,
        shard_count: int = DEFAULT_SHARD_COUNT,
        dispatcher_invocations: int = 1,
        dispatch_pace: int = DEFAULT_DISPATCH_PACE,
        kms_keys: KeyChoice = "customer",
        worker_invocations: int = resources.WORKER_EVENT_SOURCE.max_invocations,
        waf: bool = False,
        fargate_vcpu_quota: int = DEFAULT_FARGATE_VCPU_QUOTA,
        container_task_roles: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.scheduler = JobschedScheduler(
            self,
            "Default",
            layer_dir=layer_dir,
            handler_dir=handler_dir,
            handler_modules=handler_modules,
            demo_handlers=demo_handlers,
            shard_count=shard_count,
            dispatcher_invocations=dispatcher_invocations,
            dispatch_pace=dispatch_pace,
            kms_keys=kms_keys,
            worker_invocations=worker_invocations,
            waf=waf,
            fargate_vcpu_quota=fargate_vcpu_quota,
            container_task_roles=container_task_roles,
        )
        scheduler = self.scheduler
        self.api, self.dispatch, self.workers, self.reconciler = (
            scheduler.api,
            scheduler.dispatch,
            scheduler.workers,
            scheduler.reconciler,
        )
        self.storage, self.queues, self.workflows, self.secrets = (
            scheduler.storage,
            scheduler.queues,
            scheduler.workflows,
            scheduler.secrets,
        )
        self.handlers_layer, self.key = scheduler.handlers_layer, scheduler.key
        self.task_events = scheduler.task_events
        self.ecs = scheduler.ecs
        self.shard_guard, self.shard_guard_function = scheduler.shard_guard, scheduler.shard_guard_function


# The DynamoDB calls jobsched's adapters make. TransactWriteItems is no IAM action of its own.
READ = ("dynamodb:GetItem", "dynamodb:Query")
WRITE = ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem")
# What the tables' resource policies keep to the stack's roles: every data-plane call.
TABLE_DATA_ACTIONS = (
    "dynamodb:GetItem",
    "dynamodb:BatchGetItem",
    "dynamodb:Query",
    "dynamodb:Scan",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:BatchWriteItem",
    "dynamodb:ConditionCheckItem",
    "dynamodb:PartiQLSelect",
    "dynamodb:PartiQLInsert",
    "dynamodb:PartiQLUpdate",
    "dynamodb:PartiQLDelete",
)
SEND = ("sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl")
# What the queues' resource policies keep to the stack's roles: every call on the messages.
QUEUE_DATA_ACTIONS = (
    "sqs:SendMessage",
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibility",
    "sqs:PurgeQueue",
)
# `jobsched admin quota` (jobsched.cli.admin): get and set a tenant's quota, list them all.
QUOTA_OPERATOR_ACTIONS = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Scan")
# What DynamoDB, SQS, SNS and Step Functions call KMS for on a caller's behalf.
KEY_USE = ("kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:DescribeKey")


def new_app(*, outdir: str) -> App:
    """An App as `infra/app.py` runs it: cdk.json's context, and cdk-nag's AwsSolutions checks.

    cdk-nag 3 is a policy-validation plugin: an error-level finding nobody acknowledged
    (jobsched_infra.nag) fails the synth, a warning is printed, and
    `<outdir>/validation-report.json` lists both and every acknowledged finding with its reason.
    """
    app = App(context=cdk_context(), outdir=outdir)
    Validations.of(app).add_plugins(
        *(
            pack(app, verbose=True)
            for pack in (AwsSolutionsChecks, HIPAASecurityChecks, NIST80053R5Checks, ServerlessChecks)
        )
    )
    return app


def template_json(stack: Stack) -> dict[str, Any]:
    """The synthesized CloudFormation template of `stack` as a dict.

    Tables and queues keep their spec's logical id as their CloudFormation logical id, so
    `template_json(stack)["Resources"][spec.logical_id]` is the resource made from `spec`.
    """
    template: dict[str, Any] = Template.from_stack(stack).to_json()
    return template
