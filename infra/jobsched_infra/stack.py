"""The jobsched stack: composes the constructs and wires the (least-privilege) grants between them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import App, Duration, Stack, Validations
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from jobsched import constants as c
from jobsched import resources
from jobsched_infra.constructs.api import Api
from jobsched_infra.constructs.dispatch import Dispatch
from jobsched_infra.constructs.functions import CoreLayer
from jobsched_infra.constructs.queues import Queues
from jobsched_infra.constructs.storage import Storage
from jobsched_infra.constructs.workers import Workers
from jobsched_infra.nag import acknowledge
from jobsched_infra.project import cdk_context

# The dispatcher's tick, in one place: the EventBridge rate and the functions' setting.
TICK = Duration.minutes(1)
# A worker must be dead before its message's lease (the queue's visibility timeout) runs out, or
# a second worker could start the run while the first still writes; SQS event source mappings also
# refuse a function timeout above the visibility timeout. The heartbeat extends live leases only.
WORKER_TIMEOUT = Duration.seconds(50)
DISPATCHER_TIMEOUT = Duration.seconds(60)
API_TIMEOUT = Duration.seconds(10)
DEFAULT_SHARD_COUNT = 16
METRICS_NAMESPACE = "jobsched"

# Powertools reads these (aws_lambda_powertools.shared.constants); jobsched's own are in jobsched.constants.
POWERTOOLS_SERVICE_NAME_ENV = "POWERTOOLS_SERVICE_NAME"
POWERTOOLS_METRICS_NAMESPACE_ENV = "POWERTOOLS_METRICS_NAMESPACE"


class JobschedStack(Stack):
    """Tables and queues from jobsched.resources; api, dispatcher and worker functions; the API; the tick."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        layer_dir: Path,
        shard_count: int = DEFAULT_SHARD_COUNT,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        lease_seconds = resources.EXECUTION_QUEUE.visibility_timeout_seconds
        if WORKER_TIMEOUT.to_seconds() >= lease_seconds:
            raise ValueError(
                f"worker timeout {WORKER_TIMEOUT.to_seconds()} s is not below the {lease_seconds} s lease"
            )

        storage = Storage(self, "Storage")
        queues = Queues(self, "Queues")
        jobs = storage.tables[resources.JOBS_TABLE.logical_id]
        runs = storage.tables[resources.RUNS_TABLE.logical_id]
        execution_queue = queues.queues[resources.EXECUTION_QUEUE.logical_id]
        layer = CoreLayer(self, "CoreLayer", asset_dir=layer_dir)

        shared_env = {
            c.JOBS_TABLE_ENV: jobs.table_name,
            c.RUNS_TABLE_ENV: runs.table_name,
            c.EXECUTION_QUEUE_URL_ENV: execution_queue.queue_url,
            c.SHARD_COUNT_ENV: str(shard_count),
            c.LEASE_SECONDS_ENV: str(lease_seconds),
            c.TICK_SECONDS_ENV: str(int(TICK.to_seconds())),
            POWERTOOLS_METRICS_NAMESPACE_ENV: METRICS_NAMESPACE,
        }

        def env(service: str, **extra: str) -> dict[str, str]:
            return {**shared_env, POWERTOOLS_SERVICE_NAME_ENV: f"jobsched-{service}", **extra}

        self.api = Api(
            self,
            "Api",
            layer=layer,
            timeout=API_TIMEOUT,
            environment=env("api", **{c.TENANT_SOURCE_ENV: "iam"}),
        )
        self.dispatch = Dispatch(
            self,
            "Dispatch",
            layer=layer,
            tick=TICK,
            timeout=DISPATCHER_TIMEOUT,
            environment=env("dispatcher"),
        )
        self.workers = Workers(
            self,
            "Workers",
            layer=layer,
            queue=execution_queue,
            timeout=WORKER_TIMEOUT,
            environment=env("worker"),
        )
        self.storage, self.queues = storage, queues

        # Grants, least privilege: every function reads and writes both tables; the api (which
        # hands a job due within the look-ahead straight to the queue) and the dispatcher send
        # runs; only the worker receives, deletes and extends (heartbeat) messages.
        api_fn, dispatcher_fn, worker_fn = (
            self.api.handler.function,
            self.dispatch.handler.function,
            self.workers.handler.function,
        )
        for fn in (api_fn, dispatcher_fn, worker_fn):
            for table_spec in resources.TABLES:
                storage.tables[table_spec.logical_id].grant_read_write_data(fn)
                if table_spec.indexes:
                    _acknowledge_index_wildcard(fn, table_spec)
        execution_queue.grant_send_messages(api_fn)
        execution_queue.grant_send_messages(dispatcher_fn)
        execution_queue.grant_consume_messages(worker_fn)


def _acknowledge_index_wildcard(fn: lambda_.Function, table: resources.TableSpec) -> None:
    assert fn.role is not None
    acknowledge(
        fn.role,
        "IAM5",
        f"Queries on {table.logical_id}'s secondary indexes ({', '.join(i.name for i in table.indexes)}) "
        "need the table's index/* ARN; it grants nothing beyond this table.",
        finding=f"Resource::<{table.logical_id}.Arn>/index/*",
    )


def new_app(*, outdir: str) -> App:
    """An App as `infra/app.py` runs it: cdk.json's context, and cdk-nag's AwsSolutions checks.

    cdk-nag 3 is a policy-validation plugin: an error-level finding nobody acknowledged
    (jobsched_infra.nag) fails the synth, a warning is printed, and
    `<outdir>/validation-report.json` lists both and every acknowledged finding with its reason.
    """
    app = App(context=cdk_context(), outdir=outdir)
    Validations.of(app).add_plugins(AwsSolutionsChecks(app, verbose=True))
    return app


def template_json(stack: Stack) -> dict[str, Any]:
    """The synthesized CloudFormation template of `stack` as a dict.

    Tables and queues keep their spec's logical id as their CloudFormation logical id, so
    `template_json(stack)["Resources"][spec.logical_id]` is the resource made from `spec`.
    """
    template: dict[str, Any] = Template.from_stack(stack).to_json()
    return template
