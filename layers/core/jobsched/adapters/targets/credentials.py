"""The tenant's own rights: AWS targets act through the role the tenant names, never the scheduler's.

    (role_arn, tenant) ──cached and fresh?──yes──> its clients
            │ no (absent, or within REFRESH_MARGIN of expiry)
            v
    sts:AssumeRole(RoleArn, ExternalId=<tenant>, RoleSessionName=jobsched-<tenant>)
            │ refused ──> TargetFailed(<AWS code>: AccessDenied when the trust policy does not match)
            v
    cache until Expiration - REFRESH_MARGIN; clients built from these credentials

ExternalId = tenant is AWS's confused-deputy guard: the role's trust policy requires it, so a
tenant who names another tenant's role cannot make jobsched assume it (AssumeRole would pass
the wrong ExternalId). The cache is per (role, tenant): one role trusted for two tenants is two
sessions, each with its own ExternalId. The clock is injected, so expiry is tested without
waiting.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError

from jobsched.domain.targets import TargetFailed
from jobsched.ports import Clock, SystemClock

if TYPE_CHECKING:
    from mypy_boto3_sts import STSClient

REFRESH_MARGIN = timedelta(minutes=5)
SESSION_SECONDS = 3600
# RoleSessionName: 2..64 of [\w+=,.@-].
_SESSION_NAME_CHARS = re.compile(r"[^\w+=,.@-]")


@dataclass(frozen=True, slots=True)
class Credentials:
    """Temporary credentials of one assumed role session."""

    access_key_id: str
    secret_access_key: str
    session_token: str
    expiration: datetime


def session_name(tenant: str) -> str:
    """RoleSessionName for `tenant`: jobsched-<tenant>, cleaned to STS's characters and length."""
    return _SESSION_NAME_CHARS.sub("_", f"jobsched-{tenant}")[:64]


class AssumedRoles:
    """Credentials and boto3 clients per (role, tenant), assumed with ExternalId = tenant."""

    def __init__(
        self,
        sts: STSClient | Callable[[], STSClient],
        *,
        region: str,
        clock: Clock | None = None,
        endpoints: Mapping[str, str] | None = None,
        config: Mapping[str, Config] | None = None,
        duration_seconds: int = SESSION_SECONDS,
    ) -> None:
        """`sts`: a client, or a factory called at the first AssumeRole (a function that never calls an
        AWS target never builds one: a boto3 client costs its cold start tens of ms). `endpoints`:
        service -> endpoint URL (the local stack, tests); `config`: per-service Config."""
        # A boto3 client is not callable, so a callable is the factory.
        self._sts_factory = sts if callable(sts) else None
        self._sts = None if callable(sts) else sts
        self._region = region
        self._clock = clock or SystemClock()
        self._endpoints = dict(endpoints or {})
        self._config = dict(config or {})
        self._duration = duration_seconds
        self._lock = threading.Lock()
        self._sessions: dict[tuple[str, str], Credentials] = {}
        self._clients: dict[tuple[str, str, str, str], Any] = {}
        self.assumed = 0
        """How many AssumeRole calls were made (the cache's effect, for tests and the bench)."""

    def _sts_client(self) -> STSClient:
        with self._lock:
            if self._sts is None:
                assert self._sts_factory is not None
                self._sts = self._sts_factory()
            return self._sts

    def credentials(self, role_arn: str, tenant: str) -> Credentials:
        """Fresh credentials of `role_arn` for `tenant` (cached until REFRESH_MARGIN before expiry)."""
        key = (role_arn, tenant)
        with self._lock:
            cached = self._sessions.get(key)
            if cached is not None and self._clock.now() < cached.expiration - REFRESH_MARGIN:
                return cached
        try:
            answer = self._sts_client().assume_role(
                RoleArn=role_arn,
                RoleSessionName=session_name(tenant),
                ExternalId=tenant,
                DurationSeconds=self._duration,
            )
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", "AssumeRoleFailed"))
            raise TargetFailed(
                f"cannot assume {role_arn} for tenant {tenant}: {code} (does its trust policy allow "
                f"jobsched with sts:ExternalId = {tenant}?)",
                error_type=code,
            ) from exc
        except ParamValidationError as exc:
            # An ExternalId is 2..1224 of [\w+=,.@:/-]: a tenant id outside that cannot use AWS targets.
            raise TargetFailed(f"cannot assume {role_arn}: {exc}", error_type="InvalidParameter") from exc
        except BotoCoreError as exc:
            raise TargetFailed(f"STS is unreachable: {exc}", error_type="AWSUnreachable") from exc
        given = answer["Credentials"]
        fresh = Credentials(
            access_key_id=given["AccessKeyId"],
            secret_access_key=given["SecretAccessKey"],
            session_token=given["SessionToken"],
            expiration=given["Expiration"],
        )
        with self._lock:
            self.assumed += 1
            self._sessions[key] = fresh
        return fresh

    def client(self, service: str, role_arn: str, tenant: str) -> Any:
        """A boto3 client of `service` acting as `role_arn` for `tenant` (one per credentials)."""
        creds = self.credentials(role_arn, tenant)
        key = (service, role_arn, tenant, creds.access_key_id)
        with self._lock:
            client = self._clients.get(key)
        if client is not None:
            return client
        client = boto3.session.Session(
            aws_access_key_id=creds.access_key_id,
            aws_secret_access_key=creds.secret_access_key,
            aws_session_token=creds.session_token,
            region_name=self._region,
        ).client(
            service,  # type: ignore[call-overload]
            endpoint_url=self._endpoints.get(service),
            config=self._config.get(service),
        )
        with self._lock:
            # Clients of expired sessions go: one live client per (service, role, tenant).
            for old in [k for k in self._clients if k[:3] == key[:3]]:
                del self._clients[old]
            self._clients[key] = client
        return client
