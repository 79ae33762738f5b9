"""The RunStore contract (jobsched.ports): one row per firing, the legal edges, the reads."""

from __future__ import annotations

from jobsched.domain import times
from jobsched.domain.records import AttemptEnd, Lease, NewRun
from jobsched.domain.status import RunStatus
from tests.contract.conftest import T0, Backend, at

JOB = "job_a"
SF = times.stored(at(60))


def pending(backend: Backend, sf: float = 60, **kw: object) -> None:
    assert backend.runs.put_pending(job_id=JOB, tenant="t1", scheduled_for=at(sf), now=T0, **kw).applied


def lease(owner: str = "w1/a", until: float = 30) -> Lease:
    return Lease(owner=owner, message=f"msg-{owner}", worker=owner.split("/")[0], until=at(until))


def ok(started: float = 1, finished: float = 2, attempt: int = 1) -> AttemptEnd:
    return AttemptEnd(attempt=attempt, started_at=at(started), finished_at=at(finished), result='{"ok":true}')


def failed(attempt: int = 1) -> AttemptEnd:
    return AttemptEnd(attempt=attempt, started_at=at(1), finished_at=at(2), error=("Boom", "it broke"))


NEW = NewRun(JOB, "t1", SF)


def test_put_pending_writes_one_row_per_firing_and_answers_the_row_that_exists(backend: Backend) -> None:
    first = backend.runs.put_pending(job_id=JOB, tenant="t1", scheduled_for=at(60), now=T0)
    second = backend.runs.put_pending(job_id=JOB, tenant="t1", scheduled_for=at(60), now=at(5), kind="manual")
    assert first.applied and first.row is not None and first.row.status == RunStatus.PENDING
    assert not second.applied and second.row is not None and second.row.kind == "scheduled"


def test_a_missed_tick_is_born_skipped_with_its_reason(backend: Backend) -> None:
    pending(backend, skipped="catchup")
    row = backend.runs.get(JOB, SF)
    assert row is not None and (row.status, row.reason) == (RunStatus.SKIPPED, "catchup")


def test_a_dependant_of_a_dead_letter_is_born_upstream_failed_and_an_existing_row_is_left_alone(
    backend: Backend,
) -> None:
    dependant = NewRun(JOB, "t1", SF, "dependant")
    assert backend.runs.mark_upstream_failed(dependant, reason="upstream run_x was dead-lettered", now=T0)
    row = backend.runs.get(JOB, SF)
    assert row is not None
    assert (row.status, row.reason, row.attempt, row.kind) == (
        RunStatus.UPSTREAM_FAILED,
        "upstream run_x was dead-lettered",
        0,
        "dependant",
    )
    # a second mark, or a mark of a run that has a row, writes nothing
    assert not backend.runs.mark_upstream_failed(dependant, reason="again", now=at(5))
    pending(backend, sf=120)
    assert not backend.runs.mark_upstream_failed(NewRun(JOB, "t1", times.stored(at(120))), reason="x", now=T0)
    other = backend.runs.get(JOB, times.stored(at(120)))
    assert other is not None and other.status == RunStatus.PENDING


def test_the_leased_path_claims_starts_and_records_as_the_lease_holder(backend: Backend) -> None:
    pending(backend)
    claim = backend.runs.claim(JOB, SF, lease=lease(), now=T0)
    assert claim.applied and claim.previous is not None and claim.previous.status == RunStatus.PENDING
    assert backend.runs.start(JOB, SF, owner="w1/a", now=at(1)).applied
    assert backend.runs.record(JOB, SF, owner="w1/a", end=ok()).applied
    row = backend.runs.get(JOB, SF)
    assert row is not None and row.status == RunStatus.SUCCEEDED and row.attempt == 1
    assert row.result == {"ok": True} and [a.outcome for a in row.attempts] == ["SUCCEEDED"]
    assert row.duration_ms == 1000 and row.lease_message == "msg-w1/a"


