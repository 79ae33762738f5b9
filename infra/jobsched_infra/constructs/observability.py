"""The operator's view: a CloudWatch dashboard and the alarms, each alarm notifying the alert topic.

The scheduler's own figures are the EMF metrics of jobsched.telemetry (namespace `jobsched`,
dimension `service` only); the rest are AWS's own: Lambda Errors and Throttles, SQS's depth of the
dead-letter queue, Step Functions ExecutionsFailed and ExecutionsTimedOut.

Alarms, what each means and why its threshold:
- DeadLetterQueueDepth > 0: AWS/SQS ApproximateNumberOfMessagesVisible of the execution queue's
  DLQ (its own metric, not one the reconciler emits: a reconciler that is down emits nothing).
  The reconciler drains the DLQ as messages land, so a visible message is one it cannot process.
- DispatchLag > two ticks: the oldest due entry a pass found not yet handed over. Healthy passes
  hand every tick over ahead of time (lag 0). Missing data breaches: every pass emits the lag,
  even an idle one, so no data means no pass ran.
- FailureRate > FAILURE_RATE_PERCENT: failed attempts over finished attempts (metric math).
- FunctionErrors, FunctionThrottles > 0: summed over the functions (metric math): api, dispatcher,
  worker, reconciler and task_events.
- TaskEventsDeadLetters > 0: AWS/SQS ApproximateNumberOfMessagesVisible of the stopped-task events'
  DLQ (resources.TASK_EVENTS_DLQ): an event neither EventBridge's retries nor the function's own
  could record. The ECS worker's poll records its run anyway (a parked event costs latency, never
  the run), but one there means the function fails: its cause is in the function's logs.
- WorkflowFailures > 0: failed or timed-out executions of the failure and DAG workflows (a dead
  letter is a workflow that succeeded; a failed one is the bad path itself failing).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from jobsched import telemetry

FAILURE_RATE_PERCENT = 10
"""Failed attempts, in percent of finished attempts over FAILURE_RATE_PERIOD, that alarm."""
FAILURE_RATE_PERIOD = Duration.minutes(5)
WINDOW = Duration.minutes(5)
"""The period of the count alarms (errors, throttles, workflow failures) and of the dashboard's graphs."""


