"""Who sent a run message: SQS's SenderId, matched against the principals the stack trusts.

Anyone granted sqs:SendMessage on the execution queue could otherwise make the worker run any
tenant's job. The queue's resource policy denies every principal but the stack's own roles; the
worker checks again, on each message, that its sender is one of them (defence in depth: a policy
edited by hand, a role granted too much elsewhere).

SQS's SenderId is the sender's principal id: a role session's is "<RoleId>:<session name>"
(AROA...:my-function), a user's its UserId (AIDA...), the root's the account id. The part before
the colon is matched, so every session of a trusted role is trusted and nothing else is.
"""

from __future__ import annotations

from collections.abc import Iterable


def principal_of(sender_id: str) -> str:
    """The principal part of a SenderId: a role's id without its session name."""
    return sender_id.split(":", 1)[0]


def trusted(sender_id: str | None, principals: Iterable[str]) -> bool:
    """Whether a message with this SenderId came from one of `principals` (none given: nobody)."""
    if not sender_id:
        return False
    return principal_of(sender_id) in {principal_of(p) for p in principals}
