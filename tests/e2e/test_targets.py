"""Every target type end to end on the local stack: `POST /api/jobs` to the target receiving the envelope.

One stack (`jobsched local`, what `make run` starts) on an embedded AWS the test owns, so the test
creates the tenant's resources and its IAM role there (moto's STS answers AssumeRole with the
ExternalId; its credentials work against moto). The peers:
- http: a webhook server on loopback (the local stack's AddressPolicy.local() allows http there);
- sqs, sns, eventbridge, stepfunctions: the embedded moto (SNS and EventBridge deliver to an SQS
  queue the test reads; Step Functions executes the state machine);
- lambda: tests/e2e/peers.py's Lambda Invoke server, reached by the worker's boto3 lambda client
  through AWS_ENDPOINT_URL_LAMBDA (moto cannot run a function without Docker);
- python: the handler registry, with a handler that answers what its context says.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from jobsched.local import lambdas
from jobsched.local.aws import EmbeddedAws
from jobsched.local.stack import free_port
from tests.e2e.conftest import Stack, start_stack, stop_stack
from tests.e2e.peers import LambdaPeer, Webhooks

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

TENANT_ID = "targets-e2e"
TENANT = {"X-Tenant": TENANT_ID}
ENVELOPE_KEYS = {"job_id", "run_id", "tenant", "scheduled_for", "attempt", "effect_key", "payload"}

PYTHON_HANDLER = textwrap.dedent(
    """
    from jobsched.domain import times
    from jobsched.handlers import registry

    @registry.handler("e2e.context")
    def context(payload, ctx):
        return {"job_id": ctx.job_id, "run_id": ctx.run_id, "tenant": ctx.tenant,
                "scheduled_for": times.iso(ctx.scheduled_for), "attempt": ctx.attempt,
                "effect_key": ctx.effect_key, "payload": payload}
    """
)
LAMBDA_FUNCTION = textwrap.dedent(
    """
    class InvalidInput(Exception):
        pass

    def lambda_handler(event, context):
        if event["payload"].get("fail"):
            raise InvalidInput("the payload asks for a failure")
        return {"received": event, "function": context.function_name}
    """
)


@dataclass
class World:
    stack: Stack
    aws: EmbeddedAws
    hooks: Webhooks
    lambdas: LambdaPeer
    role_arn: str

    def client(self, service: str) -> Any:
        return boto3.client(service, endpoint_url=self.aws.endpoint_url, region_name="us-east-1")

    def submit(self, target: dict[str, Any], payload: dict[str, Any], **fields: Any) -> str:
        run_at = datetime.now(UTC) + timedelta(seconds=2)
        body = {
            "type": "one_off",
            "run_at": run_at.isoformat(),
            "target": target,
            "payload": payload,
            **fields,
        }
        created = self.stack.post("/api/jobs", body, **TENANT)
        assert created.status_code == 201, created.text
        return str(created.json()["job_id"])

    def finished(self, job_id: str, timeout: float = 60) -> dict[str, Any]:
        """The job's newest run, once it is SUCCEEDED or DEAD_LETTER."""
        job = self.stack.wait_for(
            job_id,
            lambda j: (
                bool(j["recent_executions"])
                and j["recent_executions"][0]["status"] in ("SUCCEEDED", "DEAD_LETTER")
            ),
            timeout=timeout,
            **TENANT,
        )
        run: dict[str, Any] = job["recent_executions"][0]
        return run


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    folder = tmp_path_factory.mktemp("targets")
    (folder / "e2e_context.py").write_text(PYTHON_HANDLER)
    (folder / "functions" / "e2e-fn").mkdir(parents=True)
    (folder / "functions" / "e2e-fn" / "handler.py").write_text(LAMBDA_FUNCTION)
    aws = EmbeddedAws("127.0.0.1", free_port()).start()
    hooks = Webhooks().start()
    own_functions = str(lambdas.functions_dir())  # the stack's own, before the peer points elsewhere
    patch = pytest.MonkeyPatch()
    peer = LambdaPeer(folder / "functions").start(patch)
    iam = boto3.client("iam", endpoint_url=aws.endpoint_url, region_name="us-east-1")
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"AWS": "arn:aws:iam::123456789012:root"},
                "Action": "sts:AssumeRole",
                "Condition": {"StringEquals": {"sts:ExternalId": TENANT_ID}},
            }
        ],
    }
    role = iam.create_role(RoleName="jobsched-target", AssumeRolePolicyDocument=json.dumps(trust))
    stack = start_stack(
        AWS_ENDPOINT_URL=aws.endpoint_url,
        AWS_ENDPOINT_URL_LAMBDA=peer.url,
        JOBSCHED_FUNCTIONS_DIR=own_functions,
        JOBSCHED_HANDLER_MODULES="e2e_context",
        PYTHONPATH=os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]),
        JOBSCHED_TICK_SECONDS="5",
    )
    try:
        yield World(stack, aws, hooks, peer, role["Role"]["Arn"])
    finally:
        stop_stack(stack)
        peer.stop()
        hooks.stop()
        patch.undo()
        aws.stop()


