"""The JobStore and ShardLeases contracts (jobsched.ports), on every implementation."""

from __future__ import annotations

import pytest

from jobsched.domain import times
from jobsched.domain.keys import due_key_for
from jobsched.domain.models import MAX_CANCELLED_RUNS, RescheduledTicks
from jobsched.domain.status import JobStatus
from jobsched.domain.targets import from_handler, parse_target
from jobsched.errors import Conflict, FanOutFull
from tests.contract.conftest import SHARDS, T0, Backend, at, create, job

RUN = "2026-11-30T12:01:00.000Z"  # the tick holding the slot in these tests
OTHER = "2026-11-30T12:02:00.000Z"
ROLE = "arn:aws:iam::123456789012:role/jobsched-target"
SFN = "arn:aws:states:us-east-1:123456789012:stateMachine:etl"


# -- definitions and idempotency ------------------------------------------------------------------
def test_a_created_job_reads_back_as_written(backend: Backend) -> None:
    written = job(payload={"big": "x" * 600})  # stored apart by DynamoDB: read back all the same
    assert create(backend, written) == written


def test_a_reused_idempotency_key_answers_the_first_record_and_writes_nothing(backend: Backend) -> None:
    # Given a job created with a key (its id derived from tenant and key, as the service does)
    first = create(backend, job("job_a"), key="same")
    # When a second create of the same id comes with another body
    again = job("job_a").model_copy(update={"name": "other", "payload": {"other": 1}})
    used = backend.jobs.create_with_idempotency(
        again, idempotency_key="same", request_hash="other", response={"x": 1}, now=T0
    )
    # Then it answers the first create's record, and the job is as the first create wrote it
    assert used is not None and (used.request_hash, used.response) == ("h", {"job_id": "job_a"})
    assert backend.jobs.get_job("job_a") == first


def test_a_dependant_created_with_a_used_key_answers_the_record_and_records_no_edge(backend: Backend) -> None:
    create(backend, job("job_up"))
    create(backend, job("job_down", depends_on=("job_up",)), key="k")
    used = backend.jobs.create_with_idempotency(
        job("job_down", depends_on=("job_up",)), idempotency_key="k", request_hash="h2", response={}, now=T0
    )
    assert used is not None and used.request_hash == "h"
    up = backend.jobs.get_job("job_up")
    assert up is not None and up.dependants == ("job_down",)


def test_a_dependant_of_a_cancelled_upstream_is_refused_with_a_conflict(backend: Backend) -> None:
    create(backend, job("job_up"))
    assert backend.jobs.cancel_job("job_up", now=T0, stale=None)[0]
    with pytest.raises(Conflict):
        create(backend, job("job_down", type="one_off", cron_expr=None, depends_on=("job_up",)))
    assert backend.jobs.get_job("job_down") is None


def test_creating_a_dependant_records_the_edge_on_its_upstream(backend: Backend) -> None:
    create(backend, job("job_up"))
    create(backend, job("job_down", depends_on=("job_up",)))
    up = backend.jobs.get_job("job_up")
    assert up is not None and up.dependants == ("job_down",)


def test_a_dependant_past_the_fan_out_cap_is_refused_by_the_edge_s_own_write(backend: Backend) -> None:
    # Given a store whose jobs may have 2 dependants, and an upstream that has them
    backend.jobs.max_fan_out = 2
    create(backend, job("job_up"))
    for down in ("job_d1", "job_d2"):
        create(backend, job(down, depends_on=("job_up",)))
    # When a third dependant is written (no service read stands in front: the store alone decides)
    # Then it is refused naming the upstream and the cap, and neither it nor its edge is written
    with pytest.raises(FanOutFull, match="job 'job_up' has 2 dependants already, the most a job") as no:
        create(backend, job("job_d3", depends_on=("job_up",)))
    assert no.value.field == "depends_on"
    assert backend.jobs.get_job("job_d3") is None
    up = backend.jobs.get_job("job_up")
    assert up is not None and up.dependants == ("job_d1", "job_d2")


