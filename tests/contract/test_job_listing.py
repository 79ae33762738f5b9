"""The JobStore.list_jobs contract (jobsched.ports): a tenant's index partition, never a scan."""

from __future__ import annotations

from datetime import timedelta

from jobsched.domain.listing import JobFilter
from jobsched.domain.status import JobStatus
from tests.contract.conftest import T0, Backend, create, job

EVERYTHING = JobFilter()


def listed(
    backend: Backend, tenant: str, *, where: JobFilter = EVERYTHING, order: str = "created", limit: int = 100
) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        page = backend.jobs.list_jobs(tenant, order=order, where=where, cursor=cursor, limit=limit)
        ids.extend(j.job_id for j in page.jobs)
        cursor = page.cursor
        if cursor is None:
            return ids


def test_a_listing_reads_the_callers_jobs_only_however_many_others_are_stored(backend: Backend) -> None:
    # Given 5 jobs of tenant t1 and 40 of tenant t2
    for i in range(5):
        create(backend, job(f"job_a{i}", created_at=T0 + timedelta(seconds=i)))
    for i in range(40):
        create(backend, job(f"job_b{i:02d}", tenant="t2", created_at=T0 + timedelta(seconds=i)))
    # When t1 lists its jobs in one page
    page = backend.jobs.list_jobs("t1", order="created", where=EVERYTHING, cursor=None, limit=100)
    # Then it gets its 5 jobs, newest first, having read 5 items of the 45 stored
    assert [j.job_id for j in page.jobs] == [f"job_a{i}" for i in reversed(range(5))]
    assert page.items_read == 5 and page.cursor is None


def test_pages_follow_the_cursor_without_repeats_or_gaps(backend: Backend) -> None:
    for i in range(7):
        create(backend, job(f"job_a{i}", created_at=T0 + timedelta(seconds=i)))
    assert listed(backend, "t1", limit=3) == [f"job_a{i}" for i in reversed(range(7))]


def test_by_next_run_lists_soonest_first_and_leaves_out_jobs_without_a_pending_tick(backend: Backend) -> None:
    create(backend, job("job_late", next_run_at=T0 + timedelta(hours=2)))
    create(backend, job("job_soon", next_run_at=T0 + timedelta(minutes=5)))
    create(backend, job("job_none", type="dependent", cron_expr=None, next_run_at=None, depends_on=()))
    assert listed(backend, "t1", order="next_run", limit=1) == ["job_soon", "job_late"]


def test_filters_on_status_type_name_prefix_tag_and_target_narrow_the_page(backend: Backend) -> None:
    create(backend, job("job_1", name="nightly-report", tags={"env": "prod"}))
    create(
        backend,
        job("job_2", name="nightly-backup", tags={"env": "dev"}, created_at=T0 + timedelta(seconds=1)),
    )
    create(
        backend, job("job_3", name="hourly", status=JobStatus.PAUSED, created_at=T0 + timedelta(seconds=2))
    )
    create(
        backend, job("job_4", type="one_off", cron_expr=None, run_at=T0, created_at=T0 + timedelta(seconds=3))
    )
    assert listed(backend, "t1", where=JobFilter(name_prefix="nightly")) == ["job_2", "job_1"]
    assert listed(backend, "t1", where=JobFilter(tag="env:prod")) == ["job_1"]
    assert listed(backend, "t1", where=JobFilter(status="PAUSED")) == ["job_3"]
    assert listed(backend, "t1", where=JobFilter(type="one_off")) == ["job_4"]
    assert listed(backend, "t1", where=JobFilter(target="python")) == ["job_4", "job_3", "job_2", "job_1"]
    assert listed(backend, "t1", where=JobFilter(target="http")) == []
    # A filter reads what it drops: a one-item page of the prod job reads up to it, not past it
    page = backend.jobs.list_jobs(
        "t1", order="created", where=JobFilter(tag="env:prod"), cursor=None, limit=1
    )
    assert [j.job_id for j in page.jobs] == ["job_1"] and page.items_read == 4


def test_tags_set_by_an_edit_are_what_the_filter_sees(backend: Backend) -> None:
    stored = create(backend, job("job_1", tags={"env": "dev"}))
    assert backend.jobs.save_definition(
        stored.model_copy(update={"tags": {"env": "prod"}}), expected_version=1
    )
    assert listed(backend, "t1", where=JobFilter(tag="env:prod")) == ["job_1"]
    assert listed(backend, "t1", where=JobFilter(tag="env:dev")) == []
    got = backend.jobs.get_job("job_1")
    assert got is not None and got.tags == {"env": "prod"}


# --- JobStore.count_by_status (the console's counts per status) -----------------------------------


def test_counts_per_status_cover_the_callers_whole_partition_and_no_other(backend: Backend) -> None:
    # Given tenant t1's jobs in three statuses (more than one listing page of 2) and t2's jobs
    statuses = [JobStatus.SCHEDULED] * 3 + [JobStatus.PAUSED] * 2 + [JobStatus.CANCELLED]
    for i, status in enumerate(statuses):
        create(backend, job(f"job_a{i}", status=status, created_at=T0 + timedelta(seconds=i)))
    for i in range(4):
        create(backend, job(f"job_b{i}", tenant="t2", status=JobStatus.PAUSED))
    # When t1 counts them per status
    counted = backend.jobs.count_by_status("t1", where=EVERYTHING, stop_at=100)
    # Then every one of its jobs is counted once, by status, and none of t2's
    assert counted.counts == {"SCHEDULED": 3, "PAUSED": 2, "CANCELLED": 1}
    assert counted.complete and counted.items_read == 6
    assert backend.jobs.count_by_status("t3", where=EVERYTHING, stop_at=100).counts == {}


def test_counts_per_status_follow_the_filter_but_not_its_status(backend: Backend) -> None:
    create(backend, job("job_1", name="nightly-a", tags={"env": "prod"}))
    create(
        backend, job("job_2", name="nightly-b", status=JobStatus.PAUSED, created_at=T0 + timedelta(seconds=1))
    )
    create(backend, job("job_3", name="hourly", created_at=T0 + timedelta(seconds=2)))
    create(
        backend, job("job_4", type="one_off", cron_expr=None, run_at=T0, created_at=T0 + timedelta(seconds=3))
    )
    assert backend.jobs.count_by_status(
        "t1", where=JobFilter(name_prefix="nightly", status="PAUSED"), stop_at=100
    ).counts == {"SCHEDULED": 1, "PAUSED": 1}
    assert backend.jobs.count_by_status("t1", where=JobFilter(tag="env:prod"), stop_at=100).counts == {
        "SCHEDULED": 1
    }
    assert backend.jobs.count_by_status("t1", where=JobFilter(type="one_off"), stop_at=100).counts == {
        "SCHEDULED": 1
    }


def test_counts_per_status_stop_at_their_bound_and_say_they_are_lower_bounds(backend: Backend) -> None:
    # Given 5 jobs, when they are counted with a bound of 3 index items
    for i in range(5):
        create(backend, job(f"job_a{i}", created_at=T0 + timedelta(seconds=i)))
    counted = backend.jobs.count_by_status("t1", where=EVERYTHING, stop_at=3)
    # Then the newest 3 are counted, no more, and the answer says it is incomplete
    assert counted.counts == {"SCHEDULED": 3}
    assert counted.items_read == 3 and not counted.complete