def assert_envelope(
    envelope: dict[str, Any], job_id: str, run: dict[str, Any], payload: dict[str, Any]
) -> None:
    assert set(envelope) == ENVELOPE_KEYS, envelope
    assert envelope["job_id"] == job_id and envelope["run_id"] == run["run_id"]
    assert envelope["tenant"] == TENANT_ID and envelope["effect_key"] == run["run_id"]
    assert envelope["scheduled_for"] == run["scheduled_for"] and envelope["payload"] == payload
    assert envelope["attempt"] == run["attempt"]


def received(poll: Callable[[], list[Any]], timeout: float = 30) -> list[Any]:
    """What poll() answers once it answers something (the peer received it)."""
    deadline = time.monotonic() + timeout
    while True:
        got = poll()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError("the target received nothing")
        time.sleep(0.25)


def queue_messages(sqs: Any, url: str) -> Callable[[], list[Any]]:
    def poll() -> list[Any]:
        return list(sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []))

    return poll


def test_a_python_target_runs_its_registered_handler_with_the_envelope(world: World) -> None:
    # Given a job whose target is a handler of the registry (in its target form, not the shorthand)
    job_id = world.submit({"type": "python", "handler": "e2e.context"}, {"k": "py"})
    # When it runs, then the handler saw the envelope's every field (it answers them as its result)
    run = world.finished(job_id)
    assert run["status"] == "SUCCEEDED", run
    assert_envelope(run["result"], job_id, run, {"k": "py"})