def test_rewire_past_the_fan_out_cap_is_refused_and_moving_an_edge_away_frees_its_place(
    backend: Backend,
) -> None:
    backend.jobs.max_fan_out = 1
    for up in ("job_u1", "job_u2", "job_u3"):
        create(backend, job(up))
    d1 = create(backend, job("job_d1", depends_on=("job_u1",), root_schedule="job_u1"))
    d2 = create(backend, job("job_d2", depends_on=("job_u2",), root_schedule="job_u2"))
    # When d2 moves under u1, which is full, then it is refused and nothing moves
    onto_u1 = d2.model_copy(update={"depends_on": ("job_u1",), "updated_at": at(1)})
    with pytest.raises(FanOutFull, match="job 'job_u1' has 1 dependants"):
        backend.jobs.rewire(onto_u1, expected_version=d2.version, added=["job_u1"], removed=["job_u2"])
    u1, u2 = backend.jobs.get_job("job_u1"), backend.jobs.get_job("job_u2")
    assert u1 is not None and u1.dependants == ("job_d1",)
    assert u2 is not None and u2.dependants == ("job_d2",)
    # When d1 moves away from u1 (its last edge: DynamoDB drops the empty set), d2 takes its place
    away = d1.model_copy(update={"depends_on": ("job_u3",), "updated_at": at(1)})
    assert backend.jobs.rewire(away, expected_version=d1.version, added=["job_u3"], removed=["job_u1"])
    assert backend.jobs.rewire(onto_u1, expected_version=d2.version, added=["job_u1"], removed=["job_u2"])
    u1 = backend.jobs.get_job("job_u1")
    assert u1 is not None and u1.dependants == ("job_d2",)


def test_get_jobs_answers_the_jobs_that_exist_by_id_in_one_read(backend: Backend) -> None:
    create(backend, job("job_a"))
    create(backend, job("job_b", depends_on=("job_a",)))

    found = backend.jobs.get_jobs(["job_a", "job_b", "job_gone", "job_a"])

    assert set(found) == {"job_a", "job_b"}
    assert found["job_a"].dependants == ("job_b",) and found["job_b"].depends_on == ("job_a",)


def test_save_definition_is_refused_for_a_stale_version_and_bumps_it_otherwise(backend: Backend) -> None:
    stored = create(backend, job())
    edited = stored.model_copy(update={"name": "edited", "updated_at": at(1)})
    assert not backend.jobs.save_definition(edited, expected_version=stored.version + 1)
    assert backend.jobs.save_definition(edited, expected_version=stored.version)
    after = backend.jobs.get_job(stored.job_id)
    assert after is not None and after.name == "edited" and after.version == stored.version + 1


def test_an_edits_rescheduled_ticks_read_back_as_written_and_a_later_save_without_them_removes_them(
    backend: Backend,
) -> None:
    # Given a paused job whose edit keeps the old schedule's ticks of the pause (RescheduledTicks)
    stored = create(backend, job(status=JobStatus.PAUSED, next_run_at=None, paused_at=at(1)))
    gone = RescheduledTicks(cron_expr="*/10 * * * * *", timezone="Europe/Berlin", first=at(10), until=at(35))
    edited = stored.model_copy(update={"rescheduled": gone, "paused_at": at(35), "updated_at": at(35)})
    assert backend.jobs.save_definition(edited, expected_version=stored.version)
    after = backend.jobs.get_job(stored.job_id)
    assert after is not None and after.rescheduled == gone
    # When the resume saves it without them, then they are gone (the resume recorded them)
    resumed = after.model_copy(update={"rescheduled": None, "paused_at": None, "updated_at": at(50)})
    assert backend.jobs.save_definition(resumed, expected_version=after.version)
    last = backend.jobs.get_job(stored.job_id)
    assert last is not None and last.rescheduled is None


