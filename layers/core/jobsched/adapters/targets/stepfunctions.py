"""The stepfunctions target: StartExecution of the tenant's state machine, named after the run.

    start <run name> ──ok──> wait=false: success (the execution's ARN is the result)
        │ ExecutionAlreadyExists: this run started it before (a crash, a redelivery): not a 2nd start
        │     RUNNING or SUCCEEDED: adopt it
        │     ended unsuccessfully, with wait: a retry: start <run name>-a<attempt> (the same rule)
        v wait=true
    DescribeExecution every poll_seconds (ctx.heartbeat() between polls) until it ends:
        SUCCEEDED ──> its output is the result
        FAILED / TIMED_OUT / ABORTED ──> TargetFailed(its error, or ExecutionTimedOut / ExecutionAborted)
        timeout_seconds passed ──> StopExecution, TargetFailed(Timeout)

The name is the idempotency key: a worker that dies after the start and the redelivery that
follows produce one execution; the redelivery waits on it. The deadline is the target's own, a
little under the job's timeout_seconds, so the execution is stopped before the run path gives up
on the attempt.

While it waits the run is RUNNING: the worker's heartbeat (every lease/3, and ctx.heartbeat() at
every poll) writes the run's lease row at its first beat and renews it, the message and the job's
slot after. The wait is bounded by the job's timeout_seconds (the worker passes 95% of it here) and,
on AWS, by the worker Lambda's own timeout (50 s, below the queue's 60 s lease). An execution that
outlives the Lambda: the invocation is killed, the heartbeat stops, the lease lapses, and the
redelivered message takes the run over as the next attempt, which finds the execution by its name
(ExecutionAlreadyExists, RUNNING) and waits on it again: one attempt per ~50 s window, so a
wait=true execution must end within about max_attempts x 50 s, else the run is dead-lettered
LeaseExpired while the execution goes on (not stopped). The local stack has no such limit.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from jobsched.adapters.targets._aws import message_of, target_call
from jobsched.adapters.targets.credentials import AssumedRoles
from jobsched.domain.keys import execution_name
from jobsched.domain.targets import StepFunctionsTarget, TargetFailed
from jobsched.handlers import RunContext
from jobsched.ports import Clock, SystemClock

DEFAULT_TIMEOUT_SECONDS = 900
_ENDED_ERRORS = {"TIMED_OUT": "ExecutionTimedOut", "ABORTED": "ExecutionAborted"}


class StepFunctionsStarter:
    """jobsched.ports.Target for a stepfunctions target spec."""

    def __init__(
        self,
        spec: StepFunctionsTarget,
        *,
        roles: AssumedRoles,
        timeout_seconds: float | None = None,
        poll_seconds: float = 2.0,
        clock: Clock | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.spec = spec
        self._roles = roles
        self._timeout = timeout_seconds or DEFAULT_TIMEOUT_SECONDS
        self._poll = poll_seconds
        self._clock = clock or SystemClock()
        self._sleep = sleep

    def invoke(self, envelope: Mapping[str, Any], ctx: RunContext) -> object:
        """Start (or adopt) the run's execution; with wait, take its outcome (see the module doc)."""
        client = self._roles.client("stepfunctions", self.spec.role_arn, str(envelope["tenant"]))
        started = self._clock.now()
        run_id = str(envelope["run_id"])
        arn, status = self._start(client, execution_name(run_id), envelope)
        if status not in (None, "RUNNING", "SUCCEEDED") and self.spec.wait:
            arn, status = self._start(client, execution_name(run_id, f"a{envelope['attempt']}"), envelope)
        if not self.spec.wait:
            return {"execution_arn": arn}
        deadline = started + timedelta(seconds=self._timeout)
        while True:
            with target_call("Step Functions DescribeExecution"):
                described = client.describe_execution(executionArn=arn)
            status = described["status"]
            if status == "SUCCEEDED":
                output = described.get("output")
                return json.loads(output) if output else None
            if status != "RUNNING" and status != "PENDING_REDRIVE":
                error = described.get("error") or _ENDED_ERRORS.get(status, "ExecutionFailed")
                cause = described.get("cause") or status
                raise TargetFailed(f"{arn}: {status}: {cause}"[:2000], error_type=error)
            if self._clock.now() >= deadline:
                with target_call("Step Functions StopExecution"):
                    client.stop_execution(
                        executionArn=arn, error="Timeout", cause=f"jobsched: over {self._timeout:g} s"
                    )
                raise TargetFailed(f"{arn}: stopped after {self._timeout:g} s", error_type="Timeout")
            ctx.heartbeat()
            self._sleep(self._poll)

    def _start(self, client: Any, name: str, envelope: Mapping[str, Any]) -> tuple[str, str | None]:
        """(execution ARN, None when this call started it, else the existing execution's status)."""
        arn = self.spec.state_machine_arn
        try:
            with target_call(f"Step Functions {arn}"):
                answer = client.start_execution(stateMachineArn=arn, name=name, input=message_of(envelope))
            return str(answer["executionArn"]), None
        except TargetFailed as exc:
            if exc.error_type != "ExecutionAlreadyExists":
                raise
        existing = arn.replace(":stateMachine:", ":execution:", 1) + f":{name}"
        with target_call("Step Functions DescribeExecution"):
            status = str(client.describe_execution(executionArn=existing)["status"])
        return existing, status
