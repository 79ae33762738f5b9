"""The jobsched stack: composes the constructs and wires the (least-privilege) grants between them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from aws_cdk import App, Duration, Fn, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from jobsched import constants as c
from jobsched import resources
from jobsched_infra.constructs.api import Api
from jobsched_infra.constructs.dispatch import Dispatch
from jobsched_infra.constructs.functions import CoreLayer
from jobsched_infra.constructs.queue_function import QueueFunction
from jobsched_infra.constructs.queues import Queues
from jobsched_infra.constructs.storage import Storage
from jobsched_infra.constructs.workflows import Workflows
from jobsched_infra.nag import acknowledge
from jobsched_infra.project import cdk_context

# The dispatcher's tick, in one place: the EventBridge rate and the functions' setting.
TICK = Duration.minutes(1)
# A worker must be dead before its message's lease (the queue's visibility timeout) runs out, or
# a second worker could start the run while the first still writes (QueueFunction refuses a timeout
# that is not below it). The heartbeat extends live leases only.
WORKER_TIMEOUT = Duration.seconds(50)
DISPATCHER_TIMEOUT = Duration.seconds(60)
API_TIMEOUT = Duration.seconds(10)
# Below the dead-letter queue's visibility timeout, which SQS event source mappings require.
RECONCILER_TIMEOUT = Duration.seconds(30)
DEFAULT_SHARD_COUNT = 16
# A recurring job's ticks go out this far ahead (SQS allows 900 s of delay), so a frequent job's
# due entry moves once per 14 minutes instead of once per tick: the cheapest healthy run.
HANDOVER_HORIZON_SECONDS = 840
# Due entries a shard pass hands over per second at most: 80% of a due-index partition's 1,000 write
# units a second, the partition a burst's entries move out of (`-c dispatch_pace=N`, 0: unpaced).
DEFAULT_DISPATCH_PACE = 800
METRICS_NAMESPACE = "jobsched"

# Powertools reads these (aws_lambda_powertools.shared.constants); jobsched's own are in jobsched.constants.
POWERTOOLS_SERVICE_NAME_ENV = "POWERTOOLS_SERVICE_NAME"
POWERTOOLS_METRICS_NAMESPACE_ENV = "POWERTOOLS_METRICS_NAMESPACE"


class JobschedStack(Stack):
    """Tables, queues, alert topic, failure and DAG workflows (jobsched.resources); 4 functions; API; tick."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        layer_dir: Path,
        shard_count: int = DEFAULT_SHARD_COUNT,
        dispatcher_invocations: int = 1,
        dispatch_pace: int = DEFAULT_DISPATCH_PACE,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        lease_seconds = resources.EXECUTION_QUEUE.visibility_timeout_seconds
        storage = Storage(self, "Storage")
        queues = Queues(self, "Queues")
        jobs = storage.tables[resources.JOBS_TABLE.logical_id]
        runs = storage.tables[resources.RUNS_TABLE.logical_id]
        execution_queue = queues.queues[resources.EXECUTION_QUEUE.logical_id]
        dead_letter_queue = queues.queues[resources.EXECUTION_DLQ.logical_id]
        workflows = Workflows(self, "Workflows")
        topic = workflows.topic
        failure_workflow, dag_workflow = workflows.failure_workflow, workflows.dag_workflow
        layer = CoreLayer(self, "CoreLayer", asset_dir=layer_dir)

        shared_env = {
            c.JOBS_TABLE_ENV: jobs.table_name,
            c.RUNS_TABLE_ENV: runs.table_name,
            c.EXECUTION_QUEUE_URL_ENV: execution_queue.queue_url,
            c.EXECUTION_DLQ_URL_ENV: dead_letter_queue.queue_url,
            c.FAILURE_WORKFLOW_ARN_ENV: failure_workflow.state_machine_arn,
            c.DAG_WORKFLOW_ARN_ENV: dag_workflow.state_machine_arn,
            c.ALERT_TOPIC_ARN_ENV: topic.topic_arn,
            c.SHARD_COUNT_ENV: str(shard_count),
            c.LEASE_SECONDS_ENV: str(lease_seconds),
            c.TICK_SECONDS_ENV: str(int(TICK.to_seconds())),
            c.HANDOVER_HORIZON_SECONDS_ENV: str(HANDOVER_HORIZON_SECONDS),
            c.WORKER_CONCURRENCY_ENV: str(resources.WORKER_EVENT_SOURCE.concurrency),
            c.DISPATCH_PACE_ENV: str(dispatch_pace),
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
            shard_count=shard_count,
            invocations=dispatcher_invocations,
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
            max_batching_window=Duration.seconds(0),
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
        self.storage, self.queues, self.workflows = storage, queues, workflows

        # Grants, least privilege: every function reads and writes both tables; the api (which
        # hands a job due within the look-ahead straight to the queue) and the dispatcher send
        # runs; only the worker receives, deletes and extends (heartbeat) messages (its QueueFunction
        # grants that, as the reconciler's does on the DLQ).
        api_fn, dispatcher_fn, worker_fn, reconciler_fn = (
            self.api.entry_point.function,
            self.dispatch.entry_point.function,
            self.workers.entry_point.function,
            self.reconciler.entry_point.function,
        )
        # GET /api/runs/{id} links a run to the worker's log lines (filtered by the run id).
        api_fn.add_environment(c.WORKER_LOG_GROUP_ENV, self.workers.entry_point.log_group.log_group_name)
        for fn in (api_fn, dispatcher_fn, worker_fn):
            for table_spec in resources.TABLES:
                storage.tables[table_spec.logical_id].grant_read_write_data(fn)
                if table_spec.indexes:
                    _acknowledge_index_wildcard(fn, table_spec)
        execution_queue.grant_send_messages(api_fn)
        execution_queue.grant_send_messages(dispatcher_fn)
        # The worker sends too: the copy that wakes a buffer_one tick sleeping behind the run it held.
        execution_queue.grant_send_messages(worker_fn)

        # The bad path. A worker hands a failed attempt to the workflow, the api starts a replay
        # (and lists dead letters: a Query on the runs table's index, in its read grant above),
        # and the reconciler turns the DLQ's poison messages into dead-lettered runs: it reads the
        # job, moves its run to FAILED and starts the workflow; it never writes a job or sends a run.
        jobs.grant_read_data(reconciler_fn)
        runs.grant_read_write_data(reconciler_fn)
        for table_spec in (resources.JOBS_TABLE, resources.RUNS_TABLE):
            if table_spec.indexes:
                _acknowledge_index_wildcard(reconciler_fn, table_spec)
        for fn in (api_fn, worker_fn, reconciler_fn):
            failure_workflow.grant_start_execution(fn)
        # The good path of a DAG: the DAG workflow counts a run's success into its dependants. The
        # worker starts it when a run succeeds; the api and the reconciler build the same services
        # (jobsched.wiring), whose completion path starts it too. The dispatcher never completes a run.
        for fn in (api_fn, worker_fn, reconciler_fn):
            dag_workflow.grant_start_execution(fn)

        # The failure workflow's role: exactly the three calls its ASL makes, on the concrete resources
        # (the ASL takes their names from the execution input, so no grant can be derived from it).
        # A conditional UpdateItem on a run, and on the job a run's dead letter ends or its replay
        # restores; never on an index, never any other write.
        failure_workflow.add_to_role_policy(
            iam.PolicyStatement(actions=["dynamodb:UpdateItem"], resources=[runs.table_arn, jobs.table_arn])
        )
        execution_queue.grant(failure_workflow, "sqs:SendMessage")
        topic.grant_publish(failure_workflow)  # the AWS-managed key needs no kms grant

        # The DAG workflow's role, likewise exactly its ASL's calls: a conditional UpdateItem (count,
        # release) and a consistent GetItem (recheck, existing run) on the runs table itself, never
        # an index, and SendMessage for the released run. It creates no job and publishes nothing.
        dag_workflow.add_to_role_policy(
            iam.PolicyStatement(
                actions=["dynamodb:UpdateItem", "dynamodb:GetItem"], resources=[runs.table_arn]
            )
        )
        execution_queue.grant(dag_workflow, "sqs:SendMessage")
        self._only_the_stack_sends_runs(
            execution_queue,
            worker_fn,
            [fn.role for fn in (api_fn, dispatcher_fn, worker_fn)]
            + [failure_workflow.role, dag_workflow.role],
        )

    @staticmethod
    def _only_the_stack_sends_runs(queue: Any, worker_fn: lambda_.Function, senders: list[Any]) -> None:
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
        worker_fn.add_environment(c.TRUSTED_SENDERS_ENV, Fn.join(",", [role.role_id for role in roles]))


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