@pytest.mark.parametrize(
    "target",
    [
        {"type": "http", "url": "https://hooks.example.com/x", "headers": {"X-T": "a"}, "timeout_seconds": 5},
        {"type": "stepfunctions", "state_machine_arn": SFN, "wait": True, "role_arn": ROLE},
    ],
    ids=["http", "stepfunctions"],
)
def test_a_jobs_target_reads_back_as_written_and_an_edit_replaces_it(
    backend: Backend, target: dict[str, object]
) -> None:
    # Given a job stored with a target other than python
    stored = create(backend, job(target=parse_target(target)))
    assert stored.target == parse_target(target) and stored.handler is None
    # When an edit turns it into a python target, then it reads back as that, handler included
    edited = stored.model_copy(update={"target": from_handler("demo.echo"), "updated_at": at(1)})
    assert backend.jobs.save_definition(edited, expected_version=stored.version)
    after = backend.jobs.get_job(stored.job_id)
    assert after is not None and after.target == from_handler("demo.echo") and after.handler == "demo.echo"
    # And back again: no handler left behind
    again = after.model_copy(update={"target": parse_target(target), "updated_at": at(2)})
    assert backend.jobs.save_definition(again, expected_version=after.version)
    last = backend.jobs.get_job(stored.job_id)
    assert last is not None and last.target == parse_target(target) and last.handler is None


def test_set_job_status_applies_only_from_a_listed_source(backend: Backend) -> None:
    create(backend, job())
    refused, as_it_stood = backend.jobs.set_job_status(
        "job_a", target=JobStatus.COMPLETED, sources=[JobStatus.PAUSED], now=at(1), leave_index=True
    )
    assert not refused and as_it_stood is not None and as_it_stood.status == JobStatus.SCHEDULED
    applied, after = backend.jobs.set_job_status(
        "job_a", target=JobStatus.COMPLETED, sources=[JobStatus.SCHEDULED], now=at(1), leave_index=True
    )
    assert applied and after is not None and after.status == JobStatus.COMPLETED and after.next_run_at is None


def test_set_job_status_of_a_missing_job_answers_none(backend: Backend) -> None:
    assert backend.jobs.set_job_status(
        "job_none", target=JobStatus.COMPLETED, sources=[JobStatus.SCHEDULED], now=T0, leave_index=False
    ) == (False, None)


# -- the due index and the stamp --------------------------------------------------------------------
def test_stamp_next_tick_moves_a_tick_once_for_two_callers_that_read_it(backend: Backend) -> None:
    stored = create(backend, job())
    assert stored.next_run_at is not None
    first = backend.jobs.stamp_next_tick(
        "job_a", expected=stored.next_run_at, next_run_at=at(120), now=at(1), dispatched=1
    )
    second = backend.jobs.stamp_next_tick(
        "job_a", expected=stored.next_run_at, next_run_at=at(180), now=at(1), dispatched=1
    )
    after = backend.jobs.get_job("job_a")
    assert (first, second) == (True, False)
    assert after is not None and after.next_run_at == at(120) and after.dispatched == 1


def test_due_page_answers_due_entries_oldest_first_in_pages_until_exhausted(backend: Backend) -> None:
    # Five jobs of one shard due in the same minute bucket, one not yet due.
    ids = [f"job_{i}" for i in range(40)]
    same_shard = [i for i in ids if times.shard_of(i, SHARDS) == times.shard_of(ids[0], SHARDS)][:6]
    for n, job_id in enumerate(same_shard):
        create(backend, job(job_id, next_run_at=at(60 + n)))
    key = due_key_for(same_shard[0], at(60), written=T0, shards=SHARDS)
    seen: list[str] = []
    cursor = None
    for _ in range(10):
        page = backend.jobs.due_page(key, until=at(64), cursor=cursor, limit=2)
        seen += [e.job_id for e in page.entries]
        cursor = page.cursor
        if cursor is None:
            break
    assert seen == same_shard[:5]  # the sixth, due at 65 s, is after `until`