def test_an_http_target_gets_the_signed_envelope_with_its_idempotency_key(world: World) -> None:
    # Given a webhook on loopback that answers 200 with JSON
    world.hooks.scripts["/ok"] = [(200, {"Content-Type": "application/json"}, b'{"thanks": true}')]
    job_id = world.submit({"type": "http", "url": f"{world.hooks.url}/ok"}, {"k": "http"})
    # When the job runs
    run = world.finished(job_id)
    # Then the run SUCCEEDED with the webhook's answer as its result
    assert run["status"] == "SUCCEEDED" and run["result"] == {"thanks": True}, run
    (request,) = world.hooks.at("/ok")
    # And the webhook got the envelope, keyed by the run's effect key, signed with the tenant's secret
    assert_envelope(request.json(), job_id, run, {"k": "http"})
    assert request.headers["Idempotency-Key"] == run["run_id"]
    assert request.headers["X-Jobsched-Run-Id"] == run["run_id"]
    t, v1 = (part.split("=", 1)[1] for part in request.headers["X-Jobsched-Signature"].split(","))
    # (the secret the API answers the tenant: the worker signs with the same one)
    secret = world.stack.get("/api/signing-secret", **TENANT).json()["secret"]
    expected = hmac.new(secret.encode(), f"{t}.".encode() + request.body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(v1, expected)


def test_an_http_503_then_200_succeeds_at_attempt_2_with_the_same_idempotency_key(world: World) -> None:
    # Given a webhook that answers 503 (Retry-After: 1) once, then 200
    world.hooks.scripts["/flaky"] = [(503, {"Retry-After": "1"}, b"busy"), (200, {}, b"ok")]
    backoff = {"initial_seconds": 1, "max_seconds": 5, "jitter": False}
    job_id = world.submit(
        {"type": "http", "url": f"{world.hooks.url}/flaky"}, {}, max_attempts=3, backoff=backoff
    )
    # When it runs, then attempt 1 fails with HTTP503 and attempt 2 succeeds
    run = world.finished(job_id)
    assert run["status"] == "SUCCEEDED" and run["attempt"] == 2, run
    assert [a["error"]["type"] for a in run["attempts"] if a["error"]] == ["HTTP503"], run
    first, second = world.hooks.at("/flaky")
    assert first.json()["attempt"] == 1 and second.json()["attempt"] == 2
    assert first.headers["Idempotency-Key"] == second.headers["Idempotency-Key"] == run["run_id"]


def test_an_http_404_is_dead_lettered_at_once_as_http404_and_a_replay_calls_the_hook_again(
    world: World,
) -> None:
    # Given a webhook that answers 404, and a job that allows 5 attempts
    world.hooks.scripts["/gone"] = [(404, {}, b"no such hook")]
    job_id = world.submit({"type": "http", "url": f"{world.hooks.url}/gone"}, {}, max_attempts=5)
    # When it runs, then its one attempt is dead-lettered with the error type HTTP404
    run = world.finished(job_id)
    assert run["status"] == "DEAD_LETTER" and run["attempt"] == 1, run
    assert run["error"]["type"] == "HTTP404"
    assert len(world.hooks.at("/gone")) == 1
    letters = world.stack.get(f"/api/dead-letter?job_id={job_id}", **TENANT).json()["items"]
    assert [(d["run_id"], d["last_error"].split(":")[0]) for d in letters] == [(run["run_id"], "HTTP404")]
    # When the hook is back and the dead letter is replayed, then the run succeeds, same effect key
    world.hooks.scripts["/gone"] = [(200, {}, b"back")]
    replay = world.stack.post(f"/api/dead-letter/{run['run_id']}/replay", None, **TENANT)
    assert replay.status_code == 202, replay.text
    job = world.stack.wait_for(
        job_id, lambda j: j["recent_executions"][0]["status"] == "SUCCEEDED", timeout=60, **TENANT
    )
    assert job["recent_executions"][0]["result"] == "back"
    assert {r.headers["Idempotency-Key"] for r in world.hooks.at("/gone")} == {run["run_id"]}


def test_a_lambda_target_is_invoked_with_the_envelope_and_its_answer_is_the_result(world: World) -> None:
    # Given a function the Lambda peer serves, invoked sync as the tenant's role
    arn = "arn:aws:lambda:us-east-1:123456789012:function:e2e-fn"
    job_id = world.submit({"type": "lambda", "function_arn": arn, "role_arn": world.role_arn}, {"k": "fn"})
    # When it runs, then the function got the envelope as its event and its answer is the result
    run = world.finished(job_id)
    assert run["status"] == "SUCCEEDED", run
    assert run["result"]["function"] == "e2e-fn"
    assert_envelope(run["result"]["received"], job_id, run, {"k": "fn"})
    assert [(name, kind) for name, kind, event in world.lambdas.invocations if event["job_id"] == job_id] == [
        ("e2e-fn", "RequestResponse")
    ]


def test_a_lambda_function_error_type_named_non_retryable_is_dead_lettered_at_once(world: World) -> None:
    # Given a function that raises InvalidInput, which the job names non-retryable
    arn = "arn:aws:lambda:us-east-1:123456789012:function:e2e-fn"
    job_id = world.submit(
        {"type": "lambda", "function_arn": arn, "role_arn": world.role_arn},
        {"fail": True},
        max_attempts=4,
        non_retryable_errors=["InvalidInput"],
    )
    # When it runs, then its first attempt fails with the function's errorType and is dead-lettered
    run = world.finished(job_id)
    assert run["status"] == "DEAD_LETTER" and run["attempt"] == 1, run
    assert run["error"]["type"] == "InvalidInput"


def test_an_sqs_target_sends_the_envelope_to_the_tenants_queue(world: World) -> None:
    sqs = world.client("sqs")
    url = sqs.create_queue(QueueName="tenant-work")["QueueUrl"]
    job_id = world.submit({"type": "sqs", "queue_url": url, "role_arn": world.role_arn}, {"k": "sqs"})
    run = world.finished(job_id)
    assert run["status"] == "SUCCEEDED" and run["result"]["message_id"], run
    (message,) = received(queue_messages(sqs, url))
    assert_envelope(json.loads(message["Body"]), job_id, run, {"k": "sqs"})


def test_an_sns_target_publishes_the_envelope_to_the_tenants_topic(world: World) -> None:
    sns, sqs = world.client("sns"), world.client("sqs")
    topic = sns.create_topic(Name="tenant-events")["TopicArn"]
    url = sqs.create_queue(QueueName="tenant-sns-sink")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(
        TopicArn=topic, Protocol="sqs", Endpoint=queue_arn, Attributes={"RawMessageDelivery": "true"}
    )
    job_id = world.submit({"type": "sns", "topic_arn": topic, "role_arn": world.role_arn}, {"k": "sns"})
    run = world.finished(job_id)
    assert run["status"] == "SUCCEEDED", run
    (message,) = received(queue_messages(sqs, url))
    assert_envelope(json.loads(message["Body"]), job_id, run, {"k": "sns"})


def test_an_eventbridge_target_puts_one_event_whose_detail_is_the_envelope(world: World) -> None:
    events, sqs = world.client("events"), world.client("sqs")
    events.create_event_bus(Name="tenant-bus")
    url = sqs.create_queue(QueueName="tenant-eb-sink")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name="all", EventBusName="tenant-bus", EventPattern=json.dumps({"source": ["e2e.jobs"]}))
    events.put_targets(Rule="all", EventBusName="tenant-bus", Targets=[{"Id": "q", "Arn": queue_arn}])
    target = {
        "type": "eventbridge",
        "event_bus_name": "tenant-bus",
        "source": "e2e.jobs",
        "detail_type": "job run",
        "role_arn": world.role_arn,
    }
    job_id = world.submit(target, {"k": "eb"})
    run = world.finished(job_id)
    assert run["status"] == "SUCCEEDED", run
    (message,) = received(queue_messages(sqs, url))
    event = json.loads(message["Body"])
    assert event["source"] == "e2e.jobs" and event["detail-type"] == "job run"
    assert_envelope(event["detail"], job_id, run, {"k": "eb"})


