"""The STS client of the AWS targets is made at the first AssumeRole, not at every cold start."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from jobsched.adapters.targets import AssumedRoles


class CountingSts:
    """An STS client's assume_role, answering fresh credentials and counting the calls."""

    def __init__(self) -> None:
        self.calls = 0

    def assume_role(self, **kwargs: Any) -> dict[str, Any]:
        self.calls += 1
        return {
            "Credentials": {
                "AccessKeyId": "AKIA0000",
                "SecretAccessKey": "secret",
                "SessionToken": "token",
                "Expiration": datetime.now(UTC) + timedelta(hours=1),
            }
        }


def test_a_factory_is_not_called_until_a_role_is_assumed_and_then_only_once() -> None:
    # Given roles over an STS factory
    made: list[CountingSts] = []

    def factory() -> Any:
        made.append(CountingSts())
        return made[-1]

    roles = AssumedRoles(factory, region="us-east-1")
    # Then building it made no client
    assert made == []
    # When two tenants' roles are assumed
    roles.credentials("arn:aws:iam::123456789012:role/a", "t1")
    roles.credentials("arn:aws:iam::123456789012:role/a", "t2")
    # Then one client was made, and it made both calls
    assert len(made) == 1 and made[0].calls == 2
