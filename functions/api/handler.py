"""API Lambda: API Gateway REST proxy events -> the jobsched REST resolver."""

from __future__ import annotations

import functools
import os
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from jobsched import constants as c
from jobsched.adapters import idempotency
from jobsched.adapters.logs import CloudWatchRunLogs, CloudWatchTaskLogs
from jobsched.adapters.metrics import EmfMetrics
from jobsched.api import build_app, guard_body
from jobsched.pools import worker_pools
from jobsched.services.runs import LogLinks
from jobsched.settings import Settings
from jobsched.wiring import build

logger = Logger(service="jobsched-api")
metrics = Metrics(namespace="jobsched", service="api")
tracer = Tracer(service="jobsched-api")

services = build(Settings.from_env(), metrics=EmfMetrics(metrics))
_worker_logs = os.environ.get(c.WORKER_LOG_GROUP_ENV, "")
_container_logs = services.settings.ecs_log_group  # container targets' output (awslogs)
_logs_client = functools.cache(lambda: boto3.client("logs"))
# The console link is AWS's; the local stack (an endpoint URL: its embedded AWS) has no console.
_console = bool(_worker_logs) and not os.environ.get(c.AWS_ENDPOINT_URL_ENV)
app = build_app(
    services.job_service,
    services.failures,
    services.schedule,
    idempotency=idempotency.persistence(services.jobs.client, services.settings.jobs_table),
    tenant_source=os.environ.get(c.TENANT_SOURCE_ENV, "iam"),
    signing_secrets=services.signing_secrets,
    logs=LogLinks(_worker_logs, os.environ.get("AWS_REGION", "us-east-1"), _container_logs)
    if _console
    else None,
    # Their one client is made at the first read of a run's log lines, not at every cold start.
    run_logs=CloudWatchRunLogs(_logs_client, _worker_logs) if _worker_logs else None,
    task_logs=CloudWatchTaskLogs(_logs_client, _container_logs) if _container_logs else None,
    pools=worker_pools(services, table=os.environ.get(c.WORKERS_TABLE_ENV, "")),
)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False, capture_error=False)  # payloads stay out of traces
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Answer one REST request."""
    idempotency.CONFIG.register_lambda_context(context)  # an invocation cut off frees its keys
    return guard_body(event) or app.resolve(event, context)
