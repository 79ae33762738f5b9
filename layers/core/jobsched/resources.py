"""One definition of every AWS resource's shape, read by both the CDK stack and the local stack.

CDK (infra/jobsched_infra/constructs) turns these specs into CloudFormation; the local stack
(jobsched.local.aws) creates the same tables, indexes and queues through boto3 from them, and a
test compares the two, so the emulation cannot drift from what `cdk deploy` ships.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kms import KMSClient
    from mypy_boto3_logs import CloudWatchLogsClient
    from mypy_boto3_sns import SNSClient
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient


@dataclass(frozen=True, slots=True)
class IndexSpec:
    """A global secondary index: string keys, INCLUDE projection of the listed attributes."""

    name: str
    partition_key: str
    sort_key: str
    non_key_attributes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LocalIndexSpec:
    """A local secondary index: the table's partition key, another string sort key, ALL projected."""

    name: str
    sort_key: str


@dataclass(frozen=True, slots=True)
class TableSpec:
    """A DynamoDB table on demand with string PK/SK keys."""

    logical_id: str
    suffix: str
    partition_key: str = "PK"
    sort_key: str = "SK"
    indexes: tuple[IndexSpec, ...] = ()
    ttl_attribute: str | None = None
    local_indexes: tuple[LocalIndexSpec, ...] = ()


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """An SQS standard queue; `redrive_to` names the dead-letter queue spec after max_receive_count."""

    logical_id: str
    suffix: str
    visibility_timeout_seconds: int
    retention_seconds: int
    redrive_to: str | None = None
    max_receive_count: int = 0
    tags: dict[str, str] = field(default_factory=dict)


# The due index. Its partition key is "<minute bucket>#<shard>" so a hot minute spreads over
# `shard_count` index partitions, and its sort key is next_run_at so a shard's bucket is one
# range read, oldest first. Only a job with a pending tick carries the two attributes, so the
# index is sparse: it holds waiting work, never history or finished jobs. The projection holds
# exactly what the dispatcher needs to compute ticks, so it never reads the job item itself;
# attributes that change on every run (leases, counters) stay out of it, so those writes are not
# billed a second time for the index.
DUE_INDEX = IndexSpec(
    name="due",
    partition_key="due_key",
    sort_key="next_run_at",
    non_key_attributes=(
        "job_id",
        "tenant",
        "type",
        "cron_expr",
        "timezone",
        "run_at",
        "status",
        "policy",
        "dispatched",
        "lane",  # "ecs" for the ECS worker's jobs, absent for the Lambda worker's (codec.job_items)
        # A job's alert policy (stored only when set): a tick of a job alerting on "late" goes out
        # with its LateWatch (services/late.py) without the pass reading the job item.
        "alerts",
    ),
)

# The listing (GET /api/jobs): a tenant's jobs, newest first. Partition: the job's `tenant`, sort
# key: its `created_at` (stored form, time-ordered), two attributes every job item has already, so
# the index costs the job item no byte (every byte is billed again on each hot write of it). Only
# job items carry both (idempotency records have no tenant, leases neither): one range read per
# page, against the caller's jobs only, never a Scan. The projection holds what the listing filters
# on and nothing a tick or a run writes (no next_run_at, markers, counters), so a run never rewrites
# this index; the page's job items are then read in one BatchGetItem. A tenant is one index
# partition: plenty for listing pages, far below a partition's 3,000 RCU.
# `pack_count`: a packed batch's cursor item (jobsched.domain.packs) stands for that many jobs.
LISTING_ATTRIBUTES = ("job_id", "status", "type", "name", "tags", "target_type", "pack_count")
TENANT_JOBS_INDEX = IndexSpec(
    name="tenant_jobs", partition_key="tenant", sort_key="created_at", non_key_attributes=LISTING_ATTRIBUTES
)
# The listing by next run: the same partition, sorted by the pending tick. Sparse: a job without a
# pending tick (finished, cancelled, paused, dependent) is not in it. The price: every tick moves a
# job's next_run_at, a key of this index, which DynamoDB bills as a delete plus a put here (2 WRU
# more per tick, at this small projection).
TENANT_NEXT_RUN_INDEX = IndexSpec(
    name="tenant_next_run",
    partition_key="tenant",
    sort_key="next_run_at",
    non_key_attributes=LISTING_ATTRIBUTES,
)