def test_only_the_lease_holder_moves_a_held_run(backend: Backend) -> None:
    pending(backend)
    assert backend.runs.claim(JOB, SF, lease=lease(), now=T0).applied
    refused = backend.runs.start(JOB, SF, owner="w2/b", now=at(1))
    assert not refused.applied and refused.row is not None and refused.row.lease_owner == "w1/a"
    assert backend.runs.start(JOB, SF, owner="w1/a", now=at(1)).applied
    assert not backend.runs.record(JOB, SF, owner="w2/b", end=ok()).applied
    assert not backend.runs.lose(JOB, SF, owner="w2/b", now=at(2), error=("LeaseLost", "x")).applied


def test_a_live_lease_refuses_a_second_claim_and_a_lapsed_one_is_taken_over(backend: Backend) -> None:
    pending(backend)
    assert backend.runs.claim(JOB, SF, lease=lease(until=30), now=T0).applied
    live = backend.runs.claim(JOB, SF, lease=lease("w2/b", until=60), now=at(10))
    assert not live.applied and live.row is not None and live.row.status == RunStatus.LEASED
    taken = backend.runs.claim(JOB, SF, lease=lease("w2/b", until=90), now=at(31))
    assert taken.applied and taken.previous is not None and taken.previous.lease_owner == "w1/a"
    row = backend.runs.get(JOB, SF)
    assert row is not None and row.attempt == 2 and row.lease_owner == "w2/b"


def test_claim_creates_the_row_only_when_told_to(backend: Backend) -> None:
    missing = backend.runs.claim(JOB, SF, lease=lease(), now=T0)
    assert not missing.applied and missing.row is None and backend.runs.get(JOB, SF) is None
    created = backend.runs.claim(JOB, SF, lease=lease(), now=T0, create=NEW)
    assert created.applied and created.previous is None
    row = backend.runs.get(JOB, SF)
    assert row is not None and row.status == RunStatus.LEASED and row.tenant == "t1" and row.attempt == 1


def test_the_fast_path_records_a_run_in_one_write_and_a_second_delivery_loses(backend: Backend) -> None:
    first = backend.runs.record_unleased(JOB, SF, worker="w1", end=ok(), create=NEW)
    second = backend.runs.record_unleased(JOB, SF, worker="w2", end=failed(), create=NEW)
    assert first.applied and first.previous is None
    assert not second.applied and second.row is not None and second.row.status == RunStatus.SUCCEEDED
    row = backend.runs.get(JOB, SF)
    assert row is not None and row.worker == "w1" and row.started_at == at(1) and row.attempt == 1


def test_the_first_heartbeat_persists_the_fast_path_as_running(backend: Backend) -> None:
    pending(backend)
    persisted = backend.runs.persist_running(JOB, SF, lease=lease(), started_at=at(1), now=at(5), create=NEW)
    assert persisted.applied
    row = backend.runs.get(JOB, SF)
    assert row is not None and (row.status, row.attempt, row.lease_owner) == (RunStatus.RUNNING, 1, "w1/a")
    assert not backend.runs.record_unleased(JOB, SF, worker="w2", end=ok(), create=NEW).applied
    assert backend.runs.record(JOB, SF, owner="w1/a", end=failed()).applied


def test_a_first_heartbeat_tried_again_after_its_answer_was_lost_is_refused_by_its_own_lease(
    backend: Backend,
) -> None:
    # The worker tells its own applied write from another holder's by the row these refusals answer:
    # RUNNING under its own lease (Worker._run_fast, tests/sim seed 6505)
    pending(backend)
    first = backend.runs.persist_running(JOB, SF, lease=lease(), started_at=at(1), now=at(5), create=NEW)
    again = backend.runs.persist_running(JOB, SF, lease=lease(), started_at=at(1), now=at(5), create=NEW)
    assert first.applied
    assert not again.applied and again.row is not None
    assert (again.row.status, again.row.attempt, again.row.lease_owner) == (RunStatus.RUNNING, 1, "w1/a")
    one_write = backend.runs.record_unleased(JOB, SF, worker="w1", end=failed(), create=NEW)
    assert not one_write.applied and one_write.row is not None
    assert (one_write.row.status, one_write.row.lease_owner) == (RunStatus.RUNNING, "w1/a")
    assert backend.runs.record(JOB, SF, owner="w1/a", end=failed()).applied
    row = backend.runs.get(JOB, SF)
    assert row is not None and row.status == RunStatus.FAILED and [a.attempt for a in row.attempts] == [1]