def test_a_stamp_moves_the_entry_out_of_its_due_bucket(backend: Backend) -> None:
    stored = create(backend, job())
    assert stored.next_run_at is not None
    key = due_key_for("job_a", stored.next_run_at, written=T0, shards=SHARDS)
    assert backend.jobs.stamp_next_tick("job_a", expected=stored.next_run_at, next_run_at=None, now=at(1))
    page = backend.jobs.due_page(key, until=at(3600), cursor=None, limit=10)
    # The index is eventually consistent: the entry may linger, but never with a new tick.
    assert all(e.job_id != "job_a" or e.next_run_at == stored.next_run_at for e in page.entries)


# -- start markers: the slot ------------------------------------------------------------------------
def hold(
    backend: Backend, run: str = RUN, message: str = "m1", now: float = 0, until: float = 30, **kw: object
) -> bool:
    return bool(
        backend.jobs.hold_job(
            "job_a", run=run, message=message, until=at(until), now=at(now), was_buffered=False, **kw
        )
    )


def test_hold_job_takes_a_free_slot_and_refuses_another_run_while_it_is_live(backend: Backend) -> None:
    create(backend, job())
    assert hold(backend)
    assert not hold(backend, run=OTHER, message="m2", now=10)


def test_hold_job_takes_a_lapsed_slot(backend: Backend) -> None:
    create(backend, job())
    assert hold(backend, until=30)
    assert hold(backend, run=OTHER, message="m2", now=31, until=60)


def test_hold_job_is_granted_again_to_the_same_message(backend: Backend) -> None:
    create(backend, job())
    assert hold(backend)
    assert hold(backend, now=5)
    assert not hold(backend, message="m-other", now=5)


def test_hold_job_replaces_a_holder_known_to_be_finished(backend: Backend) -> None:
    create(backend, job())
    assert hold(backend)
    assert hold(backend, run=OTHER, message="m2", now=5, stale=RUN)


def test_hold_job_is_refused_on_a_cancelled_job(backend: Backend) -> None:
    create(backend, job())
    assert backend.jobs.cancel_job("job_a", now=T0, stale=None)[0]
    assert not hold(backend)


def test_a_live_buffered_tick_owns_the_next_turn(backend: Backend) -> None:
    create(backend, job())
    assert backend.jobs.buffer_behind("job_a", run=OTHER, kind="scheduled", until=at(100), now=T0)
    assert not hold(backend)  # slot free, but another tick waits for it
    assert backend.jobs.hold_job("job_a", run=OTHER, message="m2", until=at(30), now=at(1), was_buffered=True)
    after = backend.jobs.get_job("job_a")
    assert after is not None and after.active_run == OTHER and after.buffered_run is None


def test_buffer_behind_is_refused_while_another_tick_waits_live(backend: Backend) -> None:
    create(backend, job())
    assert backend.jobs.buffer_behind("job_a", run=RUN, kind="scheduled", until=at(100), now=T0)
    assert backend.jobs.buffer_behind("job_a", run=RUN, kind="scheduled", until=at(200), now=at(1))
    assert not backend.jobs.buffer_behind("job_a", run=OTHER, kind="scheduled", until=at(100), now=at(2))
    assert backend.jobs.buffer_behind("job_a", run=OTHER, kind="manual", until=at(300), now=at(201))


def test_hold_and_read_answers_the_job_as_it_stood_before_the_write(backend: Backend) -> None:
    # Given a job; when a run holds it, then the answer is the job before: unheld
    create(backend, job())
    held, before = backend.jobs.hold_and_read("job_a", run=RUN, message="m1", until=at(30), now=T0)
    assert held and before is not None and before.active_run is None
    assert backend.jobs.get_job("job_a").active_run == RUN  # type: ignore[union-attr]
    refused, stood = backend.jobs.hold_and_read("job_a", run=OTHER, message="m2", until=at(30), now=at(1))
    assert not refused and stood is not None and stood.active_run == RUN
    assert backend.jobs.hold_and_read("job_none", run=RUN, message="m", until=at(30), now=T0) == (False, None)