def test_a_stepfunctions_target_with_wait_takes_its_executions_outcome(world: World) -> None:
    sfn = world.client("stepfunctions")
    definition = {"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}}
    machine = sfn.create_state_machine(
        name="tenant-etl", definition=json.dumps(definition), roleArn=world.role_arn
    )["stateMachineArn"]
    target = {"type": "stepfunctions", "state_machine_arn": machine, "wait": True, "role_arn": world.role_arn}
    job_id = world.submit(target, {"k": "sfn"}, timeout_seconds=60)
    run = world.finished(job_id)
    # Then the run SUCCEEDED with the execution's output (a Pass state: its input, the envelope)
    assert run["status"] == "SUCCEEDED", run
    assert_envelope(run["result"], job_id, run, {"k": "sfn"})
    (execution,) = sfn.list_executions(stateMachineArn=machine)["executions"]
    assert execution["status"] == "SUCCEEDED" and run["run_id"] in execution["name"]
    described = sfn.describe_execution(executionArn=execution["executionArn"])
    assert_envelope(json.loads(described["input"]), job_id, run, {"k": "sfn"})


def _machine(world: World, name: str, seconds: int) -> str:
    definition = {
        "StartAt": "Work",
        "States": {
            "Work": {"Type": "Wait", "Seconds": seconds, "Next": "Done"},
            "Done": {"Type": "Pass", "End": True},
        },
    }
    sfn = world.client("stepfunctions")
    arn: str = sfn.create_state_machine(name=name, definition=json.dumps(definition), roleArn=world.role_arn)[
        "stateMachineArn"
    ]
    return arn


def test_a_waiting_stepfunctions_run_is_running_until_its_execution_ends(world: World) -> None:
    # Given a state machine that works for 6 s, and a job that waits on it
    machine = _machine(world, "tenant-slow", 6)
    target = {"type": "stepfunctions", "state_machine_arn": machine, "wait": True, "role_arn": world.role_arn}
    job_id = world.submit(target, {"k": "slow"}, timeout_seconds=60)
    # When it runs, then the run is seen RUNNING (the target heartbeats at every poll) ...
    running = world.stack.wait_for(
        job_id,
        lambda j: bool(j["recent_executions"]) and j["recent_executions"][0]["status"] == "RUNNING",
        timeout=30,
        **TENANT,
    )
    assert running["recent_executions"][0]["attempt"] == 1
    # ... and then SUCCEEDED with the execution's output, in one attempt
    run = world.finished(job_id)
    assert run["status"] == "SUCCEEDED" and run["attempt"] == 1, run
    assert_envelope(run["result"], job_id, run, {"k": "slow"})


def test_a_waiting_stepfunctions_run_past_timeout_seconds_fails_and_its_execution_is_stopped(
    world: World,
) -> None:
    # Given a state machine that works for 60 s, and a job that waits at most 4 s, one attempt
    machine = _machine(world, "tenant-stuck", 60)
    target = {"type": "stepfunctions", "state_machine_arn": machine, "wait": True, "role_arn": world.role_arn}
    job_id = world.submit(target, {}, timeout_seconds=4, max_attempts=1)
    # When it runs, then the attempt fails as Timeout and is dead-lettered
    run = world.finished(job_id)
    assert run["status"] == "DEAD_LETTER" and run["error"]["type"] == "Timeout", run
    # And the execution does not run on: it is stopped
    sfn = world.client("stepfunctions")
    stopped = received(
        lambda: [
            e for e in sfn.list_executions(stateMachineArn=machine)["executions"] if e["status"] == "ABORTED"
        ]
    )
    assert len(stopped) == 1 and run["run_id"] in stopped[0]["name"]