def test_a_failed_run_keeps_its_error_and_no_worker_can_claim_or_fail_it_again(backend: Backend) -> None:
    assert backend.runs.record_unleased(JOB, SF, worker="w1", end=failed(), create=NEW).applied
    row = backend.runs.get(JOB, SF)
    assert row is not None and row.error is not None and row.error.type == "Boom"
    assert not backend.runs.claim(JOB, SF, lease=lease(), now=at(10)).applied  # the workflow re-arms it
    assert (
        backend.runs.fail_stuck(
            job_id=JOB, scheduled_for=SF, tenant="t1", now=at(11), error_type="Poison", error_message="p"
        )
        is None
    )


def test_skip_applies_before_the_first_attempt_only(backend: Backend) -> None:
    pending(backend)
    assert backend.runs.skip(JOB, SF, reason="overlap", now=T0, create=NEW).applied
    other = times.stored(at(120))
    pending(backend, sf=120)
    assert backend.runs.claim(JOB, other, lease=lease(until=30), now=T0).applied
    assert backend.runs.claim(JOB, other, lease=lease("w2/b", until=90), now=at(31)).applied  # attempt 2
    started = backend.runs.skip(JOB, other, reason="overlap", now=at(32), create=NewRun(JOB, "t1", other))
    assert not started.applied and started.row is not None and started.row.status == RunStatus.LEASED


def test_cancel_ends_a_pending_run_and_creates_the_row_only_when_told_to(backend: Backend) -> None:
    assert not backend.runs.cancel(JOB, SF, now=T0).applied
    assert backend.runs.cancel(JOB, SF, now=T0, create=NEW).applied
    row = backend.runs.get(JOB, SF)
    assert row is not None and row.status == RunStatus.CANCELLED
    assert not backend.runs.cancel(JOB, SF, now=T0).applied


def test_lose_marks_a_held_run_lost_with_its_error(backend: Backend) -> None:
    pending(backend)
    assert backend.runs.claim(JOB, SF, lease=lease(), now=T0).applied
    assert backend.runs.lose(JOB, SF, owner="w1/a", now=at(1), error=("LeaseLost", "not re-run")).applied
    row = backend.runs.get(JOB, SF)
    assert row is not None and row.status == RunStatus.LOST and row.error is not None


def test_extend_lease_renews_only_a_held_run_of_its_owner(backend: Backend) -> None:
    pending(backend)
    assert not backend.runs.extend_lease(job_id=JOB, scheduled_for=SF, owner="w1/a", until=at(60))
    assert backend.runs.claim(JOB, SF, lease=lease(until=30), now=T0).applied
    assert not backend.runs.extend_lease(job_id=JOB, scheduled_for=SF, owner="w2/b", until=at(60))
    assert backend.runs.extend_lease(job_id=JOB, scheduled_for=SF, owner="w1/a", until=at(60))
    assert not backend.runs.claim(JOB, SF, lease=lease("w2/b", until=90), now=at(31)).applied


def test_fail_stuck_fails_a_run_wherever_its_workers_left_it(backend: Backend) -> None:
    pending(backend)
    assert backend.runs.claim(JOB, SF, lease=lease(), now=T0).applied
    row = backend.runs.fail_stuck(
        job_id=JOB, scheduled_for=SF, tenant="t1", now=at(5), error_type="Poison", error_message="p"
    )
    assert row is not None and row.status == RunStatus.FAILED and row.error is not None
    assert row.attempts[-1].outcome == "Poison"
    absent = times.stored(at(600))
    created = backend.runs.fail_stuck(
        job_id=JOB, scheduled_for=absent, tenant="t1", now=at(5), error_type="Poison", error_message="p"
    )
    assert created is not None and created.status == RunStatus.FAILED and created.attempt == 0