# Jobs, idempotency records and shard leases. Runs live in their own table (below), an
# improvement on the one-table sketch: run history grows without bound, and keeping it apart
# means nothing the dispatcher or the API's job lookups touch grows with it (moto also scans a
# whole table per Query, so locally this keeps dispatch fast), and history gets its own TTL.
JOBS_TABLE = TableSpec(
    logical_id="JobsTable",
    suffix="jobs",
    indexes=(DUE_INDEX, TENANT_JOBS_INDEX, TENANT_NEXT_RUN_INDEX),
    ttl_attribute="expires_at",
)

# The dead-letter list: a sparse index of the runs that reached DEAD_LETTER, per tenant, newest
# first ("<dead_at>#<run_id>" sorts by time and stays unique). A replay removes the two keys, so
# the index holds exactly what an operator has to look at.
DEAD_LETTER_INDEX = IndexSpec(
    name="dead_letter",
    partition_key="dl_key",
    sort_key="dl_sk",
    non_key_attributes=(
        "job_id",
        "run_id",
        "scheduled_for",
        "attempt",
        "error_type",
        "error_message",
        "dead_at",
    ),
)

# Runs: PK "JOB#<job_id>", SK "RUN#<scheduled_for>": the conditional put on this key is the
# "one run per firing" guarantee, and history is a descending range read on the partition.
RUNS_TABLE = TableSpec(
    logical_id="RunsTable", suffix="runs", indexes=(DEAD_LETTER_INDEX,), ttl_attribute="expires_at"
)

EXECUTION_DLQ = QueueSpec(
    logical_id="ExecutionDeadLetterQueue",
    suffix="execution-dlq",
    visibility_timeout_seconds=60,
    retention_seconds=14 * 24 * 3600,
)
# A run's lease: the execution queue's visibility timeout.
LEASE_SECONDS = 60
# A worker invocation's timeout: below the lease, so a worker is dead before its lease runs out.
WORKER_TIMEOUT_SECONDS = 50
# The worker function's memory. With its timeout, what a Lambda-routed run may need at most
# (jobsched.domain.compute places a job that needs more on ECS Fargate); CDK deploys it so.
WORKER_MEMORY_MIB = 256
# The ECS Fargate worker's task size (its task definition, infra/jobsched_infra/constructs/ecs.py).
ECS_WORKER_CPU = 1024
ECS_WORKER_MEMORY_MIB = 2048


@dataclass(frozen=True, slots=True)
class ReceiveBudget:
    """The receives of a run's message: those a run may use up before it ever runs, and poison's.

    SQS counts every receive, and redrives a message to the DLQ (where it is dead-lettered as
    PoisonMessage) after maxReceiveCount of them. A run that waits or is throttled is received
    without running, so the count must cover every such receive on top of the few that make a
    message poison, or a run that never ran is dead-lettered.
    """

    poison: int
    """Receives that each killed or timed out a worker: after these, the message is poison."""
    throttles: int
    """Receives a throttled invocation hands back (AWS's guidance for a Lambda mapping: 5)."""
    overlap_waits: int
    """Receives of a tick waiting behind the job's holder, a lease apart, until the slot frees."""
    wake_retries: int
    """Receives of a tick that woke the buffered tick ahead of it and looks again until it holds."""
    early: int
    """The receive that finds a paused job's tick early and leaves it queued until its second."""

    @property
    def max_receive_count(self) -> int:
        return self.poison + self.throttles + self.overlap_waits + self.wake_retries + self.early