def test_hold_and_read_shows_a_redelivery_the_marker_its_dead_receive_left(backend: Backend) -> None:
    # Given a job held by message m1, whose receive died (its hold lapsed, nobody took the slot)
    create(backend, job())
    assert backend.jobs.hold_and_read("job_a", run=RUN, message="m1", until=at(30), now=T0)[0]
    # When m1 comes back after the hold lapsed
    held, before = backend.jobs.hold_and_read("job_a", run=RUN, message="m1", until=at(90), now=at(60))
    # Then it holds again, and sees that this very message held the slot: the run started
    assert held and before is not None
    assert (before.active_run, before.active_message) == (RUN, "m1")
    # and on a job cancelled since, the refusal shows the same marker
    assert backend.jobs.cancel_job("job_a", now=at(200), stale=None)[0]
    refused, stood = backend.jobs.hold_and_read("job_a", run=RUN, message="m1", until=at(260), now=at(230))
    assert not refused and stood is not None and (stood.active_run, stood.active_message) == (RUN, "m1")


def test_a_hold_records_the_holder_it_displaced_in_the_same_write(backend: Backend) -> None:
    # Given a job whose slot RUN (message m1) took while it was unheld: nobody displaced
    create(backend, job())
    assert backend.jobs.hold_and_read("job_a", run=RUN, message="m1", until=at(30), now=T0)[0]
    stood = backend.jobs.get_job("job_a")
    assert stood is not None and (stood.displaced_run, stood.displaced_message) == (None, None)
    # When OTHER (m2) takes the lapsed slot over, then answers with the job before its write
    held, before = backend.jobs.hold_and_read("job_a", run=OTHER, message="m2", until=at(90), now=at(60))
    assert held and before is not None and before.active_run == RUN
    # Then the job names RUN's message as the holder displaced, the trace a redelivery of m1 finds
    # even when the taker never read its answer (tests/sim seed 603)
    after = backend.jobs.get_job("job_a")
    assert after is not None and (after.displaced_run, after.displaced_message) == (RUN, "m1")
    # and a refused hold, a heartbeat and a release leave it as it is
    assert not backend.jobs.hold_and_read("job_a", run=RUN, message="m1", until=at(120), now=at(61))[0]
    assert backend.jobs.extend_hold("job_a", run=OTHER, until=at(100))
    assert backend.jobs.release_job("job_a", run=OTHER) is not None
    after = backend.jobs.get_job("job_a")
    assert after is not None and (after.displaced_run, after.displaced_message) == (RUN, "m1")
    # A hold of the unheld slot (hold_job too) records that it displaced nobody
    assert hold(backend, run=OTHER, message="m3", now=200, until=230)
    after = backend.jobs.get_job("job_a")
    assert after is not None and (after.displaced_run, after.displaced_message) == (None, None)
    assert hold(backend, run=RUN, message="m4", now=240, until=300)
    after = backend.jobs.get_job("job_a")
    assert after is not None and (after.displaced_run, after.displaced_message) == (OTHER, "m3")


def test_release_job_frees_the_slot_only_for_its_holder_and_answers_the_job_before(backend: Backend) -> None:
    create(backend, job())
    assert hold(backend)
    assert backend.jobs.release_job("job_a", run=OTHER) is None
    before = backend.jobs.release_job("job_a", run=RUN)
    assert before is not None and before.active_run == RUN
    after = backend.jobs.get_job("job_a")
    assert after is not None and after.active_run is None


def test_extend_hold_renews_only_the_holder(backend: Backend) -> None:
    create(backend, job())
    assert hold(backend, until=30)
    assert not backend.jobs.extend_hold("job_a", run=OTHER, until=at(90))
    assert backend.jobs.extend_hold("job_a", run=RUN, until=at(90))
    assert not hold(backend, run=OTHER, message="m2", now=60)  # still live at 60 s


