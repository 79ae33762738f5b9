"""Every environment variable name the project reads, in one place (explicit arguments beat these)."""

from __future__ import annotations

JOBS_TABLE_ENV = "JOBSCHED_JOBS_TABLE"
RUNS_TABLE_ENV = "JOBSCHED_RUNS_TABLE"
EXECUTION_QUEUE_URL_ENV = "JOBSCHED_EXECUTION_QUEUE_URL"
SHARD_COUNT_ENV = "JOBSCHED_SHARD_COUNT"
LOOKAHEAD_SECONDS_ENV = "JOBSCHED_LOOKAHEAD_SECONDS"
TICK_SECONDS_ENV = "JOBSCHED_TICK_SECONDS"
LEASE_SECONDS_ENV = "JOBSCHED_LEASE_SECONDS"
HANDLER_MODULES_ENV = "JOBSCHED_HANDLER_MODULES"
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