# The arithmetic (services/run.py names the waits; a test recomputes it from there):
# - overlap waits: a tick that finds the slot held is left to come back a lease (60 s) later. On
#   Lambda a holder runs at most the worker timeout (50 s); one that died lets its hold lapse
#   within the hold (lease / 2 = 30 s, renewed by the heartbeat while it lives). The slot is free at
#   most 50 + 30 = 80 s after the waiter's first receive: ceil(80 / 60) = 2 receives wait.
#   (A buffer_one tick sleeps longer than that per receive and is woken by a new message.)
# - wake retries: the woken copy is sent undelayed and picked up by the mapping's next poll; the
#   waker looks again every 2 s (WAKE_RETRY_SECONDS): 10 s of pickup / 2 s = 5 receives.
# - throttles: MaximumConcurrency caps the mapping at the worker's reserved concurrency, so the
#   mapping itself never throttles; 5 cover the account's and the burst limit's throttles.
# - early: 1; poison: 3 workers in a row killed by one message.
# 3 + 5 + 2 + 5 + 1 = 16.
HOLD_SECONDS = LEASE_SECONDS // 2
WAKE_PICKUP_SECONDS = 10
EXECUTION_RECEIVES = ReceiveBudget(
    poison=3,
    throttles=5,
    overlap_waits=-(-(WORKER_TIMEOUT_SECONDS + HOLD_SECONDS) // LEASE_SECONDS),
    wake_retries=WAKE_PICKUP_SECONDS // 2,
    early=1,
)

# The execution queue: its visibility timeout is the run's lease. A message moves to the
# dead-letter queue after max_receive_count receives: EXECUTION_RECEIVES, above.
EXECUTION_QUEUE = QueueSpec(
    logical_id="ExecutionQueue",
    suffix="execution",
    visibility_timeout_seconds=LEASE_SECONDS,
    retention_seconds=4 * 24 * 3600,
    redrive_to=EXECUTION_DLQ.logical_id,
    max_receive_count=EXECUTION_RECEIVES.max_receive_count,
)


@dataclass(frozen=True, slots=True)
class EventSourceSpec:
    """An SQS event-source mapping: a queue feeds a function batches, each batch one invocation."""

    queue: str  # the QueueSpec's logical id
    batch_size: int
    # Runs of one batch the function executes at once (JOBSCHED_WORKER_CONCURRENCY).
    concurrency: int
    # Invocations the mapping runs at once at most (its MaximumConcurrency, 2..1000); the function's
    # reserved concurrency is the same, so the mapping never invokes into a throttle.
    max_invocations: int = 2


# The worker's mapping. A batch's runs all execute at once, so a slow handler delays no other run of
# its batch, and an invocation bills about its slowest run rather than the sum of its runs. CDK
# deploys it (infra/jobsched_infra/stack.py) and the local stack plays it (jobsched.local.stack).
WORKER_EVENT_SOURCE = EventSourceSpec(
    queue=EXECUTION_QUEUE.logical_id, batch_size=10, concurrency=10, max_invocations=50
)
# The reconciler's mapping on the execution queue's dead-letter queue: one poison message at a time.
RECONCILER_EVENT_SOURCE = EventSourceSpec(
    queue=EXECUTION_DLQ.logical_id, batch_size=10, concurrency=1, max_invocations=2
)

TABLES: tuple[TableSpec, ...] = (JOBS_TABLE, RUNS_TABLE)

# Tenants' HTTP signing secrets, KMS-encrypted (jobsched.adapters.secrets): PK "TENANT#<tenant>",
# SK "SIGNING_SECRET", one GetItem away, no index. A table of its own, not an item kind in the jobs
# table, so the grants on it are the secret's alone: the api reads and writes it, the worker reads
# it, the dispatcher, the reconciler and the workflows cannot touch it. Not in TABLES, whose every
# table every function may read and write.
SIGNING_SECRETS_TABLE = TableSpec(logical_id="SigningSecretsTable", suffix="signing-secrets")


# Raised alerts (jobsched.domain.alerts), kept for GET /api/alerts. PK "TENANT#<tenant>": a tenant's
# alerts are one partition, so a listing is one range read of the caller's own and never sees another
# tenant's. SK: the alert id, derived from (run, kind): the conditional put on it is the "at most once
# per (run, kind)" guarantee, whoever raises it again (a redelivery, a retried workflow step, a second
# pass). The listing is newest first by when it was raised, which the id does not sort by, so a local
# index sorts the partition by "<at>#<alert id>" (an LSI reads strongly, costs no second table, and
# the 10 GB item-collection limit of a partition is far off at a month's TTL of ~300-byte items).
# Its own table, not an item kind in the runs table, so no run listing, history read or store scan
# meets an alert, and the grants on it are exactly the publishers' PutItem and the api's Query.
ALERTS_RECENT_INDEX = LocalIndexSpec(name="recent", sort_key="at_key")
ALERTS_TABLE = TableSpec(
    logical_id="AlertsTable",
    suffix="alerts",
    local_indexes=(ALERTS_RECENT_INDEX,),
    ttl_attribute="expires_at",
)

# External workers and their pools' queues (jobsched.adapters.dynamodb.workers has the keys and why).
# A table of its own: workers run the users' code on the users' machines, and the grants on it are
# the api's alone (the worker API is served by the api function); no job listing, due read or run
# history read ever meets a worker item. Not in TABLES, whose every table every function may use.
WORKERS_TABLE = TableSpec(logical_id="WorkersTable", suffix="workers")


# Tenant limits the runs take (jobsched.adapters.dynamodb.limits): PK "TENANT#<tenant>", SK
# "KEY#<key>" per concurrency key (a holder set with expiries, one GetItem and one conditional put
# per run of a job that names a key; jobs without one never touch this table) and SK
# "BUDGET#<name>#<day>" per daily budget (a backfill's ticks), TTL'd. Its own table, so the grants
# on it are the worker's (keys) and the api's (budgets) alone, and no job read ever meets a holder set.
LIMITS_TABLE = TableSpec(logical_id="LimitsTable", suffix="limits", ttl_attribute="expires_at")
# Operator-set tenant quotas: PK "TENANT#<tenant>", SK "QUOTA". Written by an operator's own
# credentials (`jobsched admin quota set`), which no function has: the api only reads it (GetItem,
# cached per warm Lambda), so no tenant request can change a quota.
QUOTAS_TABLE = TableSpec(logical_id="QuotasTable", suffix="quotas")
# Fargate vCPU reservations (jobsched.adapters.dynamodb.fargate_vcpu has the items and why): a counter
# per scope ("SCOPE#account", "SCOPE#tenant#<t>") and a record per reserving run. Its own table, so
# the grants on it are the workers' alone (the Lambda worker's and the ECS task role's) and no
# key-slot or budget write ever contends with a reservation. No TTL: a TTL deletion would drop a
# record without giving its units back (lapsed records are released by the next full reserve).
FARGATE_VCPU_TABLE = TableSpec(logical_id="FargateVcpuTable", suffix="fargate-vcpu")
LIMIT_TABLES: tuple[TableSpec, ...] = (LIMITS_TABLE, QUOTAS_TABLE, FARGATE_VCPU_TABLE)


@dataclass(frozen=True, slots=True)
class KeySpec:
    """A symmetric customer-managed KMS key, with yearly rotation, and its alias "alias/<prefix>-<suffix>"."""

    logical_id: str
    suffix: str


# The key the signing secrets are encrypted with (its own key: its policy names exactly the api,
# which encrypts and decrypts, and the worker, which only decrypts).
SIGNING_KEY = KeySpec(logical_id="SigningSecretsKey", suffix="signing-secrets")
# The ECS Fargate worker's queue (jobsched.ecsworker long-polls it): runs that jobsched.domain.compute
# places on ECS. Its visibility timeout is the lease too, which the worker's heartbeat extends up to the
# job's timeout; it redrives to the execution queue's DLQ after the same receive budget, so its poison
# reaches the same reconciler. Its approximate depth scales the ECS service (to zero when empty).
ECS_QUEUE = QueueSpec(
    logical_id="EcsQueue",
    suffix="ecs",
    visibility_timeout_seconds=LEASE_SECONDS,
    retention_seconds=4 * 24 * 3600,
    redrive_to=EXECUTION_DLQ.logical_id,
    max_receive_count=EXECUTION_RECEIVES.max_receive_count,
)
# Container tasks' stop events that neither EventBridge's retries nor the task_events function's own
# could record (constructs/ecs.py): kept 14 days to look at. No queue redrives to it and nothing
# consumes it: the ECS worker's polls record those runs anyway. The local stack makes it too (it
# receives nothing there: moto emits no ECS events).
TASK_EVENTS_DLQ = QueueSpec(
    logical_id="TaskEventsDeadLetterQueue",
    suffix="task-events-dlq",
    visibility_timeout_seconds=60,
    retention_seconds=14 * 24 * 3600,
)
QUEUES: tuple[QueueSpec, ...] = (EXECUTION_DLQ, EXECUTION_QUEUE, ECS_QUEUE, TASK_EVENTS_DLQ)


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """An SNS topic."""

    logical_id: str
    suffix: str


@dataclass(frozen=True, slots=True)
class StateMachineSpec:
    """A Standard Step Functions state machine; its ASL comes from jobsched.asl."""

    logical_id: str
    suffix: str


ALERT_TOPIC = TopicSpec(logical_id="AlertTopic", suffix="alerts")
FAILURE_WORKFLOW = StateMachineSpec(logical_id="FailureWorkflow", suffix="failure")
DAG_WORKFLOW = StateMachineSpec(logical_id="DagWorkflow", suffix="dag")


@dataclass(frozen=True, slots=True)
class LogGroupSpec:
    """A CloudWatch Logs group: on AWS the function's own (CDK names it), locally `<prefix>-<suffix>`."""

    logical_id: str
    suffix: str
    retention_days: int


# The worker's log lines: every line of a run carries its run_id (GET /api/runs/{id}/logs reads them).
WORKER_LOG_GROUP = LogGroupSpec(logical_id="WorkerLogGroup", suffix="worker-logs", retention_days=30)
# What container targets' tasks print (the awslogs driver of the task definitions jobsched registers
# for images; a stream per task, domain.logs.task_stream): on AWS only, in the ECS construct. The
# local stack runs their commands as local processes whose lines go to the worker's group instead.
CONTAINER_LOG_GROUP = LogGroupSpec(logical_id="ContainerLogGroup", suffix="container-logs", retention_days=30)


def physical_name(
    prefix: str, spec: TableSpec | QueueSpec | TopicSpec | StateMachineSpec | KeySpec | LogGroupSpec
) -> str:
    """The resource name the local stack uses for a spec."""
    return f"{prefix}-{spec.suffix}"


def _table_kwargs(name: str, spec: TableSpec) -> dict[str, Any]:
    attrs = {spec.partition_key, spec.sort_key}
    gsis = []
    for index in spec.indexes:
        attrs |= {index.partition_key, index.sort_key}
        gsis.append(
            {
                "IndexName": index.name,
                "KeySchema": [
                    {"AttributeName": index.partition_key, "KeyType": "HASH"},
                    {"AttributeName": index.sort_key, "KeyType": "RANGE"},
                ],
                "Projection": {
                    "ProjectionType": "INCLUDE",
                    "NonKeyAttributes": list(index.non_key_attributes),
                },
            }
        )
    kwargs: dict[str, Any] = {
        "TableName": name,
        "BillingMode": "PAY_PER_REQUEST",
        "KeySchema": [
            {"AttributeName": spec.partition_key, "KeyType": "HASH"},
            {"AttributeName": spec.sort_key, "KeyType": "RANGE"},
        ],
        "AttributeDefinitions": [{"AttributeName": a, "AttributeType": "S"} for a in sorted(attrs)],
    }
    if gsis:
        kwargs["GlobalSecondaryIndexes"] = gsis
    if spec.local_indexes:
        kwargs["LocalSecondaryIndexes"] = [
            {
                "IndexName": index.name,
                "KeySchema": [
                    {"AttributeName": spec.partition_key, "KeyType": "HASH"},
                    {"AttributeName": index.sort_key, "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
            for index in spec.local_indexes
        ]
        attrs |= {index.sort_key for index in spec.local_indexes}
        kwargs["AttributeDefinitions"] = [{"AttributeName": a, "AttributeType": "S"} for a in sorted(attrs)]
    return kwargs


def create_local_resources(
    *,
    prefix: str,
    dynamodb: DynamoDBClient,
    sqs: SQSClient,
    sns: SNSClient | None = None,
    stepfunctions: SFNClient | None = None,
    kms: KMSClient | None = None,
    logs: CloudWatchLogsClient | None = None,
) -> dict[str, str]:
    """Create (or find) every resource for `prefix`; return {logical_id: name, queue URL or ARN}."""
    out: dict[str, str] = {}
    existing = set(dynamodb.list_tables().get("TableNames", []))
    for table in (*TABLES, SIGNING_SECRETS_TABLE, ALERTS_TABLE, *LIMIT_TABLES, WORKERS_TABLE):
        name = physical_name(prefix, table)
        if name not in existing:
            dynamodb.create_table(**_table_kwargs(name, table))
            if table.ttl_attribute:
                dynamodb.update_time_to_live(
                    TableName=name,
                    TimeToLiveSpecification={"Enabled": True, "AttributeName": table.ttl_attribute},
                )
        out[table.logical_id] = name
    arns: dict[str, str] = {}
    for queue in QUEUES:
        attributes = {
            "VisibilityTimeout": str(queue.visibility_timeout_seconds),
            "MessageRetentionPeriod": str(queue.retention_seconds),
        }
        if queue.redrive_to:
            attributes["RedrivePolicy"] = json.dumps(
                {
                    "deadLetterTargetArn": arns[queue.redrive_to],
                    "maxReceiveCount": str(queue.max_receive_count),
                }
            )
        url = _adopt_queue(sqs, physical_name(prefix, queue), attributes)
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        arns[queue.logical_id] = arn
        out[queue.logical_id] = url
    if kms is not None:
        out[SIGNING_KEY.logical_id] = _adopt_key(kms, f"alias/{physical_name(prefix, SIGNING_KEY)}")
    if sns is not None:
        out[ALERT_TOPIC.logical_id] = sns.create_topic(Name=physical_name(prefix, ALERT_TOPIC))["TopicArn"]
    if stepfunctions is not None:
        from jobsched.asl import dag_definition, failure_definition

        existing_machines = {
            m["name"]: m["stateMachineArn"] for m in stepfunctions.list_state_machines()["stateMachines"]
        }
        for spec, definition in ((FAILURE_WORKFLOW, failure_definition()), (DAG_WORKFLOW, dag_definition())):
            name = physical_name(prefix, spec)
            machine = existing_machines.get(name)
            if machine is None:
                machine = stepfunctions.create_state_machine(
                    name=name,
                    definition=json.dumps(definition),
                    roleArn="arn:aws:iam::000000000000:role/jobsched-local-workflows",
                    type="STANDARD",
                )["stateMachineArn"]
            else:  # adopted: it runs this release's definition, as `cdk deploy` would update it
                stepfunctions.update_state_machine(stateMachineArn=machine, definition=json.dumps(definition))
            out[spec.logical_id] = machine
    if logs is not None:
        group = physical_name(prefix, WORKER_LOG_GROUP)
        if not logs.describe_log_groups(logGroupNamePrefix=group).get("logGroups"):
            logs.create_log_group(logGroupName=group)
            logs.put_retention_policy(logGroupName=group, retentionInDays=WORKER_LOG_GROUP.retention_days)
        out[WORKER_LOG_GROUP.logical_id] = group
    return out


def _adopt_queue(sqs: SQSClient, name: str, attributes: dict[str, str]) -> str:
    """Create the queue, or adopt the one a previous run left (a restart on the same endpoint).

    CreateQueue answers QueueAlreadyExists when the queue is there with other attributes (the local
    stack sets the visibility timeout after creating it), so the queue is found by name and given
    this release's attributes; its messages, the runs in flight, stay where they are.
    """
    try:
        return sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]  # type: ignore[arg-type]
    except sqs.exceptions.QueueNameExists:
        url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
        sqs.set_queue_attributes(QueueUrl=url, Attributes=attributes)  # type: ignore[arg-type]
        return url


def _adopt_key(kms: KMSClient, alias: str) -> str:
    """The ARN of the key behind `alias`, created with it if there is none (a restart keeps its secrets)."""
    try:
        return kms.describe_key(KeyId=alias)["KeyMetadata"]["Arn"]
    except kms.exceptions.NotFoundException:
        arn = kms.create_key(Description="jobsched signing secrets")["KeyMetadata"]["Arn"]
        kms.create_alias(AliasName=alias, TargetKeyId=arn)
        return arn