def test_an_eventually_consistent_read_answers_the_row_or_an_older_version_of_it(backend: Backend) -> None:
    pending(backend)
    assert backend.runs.claim(JOB, SF, lease=lease(), now=T0).applied
    read = backend.runs.get(JOB, SF, consistent=False)
    assert read is None or read.status in (RunStatus.PENDING, RunStatus.LEASED)


# -- reads --------------------------------------------------------------------------------------------
def test_recent_and_since_order_the_runs_of_one_job(backend: Backend) -> None:
    for sf in (60, 120, 180):
        pending(backend, sf=sf)
    backend.runs.put_pending(job_id="job_b", tenant="t1", scheduled_for=at(90), now=T0)
    assert [r.scheduled_for for r in backend.runs.recent(JOB, limit=2)] == [at(180), at(120)]
    assert [r.scheduled_for for r in backend.runs.since(JOB, after=at(60))] == [at(120), at(180)]


def test_history_pages_newest_first_within_its_range_and_filters(backend: Backend) -> None:
    for n in range(7):
        pending(backend, sf=60 * (n + 1), kind="manual" if n % 2 else "scheduled")
    seen, cursor = [], None
    for _ in range(10):
        page, cursor = backend.runs.history(
            JOB, start=at(120), end=at(420), status=None, limit=2, cursor=cursor, kind="scheduled"
        )
        seen += [r.scheduled_for for r in page]
        if cursor is None:
            break
    assert seen == [at(300), at(180)]  # scheduled ones in [120 s, 420 s), newest first
    done, _ = backend.runs.history(JOB, start=None, end=None, status="SKIPPED", limit=5, cursor=None)
    assert done == []


def test_dead_letters_page_newest_first_per_tenant_partition(backend: Backend) -> None:
    for n in range(5):
        sf = times.stored(at(60 * (n + 1)))
        pending(backend, sf=60 * (n + 1))
        assert backend.runs.record_unleased(
            JOB, sf, worker="w", end=failed(), create=NewRun(JOB, "t1", sf)
        ).applied
        backend.dead_letter(JOB, sf, dl_key="DL#t1", dead_at=at(1000 + n))
    seen, cursor = [], None
    for _ in range(10):
        page, cursor = backend.runs.dead_letters(dl_key="DL#t1", start=cursor, limit=2, job_id=None)
        seen += [(d.dead_at, d.error_type, d.attempt) for d in page]
        if cursor is None:
            break
    assert seen == [(at(1000 + n), "Boom", 1) for n in reversed(range(5))]
    assert backend.runs.dead_letters(dl_key="DL#t2", start=None, limit=2, job_id=None) == ([], None)


def test_request_cancel_marks_a_held_run_once_and_leaves_its_status(backend: Backend) -> None:
    # A missing row, and a PENDING one (unless pending_too), are refused
    assert not backend.runs.request_cancel(JOB, SF, now=T0).applied
    pending(backend)
    refused = backend.runs.request_cancel(JOB, SF, now=T0)
    assert not refused.applied and refused.row is not None and refused.row.status == RunStatus.PENDING
    # A held run is marked, its status unchanged; a second mark keeps the first instant
    assert backend.runs.claim(JOB, SF, lease=lease(), now=T0).applied
    marked = backend.runs.request_cancel(JOB, SF, now=at(5))
    assert marked.applied and marked.row is not None and marked.row.status == RunStatus.LEASED
    assert backend.runs.request_cancel(JOB, SF, now=at(9)).applied
    row = backend.runs.get(JOB, SF)
    assert row is not None and row.cancel_requested_at == at(5) and row.status == RunStatus.LEASED
    # The mark survives the run's own moves; a finished run is refused
    assert backend.runs.start(JOB, SF, owner="w1/a", now=at(6)).applied
    assert backend.runs.record(JOB, SF, owner="w1/a", end=ok(6, 7)).applied
    done = backend.runs.request_cancel(JOB, SF, now=at(10))
    assert not done.applied and done.row is not None and done.row.status == RunStatus.SUCCEEDED
    assert done.row.cancel_requested_at == at(5)