class Observability(Construct):
    """The dashboard and the alarms; props keyword-only. `functions`: name (api, dispatcher, worker,
    reconciler, task_events) -> function; `tick`: the dispatcher's tick (the lag alarm is two of them);
    `task_events_dlq`: the stopped-task events' dead-letter queue (None: no alarm on it)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        topic: sns.ITopic,
        functions: Mapping[str, lambda_.IFunction],
        dead_letter_queue: sqs.IQueue,
        workflows: Sequence[sfn.IStateMachine],
        tick: Duration,
        task_events_dlq: sqs.IQueue | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.action = cw_actions.SnsAction(topic)
        worker = "worker"
        lateness = {
            stat: self.metric(telemetry.LATENESS, worker, statistic=stat, period=Duration.minutes(1))
            for stat in ("p50", "p99")
        }
        outcomes = {o: self.metric(telemetry.runs(o), worker) for o in telemetry.OUTCOMES}
        # A dead letter is counted where the failure is handed over: the worker, or the reconciler.
        outcomes["dead_letter"] = cw.MathExpression(
            expression="FILL(w, 0) + FILL(r, 0)",
            using_metrics={
                "w": self.metric(telemetry.runs("dead_letter"), worker),
                "r": self.metric(telemetry.runs("dead_letter"), "reconciler"),
            },
            label="dead_letter",
            period=WINDOW,
        )
        lag = self.metric(telemetry.DISPATCH_LAG, "dispatcher", statistic="Maximum", period=tick)
        depth = dead_letter_queue.metric_approximate_number_of_messages_visible(
            statistic="Maximum", period=Duration.minutes(1)
        )
        errors = self.total(functions, lambda fn: fn.metric_errors(period=WINDOW), "errors")
        throttles = self.total(functions, lambda fn: fn.metric_throttles(period=WINDOW), "throttles")
        failed_flows = self.total_of(
            [
                m
                for w in workflows
                for m in (w.metric_failed(period=WINDOW), w.metric_timed_out(period=WINDOW))
            ],
            "workflow failures",
        )
        failure_rate = cw.MathExpression(
            expression="100 * f / (f + s)",
            using_metrics={
                "f": self.metric(telemetry.runs("failed"), worker, period=FAILURE_RATE_PERIOD),
                "s": self.metric(telemetry.runs("succeeded"), worker, period=FAILURE_RATE_PERIOD),
            },
            label="failed attempts (%)",
            period=FAILURE_RATE_PERIOD,
        )

        self.dashboard = cw.Dashboard(self, "Dashboard", default_interval=Duration.hours(3))
        self.dashboard.add_widgets(
            cw.GraphWidget(title="Run lateness (ms)", left=list(lateness.values()), width=12),
            cw.GraphWidget(title="Runs by outcome", left=list(outcomes.values()), stacked=True, width=12),
        )
        self.dashboard.add_widgets(
            cw.GraphWidget(title="Dispatch lag (ms)", left=[lag], width=8),
            cw.GraphWidget(title="Dead-letter queue depth", left=[depth], width=8),
            cw.GraphWidget(title="Workflow failures", left=[failed_flows], width=8),
        )
        self.dashboard.add_widgets(
            cw.GraphWidget(
                title="Function errors",
                left=[fn.metric_errors(period=WINDOW, label=name) for name, fn in functions.items()],
                width=12,
            ),
            cw.GraphWidget(
                title="Function throttles",
                left=[fn.metric_throttles(period=WINDOW, label=name) for name, fn in functions.items()],
                width=12,
            ),
        )

        above = cw.ComparisonOperator.GREATER_THAN_THRESHOLD
        self.alarms = {
            "DeadLetterQueueDepth": self.alarm(
                "DeadLetterQueueDepth", depth, 0, above, "runs' messages the reconciler cannot process"
            ),
            "DispatchLag": self.alarm(
                "DispatchLag",
                lag,
                2 * tick.to_seconds() * 1000,
                above,
                "a due tick waited more than two ticks to be handed over, or no dispatcher pass ran",
                evaluation_periods=2,
                missing=cw.TreatMissingData.BREACHING,
            ),
            "FailureRate": self.alarm(
                "FailureRate",
                failure_rate,
                FAILURE_RATE_PERCENT,
                above,
                f"over {FAILURE_RATE_PERCENT}% of finished attempts failed",
            ),
            "FunctionErrors": self.alarm("FunctionErrors", errors, 0, above, "a function invocation failed"),
            "FunctionThrottles": self.alarm(
                "FunctionThrottles", throttles, 0, above, "a function invocation was throttled"
            ),
            "WorkflowFailures": self.alarm(
                "WorkflowFailures", failed_flows, 0, above, "a failure or DAG workflow execution failed"
            ),
        }
        if task_events_dlq is not None:
            parked = task_events_dlq.metric_approximate_number_of_messages_visible(
                statistic="Maximum", period=Duration.minutes(1)
            )
            self.dashboard.add_widgets(
                cw.GraphWidget(title="Stopped-task events dead-letter queue depth", left=[parked], width=12)
            )
            self.alarms["TaskEventsDeadLetters"] = self.alarm(
                "TaskEventsDeadLetters",
                parked,
                0,
                above,
                "a stopped ECS task's event could not be recorded (functions/task_events failed)",
            )

    @staticmethod
    def metric(name: str, service: str, *, statistic: str = "Sum", period: Duration = WINDOW) -> cw.Metric:
        """A jobsched EMF metric of one function (its only dimension)."""
        return cw.Metric(
            namespace=telemetry.NAMESPACE,
            metric_name=name,
            dimensions_map={telemetry.SERVICE: service},
            statistic=statistic,
            period=period,
        )

    @classmethod
    def total(
        cls,
        functions: Mapping[str, lambda_.IFunction],
        metric: Callable[[lambda_.IFunction], cw.IMetric],
        label: str,
    ) -> cw.MathExpression:
        """One Lambda metric summed over every function."""
        return cls.total_of([metric(fn) for fn in functions.values()], label)

    @staticmethod
    def total_of(metrics: Sequence[cw.IMetric], label: str) -> cw.MathExpression:
        """The sum of `metrics` (a period without data counts 0)."""
        using = {f"m{i}": m for i, m in enumerate(metrics)}
        return cw.MathExpression(
            expression=" + ".join(f"FILL({k}, 0)" for k in using),
            using_metrics=using,
            label=label,
            period=WINDOW,
        )

    def alarm(
        self,
        construct_id: str,
        metric: cw.IMetric,
        threshold: float,
        comparison: cw.ComparisonOperator,
        description: str,
        *,
        evaluation_periods: int = 1,
        missing: cw.TreatMissingData = cw.TreatMissingData.NOT_BREACHING,
    ) -> cw.Alarm:
        """An alarm on `metric` that notifies the alert topic when it fires."""
        alarm = cw.Alarm(
            self,
            construct_id,
            metric=metric,
            threshold=threshold,
            comparison_operator=comparison,
            evaluation_periods=evaluation_periods,
            treat_missing_data=missing,
            alarm_description=f"jobsched: {description}",
        )
        alarm.add_alarm_action(self.action)
        return alarm
