"""The composition root's choices for targets: the address policy (fail-closed) and the signing secret."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from jobsched import constants as c
from jobsched.adapters.memory import MemorySigningSecrets
from jobsched.adapters.targets import AddressPolicy
from jobsched.domain.targets import TargetFailed
from jobsched.settings import Settings
from jobsched.wiring import address_policy, signing_secret_of

BASE = {c.JOBS_TABLE_ENV: "j", c.RUNS_TABLE_ENV: "r", c.EXECUTION_QUEUE_URL_ENV: "q"}


def test_a_deployment_that_names_no_policy_gets_the_strict_one() -> None:
    # Given the environment a deployed function has (no JOBSCHED_TARGET_POLICY)
    settings = Settings.from_env(BASE)
    # Then http targets may reach public https only
    assert address_policy(settings) == AddressPolicy.aws()


def test_only_the_local_stacks_value_opens_loopback_and_plain_http() -> None:
    settings = Settings.from_env({**BASE, c.TARGET_POLICY_ENV: "local"})
    assert address_policy(settings) == AddressPolicy.local()


@pytest.mark.parametrize("value", ["LOCAL", "open", "none"])
def test_an_unknown_policy_stops_the_cold_start_instead_of_guessing(value: str) -> None:
    with pytest.raises(ValidationError):
        Settings.from_env({**BASE, c.TARGET_POLICY_ENV: value})


def test_without_a_signing_secret_store_an_http_attempt_fails_rather_than_sign_with_a_guess() -> None:
    secret = signing_secret_of(None)
    with pytest.raises(TargetFailed) as caught:
        secret("tenant-a")
    assert caught.value.error_type == "SigningSecretMissing"


def test_with_a_store_each_tenant_signs_with_its_own_current_secret() -> None:
    store = MemorySigningSecrets()
    secret = signing_secret_of(store)
    assert secret("a") == store.get("a").secret
    assert secret("a") != secret("b")


def test_container_targets_run_as_local_processes_only_where_the_settings_say_so() -> None:
    from jobsched.handlers import registry
    from jobsched.wiring import target_factory

    # Given a deployment's environment (no JOBSCHED_CONTAINER_RUNNER): Fargate tasks
    deployed = Settings.from_env(BASE)
    assert not target_factory(deployed, registry).local_containers
    # And the local stack's: local processes, a value that survives the trip to a child process
    local = Settings.from_env({**BASE, c.CONTAINER_RUNNER_ENV: "local"})
    assert target_factory(local, registry).local_containers
    assert Settings.from_env(local.as_env()).container_runner == "local"
    with pytest.raises(ValidationError):
        Settings.from_env({**BASE, c.CONTAINER_RUNNER_ENV: "docker"})