def test_request_cancel_with_pending_too_marks_a_pending_row(backend: Backend) -> None:
    pending(backend)
    assert backend.runs.request_cancel(JOB, SF, now=T0, pending_too=True).applied
    lease_row = backend.runs.persist_running(JOB, SF, lease=lease(), started_at=at(1), now=at(1), create=NEW)
    assert lease_row.applied
    row = backend.runs.get(JOB, SF)
    assert row is not None and row.status == RunStatus.RUNNING and row.cancel_requested_at == T0


def test_the_fast_path_record_replaces_a_record_that_the_run_never_started(backend: Backend) -> None:
    # A handler that ran while its worker stalled past its leases: meanwhile the fleet wrote the run
    # SKIPPED or CANCELLED (attempt 0). The attempt that ran is what the run did.
    other = times.stored(at(120))
    assert backend.runs.skip(JOB, SF, reason="overlap", now=T0, create=NEW).applied
    assert backend.runs.cancel(JOB, other, now=T0, create=NewRun(JOB, "t1", other)).applied
    assert backend.runs.record_unleased(JOB, SF, worker="w1", end=ok(), create=NEW).applied
    assert backend.runs.record_unleased(JOB, other, worker="w1", end=failed(), create=NEW).applied
    skipped, cancelled = backend.runs.get(JOB, SF), backend.runs.get(JOB, other)
    assert skipped is not None and (skipped.status, skipped.attempt, skipped.reason) == (
        RunStatus.SUCCEEDED,
        1,
        "overlap",  # what the fleet took it for stays in its history
    )
    assert cancelled is not None and (cancelled.status, cancelled.attempt) == (RunStatus.FAILED, 1)


def test_nothing_but_a_fast_path_record_moves_a_run_out_of_skipped_or_cancelled(backend: Backend) -> None:
    assert backend.runs.skip(JOB, SF, reason="overlap", now=T0, create=NEW).applied
    assert not backend.runs.claim(JOB, SF, lease=lease(), now=at(1), create=NEW).applied
    assert not backend.runs.persist_running(
        JOB, SF, lease=lease(), started_at=at(1), now=at(1), create=NEW
    ).applied
    assert not backend.runs.cancel(JOB, SF, now=at(1), create=NEW).applied
    # and a second record loses to the first, as on a PENDING run
    assert backend.runs.record_unleased(JOB, SF, worker="w1", end=ok(), create=NEW).applied
    assert not backend.runs.record_unleased(JOB, SF, worker="w2", end=ok(), create=NEW).applied


def test_an_attempt_that_names_its_worker_keeps_it_in_the_history(
    backend: Backend,
) -> None:
    # Given a run recorded by an external worker (worker pools)
    pending(backend)
    backend.runs.claim(JOB, SF, lease=lease(), now=T0)
    backend.runs.start(JOB, SF, owner="w1/a", now=at(1))
    named = AttemptEnd(attempt=1, started_at=at(1), finished_at=at(2), result="1", worker="w-pool-1")
    assert backend.runs.record(JOB, SF, owner="w1/a", end=named).applied
    # Then its attempt names that worker
    row = backend.runs.get(JOB, SF)
    assert row is not None and [a.worker for a in row.attempts] == ["w-pool-1"]


def test_request_cancel_with_create_marks_a_run_that_has_no_row_yet_and_its_fast_path_records_over_it(
    backend: Backend,
) -> None:
    # A run on the fast path (no row until it ends): the mark creates its row PENDING, marked
    marked = backend.runs.request_cancel(JOB, SF, now=T0, pending_too=True, create=NEW)
    assert marked.applied and marked.row is not None
    row = marked.row
    assert (row.status, row.attempt, row.cancel_requested_at) == (RunStatus.PENDING, 0, T0)
    # A second mark keeps the row and the first instant
    again = backend.runs.request_cancel(JOB, SF, now=at(3), pending_too=True, create=NEW)
    assert again.applied and again.row is not None and again.row.cancel_requested_at == T0
    # The run's one write at its end still applies: its result is its truth
    assert backend.runs.record_unleased(JOB, SF, worker="w1", end=ok(), create=NEW).applied
    row = backend.runs.get(JOB, SF)
    assert row is not None and row.status == RunStatus.SUCCEEDED and row.attempt == 1
    # and a finished run is never created or marked again
    done = backend.runs.request_cancel(JOB, SF, now=at(9), pending_too=True, create=NEW)
    assert not done.applied and done.row is not None and done.row.status == RunStatus.SUCCEEDED


