"""The run state machine: forward-only, legal edges only."""

from __future__ import annotations

import itertools

import pytest

from jobsched.domain.status import (
    LEGAL_EDGES,
    TERMINAL,
    IllegalTransition,
    RunStatus,
    check_path,
    is_legal,
    sources_of,
)

S = RunStatus


def test_it_allows_exactly_the_edges_of_the_design() -> None:
    expected = {
        (S.PENDING, S.LEASED), (S.LEASED, S.RUNNING), (S.RUNNING, S.SUCCEEDED), (S.RUNNING, S.FAILED),
        (S.LEASED, S.PENDING), (S.RUNNING, S.PENDING), (S.FAILED, S.PENDING), (S.FAILED, S.DEAD_LETTER),
        (S.PENDING, S.CANCELLED), (S.DEAD_LETTER, S.PENDING), (S.LEASED, S.LOST), (S.RUNNING, S.LOST),
        (S.PENDING, S.SKIPPED), (S.UPSTREAM_FAILED, S.PENDING),
    }  # fmt: skip
    assert expected == LEGAL_EDGES
    for src, dst in itertools.product(S, S):
        assert is_legal(src, dst) == ((src, dst) in expected)


def test_it_never_leaves_a_terminal_status_but_by_a_replay_or_a_re_arm() -> None:
    rearmable = {S.DEAD_LETTER, S.UPSTREAM_FAILED}  # operator replay; upstream replayed to success
    for src in TERMINAL:
        assert [dst for dst in S if is_legal(src, dst)] == ([S.PENDING] if src in rearmable else [])


def test_it_names_the_sources_of_each_target() -> None:
    assert sources_of(S.LEASED) == {S.PENDING}
    assert sources_of(S.PENDING) == {S.LEASED, S.RUNNING, S.FAILED, S.DEAD_LETTER, S.UPSTREAM_FAILED}
    assert sources_of(S.SUCCEEDED) == {S.RUNNING}


def test_it_accepts_the_crash_recovery_path_and_rejects_shortcuts() -> None:
    check_path(S.PENDING, S.LEASED, S.RUNNING, S.PENDING, S.LEASED, S.RUNNING, S.SUCCEEDED)
    check_path(
        S.PENDING, S.LEASED, S.RUNNING, S.FAILED, S.PENDING, S.LEASED, S.RUNNING, S.FAILED, S.DEAD_LETTER
    )
    for bad in [
        (S.PENDING, S.RUNNING),
        (S.PENDING, S.SUCCEEDED),
        (S.SUCCEEDED, S.PENDING),
        (S.LEASED, S.SUCCEEDED),
    ]:
        with pytest.raises(IllegalTransition):
            check_path(*bad)
