"""Conditional writes: the call that turns a refused condition into an answer, and the grammar of
named sub-conditions the stores build their ConditionExpressions from (as powertools' idempotency
store does), so each condition reads as the rule it enforces.
"""

from __future__ import annotations

from typing import Any

from jobsched.adapters.aws import Refused, aws_call

DYNAMODB = "DynamoDB"


def conditional(operation: Any, **kwargs: Any) -> tuple[bool, dict[str, Any]]:
    """A conditional write: (True, returned attributes), or (False, the item as it stood) if refused.

    The item is there when the call asked for ReturnValuesOnConditionCheckFailure.
    """
    try:
        with aws_call(DYNAMODB):
            out = operation(**kwargs)
    except Refused as refused:
        return False, refused.item or {}
    return True, dict(out.get("Attributes") or {})


def any_of(*conditions: str) -> str:
    """The sub-conditions OR-ed (empty ones left out), parenthesised only where precedence needs it."""
    return _join(" OR ", conditions)


def all_of(*conditions: str) -> str:
    """The sub-conditions AND-ed (empty ones left out), parenthesised only where precedence needs it."""
    return _join(" AND ", conditions)


def _join(connective: str, conditions: tuple[str, ...]) -> str:
    # DynamoDB refuses redundant parentheses ("((a))", "(a)" around one comparison), so a part is
    # wrapped only when its own top-level connective differs from the one joining it.
    parts = [c for c in conditions if c]
    return connective.join(f"({p})" if _top_level(p) - {connective} else p for p in parts)


def _top_level(condition: str) -> set[str]:
    """The connectives (" OR ", " AND ") of `condition` outside any parentheses."""
    found: set[str] = set()
    depth = 0
    for i, ch in enumerate(condition):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0:
            for connective in (" OR ", " AND "):
                if condition.startswith(connective, i):
                    found.add(connective)
    return found