def test_save_progress_keeps_progress_and_checkpoint_for_the_lease_owner_through_a_takeover(
    backend: Backend,
) -> None:
    # No row, or a PENDING one: nothing to keep them on (a run writes them once it holds its lease)
    assert not backend.runs.save_progress(JOB, SF, owner="w1/a", now=T0, progress='{"done":1}')
    pending(backend)
    assert not backend.runs.save_progress(JOB, SF, owner="w1/a", now=T0, checkpoint='{"done":1}')
    # The holder keeps both, each with its instant; another owner is refused and changes nothing
    assert backend.runs.claim(JOB, SF, lease=lease(), now=T0).applied
    assert backend.runs.start(JOB, SF, owner="w1/a", now=at(1)).applied
    assert backend.runs.save_progress(JOB, SF, owner="w1/a", now=at(2), progress='{"done":2,"of":9}')
    assert backend.runs.save_progress(JOB, SF, owner="w1/a", now=at(3), checkpoint='{"done":2}')
    assert not backend.runs.save_progress(JOB, SF, owner="w2/b", now=at(4), checkpoint='{"done":0}')
    row = backend.runs.get(JOB, SF)
    assert row is not None
    assert (row.progress, row.progress_at, row.checkpoint, row.checkpoint_at) == (
        {"done": 2, "of": 9},
        at(2),
        {"done": 2},
        at(3),
    )
    # A takeover of the lapsed lease finds the checkpoint on the row it moves, and keeps it
    taken = backend.runs.claim(JOB, SF, lease=lease("w2/b", until=90), now=at(40))
    assert taken.applied and taken.previous is not None and taken.previous.checkpoint == {"done": 2}
    assert backend.runs.start(JOB, SF, owner="w2/b", now=at(41)).applied
    assert backend.runs.record(JOB, SF, owner="w2/b", end=ok(41, 42, attempt=2)).applied
    done = backend.runs.get(JOB, SF)
    assert done is not None and done.status == RunStatus.SUCCEEDED and done.checkpoint == {"done": 2}
    # and a finished run keeps nothing more
    assert not backend.runs.save_progress(JOB, SF, owner="w2/b", now=at(50), progress="3")


def test_note_task_keeps_each_task_once_in_order_for_the_lease_owner(backend: Backend) -> None:
    first, second = "arn:aws:ecs:us-east-1:1:task/c/aaa", "arn:aws:ecs:us-east-1:1:task/c/bbb"
    # No row, or a PENDING one: nothing to note on
    assert not backend.runs.note_task(JOB, SF, owner="w1/a", task_arn=first)
    pending(backend)
    assert not backend.runs.note_task(JOB, SF, owner="w1/a", task_arn=first)
    # The holder notes its task; a second note of it (an adopter's) adds nothing; another owner is refused
    assert backend.runs.claim(JOB, SF, lease=lease(), now=T0).applied
    assert backend.runs.note_task(JOB, SF, owner="w1/a", task_arn=first)
    assert not backend.runs.note_task(JOB, SF, owner="w1/a", task_arn=first)
    assert not backend.runs.note_task(JOB, SF, owner="w2/b", task_arn=second)
    # A takeover's attempt notes its own after it, and the list outlives the run's end
    assert backend.runs.claim(JOB, SF, lease=lease("w2/b", until=90), now=at(40)).applied
    assert backend.runs.note_task(JOB, SF, owner="w2/b", task_arn=second)
    assert backend.runs.start(JOB, SF, owner="w2/b", now=at(41)).applied
    assert backend.runs.record(JOB, SF, owner="w2/b", end=ok(41, 42, attempt=2)).applied
    done = backend.runs.get(JOB, SF)
    assert done is not None and done.ecs_tasks == [first, second]
