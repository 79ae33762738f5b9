"""SQS SenderIds matched against the principals the stack trusts (jobsched.domain.senders)."""

from __future__ import annotations

import pytest

from jobsched.domain.senders import trusted

STACK = ("AROASTACKDISPATCHER", "AROASTACKWORKFLOWS")


@pytest.mark.parametrize(
    ("sender", "expected"),
    [
        ("AROASTACKDISPATCHER:jobsched-dispatcher", True),  # a session of a trusted role
        ("AROASTACKWORKFLOWS:0f3c9e2b-states", True),  # any session name of it
        ("AROASTACKDISPATCHER", True),  # the bare principal id
        ("AROAOTHERROLE:jobsched-dispatcher", False),  # another role, the same session name
        ("AROASTACKDISPATCHERX:s", False),  # a longer id that starts like a trusted one
        ("AIDAEXAMPLEUSER", False),  # an IAM user
        ("123456789012", False),  # the account's root
        ("", False),
        (None, False),
    ],
)
def test_a_sender_is_trusted_only_as_a_session_of_a_trusted_principal(
    sender: str | None, expected: bool
) -> None:
    assert trusted(sender, STACK) is expected


def test_no_trusted_principals_trust_nobody() -> None:
    assert trusted("AROASTACKDISPATCHER:s", ()) is False