def test_restore_hold_gives_a_taken_over_slot_back_only_from_the_receive_that_took_it(
    backend: Backend,
) -> None:
    # Given RUN's slot (message m1) lapsed and taken over by OTHER (message m2)
    create(backend, job())
    assert hold(backend, until=30)
    assert hold(backend, run=OTHER, message="m2", now=31, until=60)
    # Then another receive of OTHER, or a run that does not hold it, cannot give it back
    assert not backend.jobs.restore_hold(
        "job_a", run=RUN, message="m1", taker=OTHER, taker_message="m3", until=at(90)
    )
    assert not backend.jobs.restore_hold(
        "job_a", run=RUN, message="m1", taker=RUN, taker_message="m1", until=at(90)
    )
    # When the very receive that took it gives it back
    assert backend.jobs.restore_hold(
        "job_a", run=RUN, message="m1", taker=OTHER, taker_message="m2", until=at(90)
    )
    # Then RUN holds it again (its message, until 90 s): live, so OTHER cannot take it at 60 s
    after = backend.jobs.get_job("job_a")
    assert after is not None and (after.active_run, after.active_message) == (RUN, "m1")
    assert not hold(backend, run=OTHER, message="m2", now=60)


# -- start markers: the count, and cancel -----------------------------------------------------------
def test_a_run_in_flight_is_entered_renewed_and_removed_once(backend: Backend) -> None:
    # Given a job; when a run (message m1) enters, then the answer is the job before: no entry
    create(backend, job())
    counted, before = backend.jobs.count_and_read("job_a", run=RUN, message="m1", until=at(30), now=T0)
    assert counted and before is not None and before.in_flight == {}
    assert backend.jobs.get_job("job_a").in_flight == {f"{RUN}#m1": at(30)}  # type: ignore[union-attr]
    # and its heartbeat renews it, its end removes it, once
    assert backend.jobs.extend_count("job_a", run=RUN, message="m1", until=at(60))
    assert not backend.jobs.extend_count("job_a", run=RUN, message="m2", until=at(60))
    assert backend.jobs.uncount("job_a", run=RUN, message="m1")
    assert not backend.jobs.uncount("job_a", run=RUN, message="m1")
    assert not backend.jobs.extend_count("job_a", run=RUN, message="m1", until=at(90))
    assert backend.jobs.get_job("job_a").in_flight == {}  # type: ignore[union-attr]


def test_a_redelivery_re_enters_its_own_entry_and_is_never_counted_twice(backend: Backend) -> None:
    # Given a run whose receive (m1) entered and died, and another run in flight (m2)
    create(backend, job())
    assert backend.jobs.count_and_read("job_a", run=RUN, message="m1", until=at(30), now=T0)[0]
    assert backend.jobs.count_and_read("job_a", run=OTHER, message="m2", until=at(30), now=T0)[0]
    # When m1 comes back: it sees its own entry (the run started), and re-enters it
    counted, before = backend.jobs.count_and_read("job_a", run=RUN, message="m1", until=at(90), now=at(60))
    assert counted and before is not None and f"{RUN}#m1" in before.in_flight
    # Then its end removes the one entry; the other run's is left as it is
    assert backend.jobs.uncount("job_a", run=RUN, message="m1")
    assert backend.jobs.get_job("job_a").in_flight == {f"{OTHER}#m2": at(30)}  # type: ignore[union-attr]


def test_a_cancelled_job_counts_no_run(backend: Backend) -> None:
    create(backend, job())
    assert backend.jobs.cancel_job("job_a", now=T0, stale=None)[0]
    counted, stood = backend.jobs.count_and_read("job_a", run=RUN, message="m1", until=at(30), now=at(1))
    assert not counted and stood is not None and stood.status == JobStatus.CANCELLED
    assert backend.jobs.count_and_read("job_none", run=RUN, message="m1", until=at(30), now=T0) == (
        False,
        None,
    )


def test_cancel_is_refused_while_a_start_marker_is_live_and_applies_once_it_lapses(backend: Backend) -> None:
    create(backend, job())
    assert hold(backend, until=30)
    refused, stood = backend.jobs.cancel_job("job_a", now=at(10), stale=None)
    assert not refused and stood is not None and stood.status == JobStatus.SCHEDULED
    applied, after = backend.jobs.cancel_job("job_a", now=at(31), stale=None)
    assert applied and after is not None and after.status == JobStatus.CANCELLED and after.next_run_at is None


