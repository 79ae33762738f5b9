"""The StateMachines contract (jobsched.ports): at most one execution per name."""

from __future__ import annotations

from tests.contract.conftest import Backend


def test_a_name_starts_one_execution_and_a_second_start_of_it_starts_nothing(backend: Backend) -> None:
    assert backend.machines.start_failure("fail-run1-r0-a1", {"attempt": 1})
    assert not backend.machines.start_failure("fail-run1-r0-a1", {"attempt": 2})


def test_different_names_start_different_executions(backend: Backend) -> None:
    assert backend.machines.start_failure("fail-run1-r0-a1", {"attempt": 1})
    assert backend.machines.start_failure("fail-run1-r0-a2", {"attempt": 2})
