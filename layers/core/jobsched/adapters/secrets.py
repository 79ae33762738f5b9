"""SigningSecrets on DynamoDB and KMS: each tenant's secret KMS-encrypted in its own table.

One item per tenant, PK "TENANT#<tenant>", SK "SIGNING_SECRET": a GetItem finds it, no index is
needed, and the table holds nothing else, so its grants are exactly the secret's (the api reads
and writes it, the worker only reads it; nothing else in the stack may touch it).

Encryption: KMS Encrypt/Decrypt of the secret itself, with the encryption context
{"tenant": <tenant>}. A secret is 32 random bytes, far below Encrypt's 4 KB, so envelope
encryption (a data key, then local AES) would add a cipher implementation and buy nothing; the
context binds each ciphertext to its tenant (an item copied under another tenant's key fails to
decrypt) and names the tenant in every CloudTrail entry of the key. The key policy (CDK) lets the
api encrypt and decrypt and the worker only decrypt: a worker, which runs user code, can neither
mint nor replace a secret.

First use and rotation, with two callers A and B:

    A: GetItem -> none      B: GetItem -> none
    A: Encrypt(sa), Put if attribute_not_exists(PK) -> applied (version 1)
                            B: Encrypt(sb), Put if attribute_not_exists(PK) -> refused
                            B: GetItem (consistent) -> sa: B answers A's secret, sb is never stored
    rotate: GetItem -> version v; Encrypt(new); Put if version = v -> applied: version v + 1,
            or refused (another rotation won): answer the winner, read afresh

Never logged: this module logs nothing, and botocore's DEBUG logging of request and response
bodies (KMS Plaintext, base64) is redacted by a filter on those two loggers (`_NoPlaintext`).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jobsched.adapters.aws import Refused, aws_call
from jobsched.adapters.dynamodb.codec import enc
from jobsched.domain import times
from jobsched.domain.secrets import SecretRecord, new_secret
from jobsched.errors import StoreError
from jobsched.ports import Clock, SystemClock

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kms import KMSClient

SK = "SIGNING_SECRET"
# How long a worker signs with a secret it decrypted before it decrypts again: a busy tenant's runs
# cost one KMS Decrypt per worker environment per minute, not one per run, and a rotation reaches
# every worker within this long (a receiver accepts the old secret for a minute after rotating).
CURRENT_CACHE_SECONDS = 60.0


class SigningSecretUnavailable(StoreError):
    """The tenant has no secret yet and this process may not create one (the worker: decrypt only)."""


def tenant_pk(tenant: str) -> str:
    """The partition key of a tenant's signing-secret item."""
    return f"TENANT#{tenant}"


class _NoPlaintext(logging.Filter):
    """Redacts botocore's DEBUG records of a request or response body that carries KMS Plaintext."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno <= logging.DEBUG and "Plaintext" in str(record.args):
            record.msg, record.args = "%s", ("(a KMS call's body holding Plaintext: not logged)",)
        return True


_FILTER = _NoPlaintext()
for _name in ("botocore.endpoint", "botocore.parsers"):
    if _FILTER not in logging.getLogger(_name).filters:
        logging.getLogger(_name).addFilter(_FILTER)


@dataclass
class KmsSigningSecrets:
    """jobsched.ports.SigningSecrets: DynamoDB `table`, KMS key `key_id`; `current` cached per process."""

    client: DynamoDBClient
    kms: KMSClient
    table: str
    key_id: str
    clock: Clock = field(default_factory=SystemClock)
    cache_seconds: float = CURRENT_CACHE_SECONDS
    _cache: dict[str, tuple[str, datetime]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def current(self, tenant: str) -> str:
        """The tenant's secret: from the cache if decrypted less than cache_seconds ago, else get()."""
        now = self.clock.now()
        with self._lock:
            cached = self._cache.get(tenant)
        if cached is not None and (now - cached[1]).total_seconds() < self.cache_seconds:
            return cached[0]
        return self.get(tenant).secret

    def get(self, tenant: str) -> SecretRecord:
        """The stored secret, decrypted (consistent read), or a first one created (see the timeline)."""
        record = self._read(tenant)
        if record is not None:
            return record
        created = SecretRecord(new_secret(), self.clock.now())
        if self._put(tenant, created, expected_version=None):
            return self._remember(tenant, created)
        winner = self._read(tenant)
        if winner is None:  # a rotation cannot delete it; only an operator could
            raise StoreError(f"the signing secret of {tenant!r} vanished during its creation")
        return winner

    def rotate(self, tenant: str) -> SecretRecord:
        """A new secret replacing the stored one, version + 1; a concurrent rotation's winner otherwise."""
        old = self._read(tenant)
        record = SecretRecord(new_secret(), self.clock.now(), version=old.version + 1 if old else 1)
        if self._put(tenant, record, expected_version=old.version if old else None):
            return self._remember(tenant, record)
        winner = self._read(tenant)
        if winner is None:
            raise StoreError(f"the signing secret of {tenant!r} vanished during its rotation")
        return winner

    # -- storage ---------------------------------------------------------------------------------
    def _read(self, tenant: str) -> SecretRecord | None:
        with aws_call("DynamoDB"):
            item = self.client.get_item(
                TableName=self.table,
                Key={"PK": enc(tenant_pk(tenant)), "SK": enc(SK)},
                ConsistentRead=True,
            ).get("Item")
        if not item:
            return None
        with aws_call("KMS"):
            plain = self.kms.decrypt(
                CiphertextBlob=item["ciphertext"]["B"],
                EncryptionContext={"tenant": tenant},
                KeyId=self.key_id,
            )["Plaintext"]
        record = SecretRecord(
            plain.decode(), times.parse_stored(item["created_at"]["S"]), version=int(item["version"]["N"])
        )
        return self._remember(tenant, record)

    def _put(self, tenant: str, record: SecretRecord, *, expected_version: int | None) -> bool:
        try:
            with aws_call("KMS"):
                ciphertext = self.kms.encrypt(
                    KeyId=self.key_id,
                    Plaintext=record.secret.encode(),
                    EncryptionContext={"tenant": tenant},
                )["CiphertextBlob"]
        except StoreError as exc:
            if exc.aws_code == "AccessDeniedException":
                raise SigningSecretUnavailable(
                    f"tenant {tenant!r} has no signing secret yet and this function may not create "
                    "one: GET /api/signing-secret creates it",
                    aws_code=exc.aws_code,
                ) from exc
            raise
        # Created: no item yet. Rotated: still the version this caller read (else another won).
        condition: dict[str, Any] = (
            {"ConditionExpression": "attribute_not_exists(PK)"}
            if expected_version is None
            else {
                "ConditionExpression": "version = :v",
                "ExpressionAttributeValues": {":v": enc(expected_version)},
            }
        )
        try:
            with aws_call("DynamoDB"):
                self.client.put_item(
                    TableName=self.table,
                    Item={
                        "PK": enc(tenant_pk(tenant)),
                        "SK": enc(SK),
                        "tenant": enc(tenant),
                        "ciphertext": {"B": ciphertext},
                        "key_id": enc(self.key_id),
                        "created_at": enc(times.stored(record.created_at)),
                        "version": enc(record.version),
                    },
                    **condition,
                )
        except Refused:
            return False
        return True

    def _remember(self, tenant: str, record: SecretRecord) -> SecretRecord:
        with self._lock:
            self._cache[tenant] = (record.secret, self.clock.now())
        return record