def test_cancel_passes_a_slot_held_by_a_finished_run(backend: Backend) -> None:
    create(backend, job())
    assert hold(backend, until=30)
    assert backend.jobs.cancel_job("job_a", now=at(10), stale=RUN)[0]


def test_cancel_is_refused_while_a_counted_run_is_live(backend: Backend) -> None:
    create(backend, job())
    assert backend.jobs.count_and_read("job_a", run=RUN, message="m1", until=at(30), now=T0)[0]
    assert not backend.jobs.cancel_job("job_a", now=at(10), stale=None)[0]
    assert backend.jobs.cancel_job("job_a", now=at(31), stale=None)[0]


def test_a_dead_runs_entry_lapses_on_its_own_though_the_jobs_other_runs_renew_theirs(
    backend: Backend,
) -> None:
    # Given a run in flight whose receive died (its entry until 30 s), and a live run renewing its own
    create(backend, job())
    assert backend.jobs.count_and_read("job_a", run=RUN, message="m1", until=at(30), now=T0)[0]
    assert backend.jobs.count_and_read("job_a", run=OTHER, message="m2", until=at(60), now=at(20))[0]
    assert backend.jobs.extend_count("job_a", run=OTHER, message="m2", until=at(90))
    # When the live run ends, and a cancel comes after the dead run's entry lapsed
    assert not backend.jobs.cancel_job("job_a", now=at(40), stale=None)[0]  # OTHER still in flight
    assert backend.jobs.uncount("job_a", run=OTHER, message="m2")
    applied, after = backend.jobs.cancel_job("job_a", now=at(41), stale=None)
    # Then it applies: no run is in flight (a bare count stayed at 1, its shared until renewed by
    # the live run, and refused every cancel while the job kept running: tests/sim seed 137)
    assert applied and after is not None and after.status == JobStatus.CANCELLED


def test_a_run_cancel_refuses_every_later_marker_of_that_run_and_of_no_other(backend: Backend) -> None:
    # Given a job; when a run cancel of RUN comes before any marker of it
    create(backend, job())
    after = backend.jobs.cancel_run("job_a", run=RUN)
    assert after is not None and after.cancelled_runs == frozenset({RUN}) and after.active_run is None
    # Then no marker of RUN is written, by any message, on either path; the answers show why
    assert not hold(backend)
    held, stood = backend.jobs.hold_and_read("job_a", run=RUN, message="m1", until=at(30), now=T0)
    assert not held and stood is not None and RUN in stood.cancelled_runs
    counted, stood = backend.jobs.count_and_read("job_a", run=RUN, message="m2", until=at(30), now=T0)
    assert not counted and stood is not None and stood.in_flight == {}
    # and the job's other runs start as before
    assert backend.jobs.count_and_read("job_a", run=OTHER, message="m3", until=at(30), now=T0)[0]
    assert hold(backend, run=OTHER, message="m4")
    assert backend.jobs.cancel_run("job_none", run=RUN) is None


def test_a_run_cancel_after_a_marker_answers_it(backend: Backend) -> None:
    # Given a run counted in flight (its receive got past its marker), and a held one
    create(backend, job())
    assert backend.jobs.count_and_read("job_a", run=RUN, message="m1", until=at(30), now=T0)[0]
    assert hold(backend, run=OTHER, message="m2")
    # When a run cancel of each comes: its one write answers the marker (the run started)
    counted = backend.jobs.cancel_run("job_a", run=RUN)
    assert counted is not None and f"{RUN}#m1" in counted.in_flight
    held = backend.jobs.cancel_run("job_a", run=OTHER)
    assert held is not None and held.active_run == OTHER and held.cancelled_runs == {RUN, OTHER}
    # Then a definition's save leaves the set as it is (a run-time attribute)
    stored = backend.jobs.get_job("job_a")
    assert stored is not None and backend.jobs.save_definition(stored, expected_version=stored.version)
    assert backend.jobs.get_job("job_a").cancelled_runs == {RUN, OTHER}  # type: ignore[union-attr]


