"""The worker's run path with a job's target (services/run.py _call): every kind but python goes
through the composition root's TargetSource, on the in-memory fakes, the network blocked."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from jobsched.adapters.memory import MemorySigningSecrets
from jobsched.adapters.targets import AddressPolicy, TargetFactory
from jobsched.domain.commands import CreateJobRequest, PatchJobRequest
from jobsched.domain.models import Backoff
from jobsched.domain.status import RunStatus
from jobsched.domain.targets import FinalTargetFailure, TargetFailed, TargetSpec
from jobsched.errors import ValidationFailed
from jobsched.handlers import RunContext
from jobsched.ports import Target
from jobsched.services.run import Outcome
from tests.unit.services.conftest import T0, World

ROLE = "arn:aws:iam::123456789012:role/jobsched-target"
SQS = {"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/work", "role_arn": ROLE}


@dataclass
class Recorded:
    """A TargetSource whose every adapter records its envelopes and answers with `answer`."""

    answer: Callable[[Mapping[str, Any]], object] = lambda envelope: {"ok": True}
    envelopes: list[dict[str, Any]] = field(default_factory=list)
    specs: list[tuple[TargetSpec, float | None]] = field(default_factory=list)

    def for_spec(
        self, spec: TargetSpec, *, timeout_seconds: float | None = None, resources: Any = None
    ) -> Target:
        self.specs.append((spec, timeout_seconds))
        return _Adapter(self)

    def check(self, spec: TargetSpec) -> None:
        return None


@dataclass
class _Adapter:
    source: Recorded

    def invoke(self, envelope: Mapping[str, Any], ctx: RunContext) -> object:
        self.source.envelopes.append(dict(envelope))
        return self.source.answer(envelope)


@pytest.fixture
def recorded(world: World) -> Recorded:
    source = Recorded()
    world.svc.worker.targets = source
    world.svc.job_service.targets = source
    return source


def submit(world: World, target: dict[str, Any], **fields: Any) -> str:
    request = CreateJobRequest.model_validate(
        {
            "type": "one_off",
            "run_at": T0 + timedelta(seconds=5),
            "target": target,
            "payload": {"n": 1},
            **fields,
        }
    )
    return world.svc.job_service.submit(request, tenant="t", idempotency_key=None).job_id


def failures(world: World) -> list[dict[str, Any]]:
    return list(world.machines.started.values())


def test_a_non_python_target_receives_the_envelope_and_its_answer_is_the_run_result(
    world: World, recorded: Recorded
) -> None:
    # Given a one-off with an sqs target and a 60 s timeout
    job_id = submit(world, SQS, timeout_seconds=60)
    # When its second comes and the worker runs it
    world.clock.advance(5)
    assert world.deliver() == [Outcome.SUCCEEDED]
    # Then the target got the envelope, exactly these keys, and its answer is the recorded result
    (envelope,) = recorded.envelopes
    run = world.runs.get(job_id, T0 + timedelta(seconds=5))
    assert envelope == {
        "job_id": job_id,
        "run_id": run.run_id,
        "tenant": "t",
        "scheduled_for": "2026-11-30T12:00:05.000+00:00",
        "attempt": 1,
        "effect_key": run.run_id,
        "payload": {"n": 1},
    }
    assert run.status == RunStatus.SUCCEEDED and run.result == {"ok": True}
    # And the spec came through for_spec with a deadline under the job's timeout (a waiting target
    # stops before the run path's own Timeout)
    ((spec, timeout),) = recorded.specs
    assert spec.type == "sqs" and timeout is not None and 0 < timeout < 60


def test_a_final_target_failure_is_dead_lettered_at_once_whatever_max_attempts_says(
    world: World, recorded: Recorded
) -> None:
    # Given a target that answers HTTP 404, and a job allowing 5 attempts
    def not_found(envelope: Mapping[str, Any]) -> object:
        raise FinalTargetFailure("HTTP 404: no such hook", error_type="HTTP404")

    recorded.answer = not_found
    job_id = submit(world, SQS, max_attempts=5)
    world.clock.advance(5)
    # When the run fails
    assert world.deliver() == [Outcome.FAILED]
    # Then the failure workflow is told not to retry, and the run's error is the target's type
    (handed,) = failures(world)
    assert handed["retryable"] is False and handed["attempt"] == 1
    run = world.runs.get(job_id, T0 + timedelta(seconds=5))
    assert run.error is not None and run.error.type == "HTTP404"


def test_a_target_error_type_named_in_non_retryable_errors_is_not_retried(
    world: World, recorded: Recorded
) -> None:
    # Given a Lambda-like target failing with its own errorType, which the job names non-retryable
    def lambda_error(envelope: Mapping[str, Any]) -> object:
        raise TargetFailed("arn:...: bad input", error_type="InvalidInputError")

    recorded.answer = lambda_error
    submit(world, SQS, max_attempts=5, non_retryable_errors=["InvalidInputError"])
    world.clock.advance(5)
    assert world.deliver() == [Outcome.FAILED]
    # Then the hand-over says: no retry
    (handed,) = failures(world)
    assert handed["retryable"] is False


@pytest.mark.parametrize(
    ("retry_after", "expected_wait"),
    [
        (120.0, 120),  # longer than the backoff's wait: honoured
        (5000.0, 600),  # past max_seconds: cut to it
        (None, 10),  # no hint: the policy's backoff (jitter off: initial_seconds)
    ],
    ids=["honoured", "capped-at-max_seconds", "no-hint"],
)
def test_a_retry_after_hint_sets_the_re_arm_wait_within_the_backoff_bounds(
    world: World, recorded: Recorded, retry_after: float | None, expected_wait: int
) -> None:
    # Given a target answering 429 with Retry-After, and a backoff of 10 s up to 600 s, no jitter
    def throttled(envelope: Mapping[str, Any]) -> object:
        raise TargetFailed("HTTP 429: slow down", error_type="HTTP429", retry_after=retry_after)

    recorded.answer = throttled
    backoff = Backoff(initial_seconds=10, max_seconds=600, jitter=False)
    submit(world, SQS, max_attempts=3, backoff=backoff.model_dump())
    world.clock.advance(5)
    assert world.deliver() == [Outcome.FAILED]
    # Then the failure workflow re-arms after the hint, bounded by max_seconds
    (handed,) = failures(world)
    assert handed["retryable"] is True and handed["wait_seconds"] == expected_wait


def test_an_aws_target_in_a_process_without_sts_fails_its_attempt_visibly(world: World) -> None:
    # Given the in-memory composition (no STS client: no assumed roles)
    job_id = submit(world, SQS)
    world.clock.advance(5)
    # When the run is attempted, then it fails as TargetUnavailable: nothing acts with the process's rights
    assert world.deliver() == [Outcome.FAILED]
    run = world.runs.get(job_id, T0 + timedelta(seconds=5))
    assert run.error is not None and run.error.type == "TargetUnavailable"


def resolving(mapping: dict[str, list[str]]) -> Callable[[str, int], list[str]]:
    def resolve(host: str, port: int) -> list[str]:
        if host not in mapping:
            raise OSError(f"{host}: no such name")
        return mapping[host]

    return resolve


@pytest.mark.parametrize(
    ("policy", "url", "refused"),
    [
        (AddressPolicy.aws(), "https://hooks.example.test/x", True),  # resolves to 169.254.169.254
        (AddressPolicy.local(), "https://hooks.example.test/x", True),
        (AddressPolicy.aws(), "https://private.example.test/x", True),  # resolves to 10.1.2.3
        (AddressPolicy.local(), "https://private.example.test/x", False),
        (AddressPolicy.aws(), "https://public.example.test/x", False),
        (AddressPolicy.aws(), "https://unknown.example.test/x", False),  # no answer yet: checked per call
        (AddressPolicy.aws(), "http://public.example.test/x", True),  # plain http
        (AddressPolicy.local(), "http://127.0.0.1:9/x", False),
    ],
)
def test_an_http_target_is_vetted_at_create_under_the_deployments_address_policy(
    world: World, policy: AddressPolicy, url: str, refused: bool
) -> None:
    # Given the deployment's policy and a resolver
    world.svc.job_service.targets = TargetFactory(
        handlers=world.handlers,
        roles=None,
        signing_secret=lambda tenant: "s",
        policy=policy,
        resolve=resolving(
            {
                "hooks.example.test": ["93.184.215.14", "169.254.169.254"],
                "private.example.test": ["10.1.2.3"],
                "public.example.test": ["93.184.215.14"],
            }
        ),
    )
    # When a job names the URL, then it is refused with a 400 naming target.url, nothing written
    before = len(world.jobs.jobs)
    if refused:
        with pytest.raises(ValidationFailed) as caught:
            submit(world, {"type": "http", "url": url})
        assert caught.value.field == "target.url" and caught.value.status == 400
        assert len(world.jobs.jobs) == before
    else:
        submit(world, {"type": "http", "url": url})
        assert len(world.jobs.jobs) == before + 1


def test_a_patch_to_a_refused_address_changes_nothing(world: World, recorded: Recorded) -> None:
    # Given a job with an sqs target, and the strict policy with a name that resolves to metadata
    job_id = submit(world, SQS)
    world.svc.job_service.targets = TargetFactory(
        handlers=world.handlers,
        roles=None,
        signing_secret=lambda tenant: "s",
        policy=AddressPolicy.aws(),
        resolve=resolving({"evil.example.test": ["169.254.169.254"]}),
    )
    before = world.jobs.get_job(job_id)
    # When a PATCH points it at that name
    patch = PatchJobRequest.model_validate({"target": {"type": "http", "url": "https://evil.example.test/"}})
    with pytest.raises(ValidationFailed) as caught:
        world.svc.schedule.edit(job_id, patch, tenant="t")
    # Then it is a 400 naming target.url and the job is as it was
    assert caught.value.field == "target.url"
    assert world.jobs.get_job(job_id) == before


def test_creating_an_http_job_gives_its_tenant_a_signing_secret_the_worker_can_then_read(
    world: World, recorded: Recorded
) -> None:
    # Given a signing-secret store, and a tenant that never asked for its secret (on AWS the worker
    # may only decrypt a secret, never create one)
    secrets = MemorySigningSecrets()
    world.svc.job_service.signing_secrets = secrets
    # When the tenant creates its first http job
    submit(world, {"type": "http", "url": "https://hooks.example.com/run"})
    # Then its secret exists before any run, and it is the one the API answers
    assert "t" in secrets.tenants()


def test_a_python_job_creates_no_signing_secret(world: World, recorded: Recorded) -> None:
    secrets = MemorySigningSecrets()
    world.svc.job_service.signing_secrets = secrets
    submit(world, {"type": "python", "handler": "demo.echo"})
    assert secrets.tenants() == set()
