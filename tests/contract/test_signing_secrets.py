"""The SigningSecrets contract (jobsched.ports): one secret per tenant, created on first use, rotated,
stored encrypted and never logged; on the in-memory fake and on DynamoDB + KMS (moto)."""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from jobsched import resources
from jobsched.adapters.memory import MemorySigningSecrets
from jobsched.adapters.secrets import SK, KmsSigningSecrets, SigningSecretUnavailable, tenant_pk
from jobsched.ports import FakeClock, SigningSecrets
from tests.contract.conftest import T0
from tests.support import CallCounter


def _moto_store(clock: FakeClock, **kwargs: Any) -> KmsSigningSecrets:
    made = resources.create_local_resources(
        prefix="secrets", dynamodb=boto3.client("dynamodb"), sqs=boto3.client("sqs"), kms=boto3.client("kms")
    )
    return KmsSigningSecrets(
        client=boto3.client("dynamodb"),
        kms=boto3.client("kms"),
        table=made[resources.SIGNING_SECRETS_TABLE.logical_id],
        key_id=made[resources.SIGNING_KEY.logical_id],
        clock=clock,
        **kwargs,
    )


@pytest.fixture(params=["memory", "moto"])
def store(request: pytest.FixtureRequest) -> Iterator[SigningSecrets]:
    clock = FakeClock(T0)
    if request.param == "memory":
        yield MemorySigningSecrets(clock=clock)
        return
    with mock_aws():
        yield _moto_store(clock)


def test_a_tenants_first_use_creates_its_secret_and_later_uses_answer_the_same(store: SigningSecrets) -> None:
    first = store.get("t1")

    assert len(first.secret) == 64 and first.created_at == T0 and first.version == 1
    assert store.get("t1") == first
    assert store.current("t1") == first.secret


def test_each_tenant_has_a_secret_of_its_own(store: SigningSecrets) -> None:
    assert store.current("t1") != store.current("t2")


def test_a_rotation_replaces_the_secret_and_every_later_read_answers_the_new_one(
    store: SigningSecrets,
) -> None:
    old = store.get("t1")

    new = store.rotate("t1")

    assert new.secret != old.secret and new.version == old.version + 1
    assert store.get("t1") == new
    assert store.current("t1") == new.secret


def test_a_rotation_before_any_use_creates_the_first_secret(store: SigningSecrets) -> None:
    assert store.rotate("t1") == store.get("t1")


def _one_request_at_a_time(*clients: Any) -> None:
    """moto in-process is not thread-safe (a CI run under load failed inside moto): serve the clients'
    requests one at a time, as moto_server and DynamoDB answer each one atomically. The adapter's own
    steps (read, conditional put, read again) still interleave across the racing threads."""
    lock = threading.Lock()
    for client in clients:
        call = client._make_api_call

        def serialized(*args: Any, _call: Any = call, **kwargs: Any) -> Any:
            with lock:
                return _call(*args, **kwargs)

        client._make_api_call = serialized


def test_concurrent_first_uses_create_one_secret_that_every_caller_answers(store: SigningSecrets) -> None:
    if isinstance(store, KmsSigningSecrets):
        _one_request_at_a_time(store.client, store.kms)
    answers: list[str] = []
    start = threading.Barrier(8)

    def first_use() -> None:
        start.wait()
        answers.append(store.get("t1").secret)

    threads = [threading.Thread(target=first_use) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(answers) == 8 and len(set(answers)) == 1
    assert store.get("t1").secret == answers[0]


def test_neither_get_nor_rotate_logs_the_secret_even_at_debug(
    store: SigningSecrets, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        secrets = [store.get("t1").secret, store.rotate("t1").secret, store.get("t1").secret]

    logged = caplog.text + "".join(str(r.args) for r in caplog.records)
    assert caplog.records or isinstance(store, MemorySigningSecrets)  # moto's calls were captured
    for secret in secrets:
        for form in (secret, base64.b64encode(secret.encode()).decode()):
            assert form not in logged
    assert secrets[0] not in repr(store.get("t1"))


# --- the DynamoDB + KMS adapter --------------------------------------------------------------------


@pytest.fixture
def aws() -> Iterator[None]:
    with mock_aws():
        yield


def test_the_stored_item_holds_only_ciphertext_bound_to_its_tenant(aws: None) -> None:
    store = _moto_store(FakeClock(T0))
    secret = store.current("t1")

    item = boto3.client("dynamodb").get_item(
        TableName=store.table, Key={"PK": {"S": tenant_pk("t1")}, "SK": {"S": SK}}
    )["Item"]

    assert secret not in str(item) and base64.b64encode(secret.encode()).decode() not in str(item)
    kms = boto3.client("kms")
    blob = item["ciphertext"]["B"]
    plain = kms.decrypt(CiphertextBlob=blob, EncryptionContext={"tenant": "t1"})["Plaintext"]
    assert plain == secret.encode()
    with pytest.raises(kms.exceptions.InvalidCiphertextException):
        kms.decrypt(CiphertextBlob=blob, EncryptionContext={"tenant": "t2"})


def test_a_first_use_that_loses_the_race_answers_the_winners_secret_and_stores_nothing_of_its_own(
    aws: None,
) -> None:
    clock = FakeClock(T0)
    a, b = _moto_store(clock), _moto_store(clock)
    won: list[str] = []
    # B has read "no secret" and encrypted its own when A's first use lands, before B's put.
    b.kms.meta.events.register_first(
        "before-call.kms.Encrypt", lambda **_: won.append(a.current("t1")) if not won else None
    )

    assert b.get("t1").secret == won[0]
    assert a.get("t1").secret == won[0] and a.get("t1").version == 1


def test_current_serves_a_worker_from_its_cache_without_kms_until_the_cache_ages_out(aws: None) -> None:
    clock = FakeClock(T0)
    api, worker = _moto_store(clock), _moto_store(clock, cache_seconds=60)
    old = worker.current("t1")
    counter = CallCounter(worker.kms, worker.client)

    new = api.rotate("t1").secret
    clock.advance(59)
    assert worker.current("t1") == old and not counter.calls  # a run costs no KMS call
    clock.advance(1)

    assert worker.current("t1") == new and counter.calls["KMS.Decrypt"] == 1


def test_a_process_that_may_not_encrypt_cannot_create_a_secret_and_says_who_can(aws: None) -> None:
    worker = _moto_store(FakeClock(T0))

    def denied(**_: Any) -> None:
        from botocore.exceptions import ClientError

        raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "Encrypt")

    worker.kms.meta.events.register_first("before-call.kms.Encrypt", denied)

    with pytest.raises(SigningSecretUnavailable, match="GET /api/signing-secret"):
        worker.current("t1")
