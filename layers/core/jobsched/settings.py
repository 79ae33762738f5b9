"""Runtime settings, validated once at cold start by one pydantic model."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from jobsched import constants as c
from jobsched import resources
from jobsched.domain.fargate_vcpu import DEFAULT_FARGATE_VCPU_QUOTA


class Settings(BaseModel):
    """What every function needs to find its resources and pace its work."""

    model_config = ConfigDict(frozen=True)

    jobs_table: str
    runs_table: str
    execution_queue_url: str
    # The bad path: the failure workflow, its alert topic, and the execution queue's redrive DLQ.
    failure_workflow_arn: str = ""
    dag_workflow_arn: str = ""
    alert_topic_arn: str = ""
    # Raised alerts, kept for GET /api/alerts (empty: alerts are published only, not kept).
    alerts_table: str = ""
    # Concurrency-key holder sets and daily budgets, and the operator-set quotas (empty: kept in
    # this process only, for tests; quotas then the defaults).
    limits_table: str = ""
    quotas_table: str = ""
    # Fargate vCPU reservations (empty: counted in this process only, for tests), and the account's
    # Fargate On-Demand vCPU quota they are reserved against (jobsched.domain.fargate_vcpu says why 6).
    fargate_vcpu_table: str = ""
    fargate_vcpu_quota: int = Field(default=DEFAULT_FARGATE_VCPU_QUOTA, ge=1, le=100_000)
    execution_dlq_url: str = ""
    shard_count: int = Field(default=8, ge=1, le=1024)
    # How far ahead of now the dispatcher hands ticks to SQS. It must cover one tick interval
    # plus a margin, so a job fires on its second although the dispatcher runs once a minute;
    # SQS caps a message delay at 900 s, which caps the look-ahead.
    lookahead_seconds: int = Field(default=90, ge=1, le=900)
    tick_seconds: int = Field(default=60, ge=1, le=3600)
    # How far ahead a recurring job's ticks are handed over once it is due (0: the look-ahead).
    # A job's due entry moves (one job write, two index writes) once per hand-over, so a longer
    # horizon spreads that cost over more ticks of a frequent job: at 840 s a minute cron moves
    # once per 14 runs. The price: ticks already handed over are checked against the job when
    # they run (cancelled, paused, rescheduled: dropped), so they carry no stale definition, but
    # the queue holds up to a horizon of messages per frequent job. SQS caps it at 900 s.
    handover_horizon_seconds: int = Field(default=0, ge=0, le=900)
    # The lease is the SQS visibility timeout; the worker heartbeats at a third of it.
    lease_seconds: int = Field(default=60, ge=5, le=43_200)
    # Runs of one SQS batch a worker invocation executes at once (1: one after another). Above 1, a
    # slow handler no longer holds up the rest of its batch, and an invocation's billed duration
    # is about its slowest run rather than the sum of its runs. The default is the deployed one.
    worker_concurrency: int = Field(default=resources.WORKER_EVENT_SOURCE.concurrency, ge=1, le=10)
    # Due entries a shard pass hands over per second at most (0: as fast as its calls return). Each
    # moves out of its "<minute>#<shard>" due-index partition, one write unit, and a partition takes
    # 1,000 a second: a burst's shard is paced below that (`jobsched capacity` says how far).
    dispatch_pace: int = Field(default=0, ge=0, le=100_000)
    # Fair hand-over (jobsched.domain.fairness): each due slice leaves by priority, tenants
    # round-robin, each message in its tenant's SQS fair-queue group. Off only for the bench's
    # baseline ("without fairness"); from_env answers True unless JOBSCHED_FAIR_DISPATCH is "false".
    fair_dispatch: bool = True
    handler_modules: tuple[str, ...] = ()
    # Whether the demo.* handlers are registered. True for a Settings built in code (tests, the
    # simulator); from_env answers False unless JOBSCHED_DEMO_HANDLERS is "true" (fail-closed: a
    # deployed stack runs them only when asked, `cdk deploy -c demo_handlers=true`).
    demo_handlers: bool = True
    # The tenants' HTTP signing secrets: their table and the KMS key they are encrypted with.
    signing_secrets_table: str = ""
    signing_key_arn: str = ""
    # Who may put a run on the execution queue: the principal ids (a role's RoleId, a user's
    # UserId) of the stack's own senders, matched against each message's SQS SenderId. The worker
    # entry point refuses to start without them (see jobsched.domain.senders).
    trusted_senders: tuple[str, ...] = ()
    # The http targets' address policy (constants.TARGET_POLICY_ENV): "aws" unless the local stack says so.
    target_policy: Literal["aws", "local"] = "aws"
    # The ECS Fargate worker's queue (jobsched.domain.compute routes long or big runs there; empty:
    # no ECS worker, every run goes to the execution queue), and which worker this process is.
    ecs_queue_url: str = ""
    worker_lane: Literal["lambda", "ecs"] = "lambda"
    # Container targets (jobsched.adapters.targets.ecs): the cluster their tasks run in, its subnets
    # and security groups, and the execution role of the task definitions registered for images.
    # No cluster: an ecs target's attempt fails with TargetUnavailable.
    ecs_cluster: str = ""
    ecs_subnets: tuple[str, ...] = ()
    ecs_security_groups: tuple[str, ...] = ()
    ecs_execution_role_arn: str = ""
    # Where image tasks' output goes (awslogs), and where GET /api/runs/{id}/logs reads it; "": none.
    ecs_log_group: str = ""
    # The ECS worker's own task definition family (its latest revision runs a Python run bigger than
    # the worker's task in a task of its own); "": such a run fails with TargetUnavailable.
    ecs_worker_family: str = ""
    # "local" (the local stack only): container targets run their command as a local process,
    # since there is no Docker to run the image (jobsched.adapters.targets.local_process).
    container_runner: Literal["ecs", "local"] = "ecs"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read the settings from the environment (os.environ unless given)."""
        env = os.environ if env is None else env
        raw: dict[str, object] = {
            "jobs_table": env.get(c.JOBS_TABLE_ENV, ""),
            "runs_table": env.get(c.RUNS_TABLE_ENV, ""),
            "execution_queue_url": env.get(c.EXECUTION_QUEUE_URL_ENV, ""),
        }
        optional = {
            "failure_workflow_arn": c.FAILURE_WORKFLOW_ARN_ENV,
            "dag_workflow_arn": c.DAG_WORKFLOW_ARN_ENV,
            "alert_topic_arn": c.ALERT_TOPIC_ARN_ENV,
            "alerts_table": c.ALERTS_TABLE_ENV,
            "limits_table": c.LIMITS_TABLE_ENV,
            "quotas_table": c.QUOTAS_TABLE_ENV,
            "fargate_vcpu_table": c.FARGATE_VCPU_TABLE_ENV,
            "fargate_vcpu_quota": c.FARGATE_VCPU_QUOTA_ENV,
            "execution_dlq_url": c.EXECUTION_DLQ_URL_ENV,
            "shard_count": c.SHARD_COUNT_ENV,
            "lookahead_seconds": c.LOOKAHEAD_SECONDS_ENV,
            "tick_seconds": c.TICK_SECONDS_ENV,
            "lease_seconds": c.LEASE_SECONDS_ENV,
            "handover_horizon_seconds": c.HANDOVER_HORIZON_SECONDS_ENV,
            "worker_concurrency": c.WORKER_CONCURRENCY_ENV,
            "dispatch_pace": c.DISPATCH_PACE_ENV,
            "signing_secrets_table": c.SIGNING_SECRETS_TABLE_ENV,
            "signing_key_arn": c.SIGNING_KEY_ARN_ENV,
            "target_policy": c.TARGET_POLICY_ENV,
            "ecs_queue_url": c.ECS_QUEUE_URL_ENV,
            "worker_lane": c.WORKER_LANE_ENV,
            "ecs_cluster": c.ECS_CLUSTER_ENV,
            "ecs_execution_role_arn": c.ECS_EXECUTION_ROLE_ARN_ENV,
            "ecs_log_group": c.ECS_LOG_GROUP_ENV,
            "ecs_worker_family": c.ECS_WORKER_FAMILY_ENV,
            "container_runner": c.CONTAINER_RUNNER_ENV,
        }
        raw["demo_handlers"] = env.get(c.DEMO_HANDLERS_ENV, "").strip().lower() == "true"
        raw["fair_dispatch"] = env.get(c.FAIR_DISPATCH_ENV, "").strip().lower() != "false"
        for field, name in optional.items():
            if env.get(name):
                raw[field] = env[name]
        lists = {
            "handler_modules": c.HANDLER_MODULES_ENV,
            "trusted_senders": c.TRUSTED_SENDERS_ENV,
            "ecs_subnets": c.ECS_SUBNETS_ENV,
            "ecs_security_groups": c.ECS_SECURITY_GROUPS_ENV,
        }
        for field, name in lists.items():
            if env.get(name):
                raw[field] = tuple(m.strip() for m in env[name].split(",") if m.strip())
        return cls.model_validate(raw)

    def as_env(self) -> dict[str, str]:
        """The environment that reproduces these settings in another process or Lambda."""
        env = {
            c.JOBS_TABLE_ENV: self.jobs_table,
            c.RUNS_TABLE_ENV: self.runs_table,
            c.EXECUTION_QUEUE_URL_ENV: self.execution_queue_url,
            c.FAILURE_WORKFLOW_ARN_ENV: self.failure_workflow_arn,
            c.DAG_WORKFLOW_ARN_ENV: self.dag_workflow_arn,
            c.ALERT_TOPIC_ARN_ENV: self.alert_topic_arn,
            c.EXECUTION_DLQ_URL_ENV: self.execution_dlq_url,
            c.SHARD_COUNT_ENV: str(self.shard_count),
            c.LOOKAHEAD_SECONDS_ENV: str(self.lookahead_seconds),
            c.TICK_SECONDS_ENV: str(self.tick_seconds),
            c.LEASE_SECONDS_ENV: str(self.lease_seconds),
            c.HANDOVER_HORIZON_SECONDS_ENV: str(self.handover_horizon_seconds),
            c.WORKER_CONCURRENCY_ENV: str(self.worker_concurrency),
            c.DISPATCH_PACE_ENV: str(self.dispatch_pace),
            c.DEMO_HANDLERS_ENV: "true" if self.demo_handlers else "false",
            c.FAIR_DISPATCH_ENV: "true" if self.fair_dispatch else "false",
            c.TARGET_POLICY_ENV: self.target_policy,
            c.FARGATE_VCPU_QUOTA_ENV: str(self.fargate_vcpu_quota),
        }
        if self.alerts_table:
            env[c.ALERTS_TABLE_ENV] = self.alerts_table
        if self.limits_table:
            env[c.LIMITS_TABLE_ENV] = self.limits_table
        if self.quotas_table:
            env[c.QUOTAS_TABLE_ENV] = self.quotas_table
        if self.fargate_vcpu_table:
            env[c.FARGATE_VCPU_TABLE_ENV] = self.fargate_vcpu_table
        if self.ecs_queue_url:
            env[c.ECS_QUEUE_URL_ENV] = self.ecs_queue_url
            env[c.WORKER_LANE_ENV] = self.worker_lane
        if self.signing_secrets_table:
            env[c.SIGNING_SECRETS_TABLE_ENV] = self.signing_secrets_table
            env[c.SIGNING_KEY_ARN_ENV] = self.signing_key_arn
        if self.handler_modules:
            env[c.HANDLER_MODULES_ENV] = ",".join(self.handler_modules)
        if self.trusted_senders:
            env[c.TRUSTED_SENDERS_ENV] = ",".join(self.trusted_senders)
        if self.ecs_cluster:
            env[c.ECS_CLUSTER_ENV] = self.ecs_cluster
            env[c.ECS_SUBNETS_ENV] = ",".join(self.ecs_subnets)
            env[c.ECS_SECURITY_GROUPS_ENV] = ",".join(self.ecs_security_groups)
            env[c.ECS_EXECUTION_ROLE_ARN_ENV] = self.ecs_execution_role_arn
        if self.ecs_log_group:
            env[c.ECS_LOG_GROUP_ENV] = self.ecs_log_group
        if self.ecs_worker_family:
            env[c.ECS_WORKER_FAMILY_ENV] = self.ecs_worker_family
        if self.container_runner != "ecs":
            env[c.CONTAINER_RUNNER_ENV] = self.container_runner
        return env