def test_a_jobs_cancelled_runs_keep_the_newest_and_always_the_one_just_cancelled(backend: Backend) -> None:
    create(backend, job())
    ticks = [times.stored(at(60 * i)) for i in range(MAX_CANCELLED_RUNS + 1)]
    for tick in ticks[1:]:
        assert backend.jobs.cancel_run("job_a", run=tick) is not None
    # When the oldest tick is cancelled last, over the bound: it is kept, the oldest other one goes
    after = backend.jobs.cancel_run("job_a", run=ticks[0])
    assert after is not None and len(after.cancelled_runs) == MAX_CANCELLED_RUNS
    assert ticks[0] in after.cancelled_runs and ticks[1] not in after.cancelled_runs
    assert backend.jobs.get_job("job_a").cancelled_runs == after.cancelled_runs  # type: ignore[union-attr]


# -- shard leases -------------------------------------------------------------------------------------
def test_a_shard_lease_is_exclusive_until_it_expires_and_reentrant_for_its_owner(backend: Backend) -> None:
    first = backend.jobs.acquire_shard(0, owner="d1", now=T0, lease_seconds=30)
    assert first is not None and first.watermark is None
    assert backend.jobs.acquire_shard(0, owner="d2", now=at(10), lease_seconds=30) is None
    assert backend.jobs.acquire_shard(0, owner="d1", now=at(10), lease_seconds=30) is not None
    assert backend.jobs.acquire_shard(0, owner="d2", now=at(41), lease_seconds=30) is not None


def test_release_shard_keeps_the_watermark_for_the_next_pass_unless_the_lease_was_lost(
    backend: Backend,
) -> None:
    lease = backend.jobs.acquire_shard(1, owner="d1", now=T0, lease_seconds=30)
    assert lease is not None and backend.jobs.release_shard(lease, watermark="2026-11-30T12:00")
    again = backend.jobs.acquire_shard(1, owner="d2", now=at(1), lease_seconds=30)
    assert again is not None and again.watermark == "2026-11-30T12:00"
    assert not backend.jobs.release_shard(lease, watermark="2026-11-30T12:05")  # d2 holds it now
    assert backend.jobs.acquire_shard(1, owner="d3", now=at(2), lease_seconds=30) is None


def test_rewire_moves_the_edges_with_the_new_upstreams_if_the_version_is_unchanged(backend: Backend) -> None:
    for up in ("job_u1", "job_u2"):
        create(backend, job(up))
    down = create(backend, job("job_down", depends_on=("job_u1",), root_schedule="job_u1"))
    moved = down.model_copy(
        update={"depends_on": ("job_u2",), "root_schedule": "job_u2", "updated_at": at(1)}
    )
    assert not backend.jobs.rewire(
        moved, expected_version=down.version + 1, added=["job_u2"], removed=["job_u1"]
    )
    assert backend.jobs.rewire(moved, expected_version=down.version, added=["job_u2"], removed=["job_u1"])
    u1, u2, after = (backend.jobs.get_job(j) for j in ("job_u1", "job_u2", "job_down"))
    assert u1 is not None and u1.dependants == ()
    assert u2 is not None and u2.dependants == ("job_down",)
    assert after is not None and after.depends_on == ("job_u2",) and after.version == down.version + 1


def test_a_job_s_completion_can_free_its_slot_in_the_same_write(backend: Backend) -> None:
    create(backend, job())
    assert hold(backend)
    applied, after = backend.jobs.set_job_status(
        "job_a",
        target=JobStatus.COMPLETED,
        sources=[JobStatus.SCHEDULED],
        now=at(1),
        leave_index=True,
        release_slot=True,
    )
    assert applied and after is not None and after.active_run is None
