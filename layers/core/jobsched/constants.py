"""Every environment variable name the project reads, in one place (explicit arguments beat these)."""

from __future__ import annotations

JOBS_TABLE_ENV = "JOBSCHED_JOBS_TABLE"
RUNS_TABLE_ENV = "JOBSCHED_RUNS_TABLE"
EXECUTION_QUEUE_URL_ENV = "JOBSCHED_EXECUTION_QUEUE_URL"
EXECUTION_DLQ_URL_ENV = "JOBSCHED_EXECUTION_DLQ_URL"
# The ECS Fargate worker's queue, and which worker a process is ("lambda" unless "ecs").
ECS_QUEUE_URL_ENV = "JOBSCHED_ECS_QUEUE_URL"
WORKER_LANE_ENV = "JOBSCHED_WORKER_LANE"
# The ECS worker's receive wait (SQS long poll, 20 s unless set: the local stack's embedded AWS serves
# one request at a time, so it polls short) and its SIGTERM grace for runs in progress.
ECS_POLL_SECONDS_ENV = "JOBSCHED_ECS_POLL_SECONDS"
ECS_GRACE_SECONDS_ENV = "JOBSCHED_ECS_GRACE_SECONDS"
# The local stack's pid, given to the ECS worker it starts: the child stops when its parent is gone.
ECS_PARENT_PID_ENV = "JOBSCHED_ECS_PARENT_PID"
# The local stack's Lambda worker timeout (resources.WORKER_TIMEOUT_SECONDS unless set: tests shorten it).
LOCAL_LAMBDA_TIMEOUT_ENV = "JOBSCHED_LOCAL_LAMBDA_TIMEOUT_SECONDS"
FAILURE_WORKFLOW_ARN_ENV = "JOBSCHED_FAILURE_WORKFLOW_ARN"
DAG_WORKFLOW_ARN_ENV = "JOBSCHED_DAG_WORKFLOW_ARN"
ALERT_TOPIC_ARN_ENV = "JOBSCHED_ALERT_TOPIC_ARN"
ALERTS_TABLE_ENV = "JOBSCHED_ALERTS_TABLE"
LIMITS_TABLE_ENV = "JOBSCHED_LIMITS_TABLE"
FARGATE_VCPU_TABLE_ENV = "JOBSCHED_FARGATE_VCPU_TABLE"
FARGATE_VCPU_QUOTA_ENV = "JOBSCHED_FARGATE_VCPU_QUOTA"
# Where container targets' Fargate tasks run (jobsched.adapters.targets.ecs).
ECS_CLUSTER_ENV = "JOBSCHED_ECS_CLUSTER"
ECS_SUBNETS_ENV = "JOBSCHED_ECS_SUBNETS"
ECS_SECURITY_GROUPS_ENV = "JOBSCHED_ECS_SECURITY_GROUPS"
ECS_EXECUTION_ROLE_ARN_ENV = "JOBSCHED_ECS_EXECUTION_ROLE_ARN"
# The log group of container targets' output (tasks of the task definitions jobsched registers for
# images): the ECS worker writes it into them, the API reads it back (GET /api/runs/{id}/logs).
ECS_LOG_GROUP_ENV = "JOBSCHED_ECS_LOG_GROUP"
# The ECS worker's own task definition family: a Python run bigger than its task runs in a task of
# this definition of its own, at its placed size (jobsched.adapters.targets.TargetFactory.for_worker_task).
ECS_WORKER_FAMILY_ENV = "JOBSCHED_ECS_WORKER_FAMILY"
# "local": container targets run their command as a local process (the local stack: no Docker);
# unset or "ecs": a Fargate task in ECS_CLUSTER_ENV.
CONTAINER_RUNNER_ENV = "JOBSCHED_CONTAINER_RUNNER"
QUOTAS_TABLE_ENV = "JOBSCHED_QUOTAS_TABLE"
WORKERS_TABLE_ENV = "JOBSCHED_WORKERS_TABLE"
SHARD_COUNT_ENV = "JOBSCHED_SHARD_COUNT"
LOOKAHEAD_SECONDS_ENV = "JOBSCHED_LOOKAHEAD_SECONDS"
TICK_SECONDS_ENV = "JOBSCHED_TICK_SECONDS"
LEASE_SECONDS_ENV = "JOBSCHED_LEASE_SECONDS"
HANDOVER_HORIZON_SECONDS_ENV = "JOBSCHED_HANDOVER_HORIZON_SECONDS"
WORKER_CONCURRENCY_ENV = "JOBSCHED_WORKER_CONCURRENCY"
DISPATCH_PACE_ENV = "JOBSCHED_DISPATCH_PACE"
# "false": no fair hand-over (arrival order, no MessageGroupId): the bench's baseline only.
FAIR_DISPATCH_ENV = "JOBSCHED_FAIR_DISPATCH"
HANDLER_MODULES_ENV = "JOBSCHED_HANDLER_MODULES"
# "true" registers the demo.* handlers; unset or anything else leaves them out (fail-closed: CDK
# sets it from `-c demo_handlers`, false by default; the local stack sets it true).
DEMO_HANDLERS_ENV = "JOBSCHED_DEMO_HANDLERS"
SIGNING_SECRETS_TABLE_ENV = "JOBSCHED_SIGNING_SECRETS_TABLE"
SIGNING_KEY_ARN_ENV = "JOBSCHED_SIGNING_KEY_ARN"
TRUSTED_SENDERS_ENV = "JOBSCHED_TRUSTED_SENDERS"
API_PORT_ENV = "JOBSCHED_API_PORT"
API_URL_ENV = "JOBSCHED_API_URL"
RESOURCE_PREFIX_ENV = "JOBSCHED_RESOURCE_PREFIX"
AWS_ENDPOINT_URL_ENV = "AWS_ENDPOINT_URL"

DEFAULT_API_PORT = 8080
DEFAULT_TENANT = "default"
# The header a local caller names its tenant with; on AWS the IAM principal decides instead.
TENANT_HEADER = "X-Tenant"
IDEMPOTENCY_HEADER = "Idempotency-Key"
# Where the API takes the caller's tenant from: "iam" (the SigV4 principal in the request
# context, what CDK deploys) or "header" (X-Tenant, for the local stack only).
TENANT_SOURCE_ENV = "JOBSCHED_TENANT_SOURCE"
# Which destinations an http target may reach: "aws" (public https only, the default: anything
# else, or nothing, is the strict policy) or "local" (also http and loopback/private addresses: the
# local stack sets it). See jobsched.adapters.targets.ssrf.AddressPolicy.
TARGET_POLICY_ENV = "JOBSCHED_TARGET_POLICY"
# The worker's log group, which GET /api/runs/{id} links to (filtered by the run id); unset: no link.
WORKER_LOG_GROUP_ENV = "JOBSCHED_WORKER_LOG_GROUP"
