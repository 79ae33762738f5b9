"""Regression seeds: each schedule once showed a real bug, now fixed; the violation must not return.

(seed, minutes, jobs per schedule, a violation text that must not appear, the bug). A seed's
schedule is a function of the simulator's version too: when the workload generator changes, re-find
the seed (`git show <fix>^` of services/run.py, then `python -m tests.sim`) and update it here.
"""

from __future__ import annotations

REGRESSION_SEEDS: list[tuple[int, float, int, str, str]] = [
    (
        1, 5, 10, "stuck FAILED",
        "fast path: a stale read of a re-armed retry handed attempt 1 over again; no workflow started",
    ),
    (
        5, 5, 10, "was due and is missing",
        "a tick of a pause received before its second was acknowledged; a resume before its second lost it",
    ),
]  # fmt: skip
