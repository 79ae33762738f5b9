"""The PackStore contract (jobsched.ports), and what the JobStore and RunStore answer about packs:
a pack's definitions written once, its cursor in the due and listing indexes, a copy-out that is one
transaction with its run row's flag, and a packed start that a flagged row refuses."""

from __future__ import annotations

from datetime import timedelta

from jobsched.domain import times
from jobsched.domain.listing import JobFilter
from jobsched.domain.models import Execution, Job
from jobsched.domain.packs import PACK_TYPE, Pack, PackedDefinition, PackEntry, pack_entry_id, packed_job_id
from jobsched.domain.records import Lease, NewRun
from jobsched.domain.status import JobStatus, RunStatus
from jobsched.domain.targets import PythonTarget
from tests.contract.conftest import T0, Backend, at, create, job

PACK = "0" * 25 + "1"


def pack(*seconds: int, pack_id: str = PACK, tenant: str = "t1", digest: str = "h1") -> Pack:
    """A pack of one-offs due `seconds` after T0, created at T0."""
    return Pack(
        pack_id=pack_id,
        tenant=tenant,
        created_at=T0,
        request_hash=digest,
        definitions=tuple(
            PackedDefinition(
                job_id=packed_job_id(pack_id, i),
                tenant=tenant,
                target=PythonTarget(handler="demo.echo"),
                payload={"i": i},
                run_at=at(s),
                name=f"p{i}",
                created_at=T0,
            )
            for i, s in enumerate(seconds)
        ),
    )


def sf_of(p: Pack, index: int) -> str:
    return times.stored(p.definitions[index].run_at)


def test_put_pack_writes_its_definitions_once_and_answers_the_stored_pack_to_a_retry(
    backend: Backend,
) -> None:
    first = pack(30, 600)
    assert backend.packs.put_pack(first, now=T0) is None
    # A retry (another digest, as a changed batch) writes nothing and answers what is stored
    again = backend.packs.put_pack(pack(31, digest="h2"), now=T0)
    assert again == first
    assert backend.packs.get_pack(PACK) == first
    assert backend.packs.get_pack("9" * 26) is None


def test_a_packs_cursor_is_due_at_its_first_job_and_moves_by_compare_and_set(backend: Backend) -> None:
    # Given a pack due at +30 s and +600 s
    p = pack(600, 30)
    backend.packs.put_pack(p, now=T0)
    # Then the due index holds its cursor at +30 s, as an entry of type "pack"
    entries = due(backend, until=at(60))
    assert [(e.job_id, e.type, e.next_run_at) for e in entries] == [(pack_entry_id(PACK), PACK_TYPE, at(30))]
    # When it moves from +30 s to +600 s, twice (the second from a stale read)
    assert backend.packs.move_cursor(PACK, expected=at(30), next_run_at=at(600), now=T0)
    assert not backend.packs.move_cursor(PACK, expected=at(30), next_run_at=at(600), now=T0)
    # Then it is due at +600 s only; moved to None it leaves the index
    assert due(backend, until=at(60)) == []
    assert [e.next_run_at for e in due(backend, until=at(700))] == [at(600)]
    assert backend.packs.move_cursor(PACK, expected=at(600), next_run_at=None, now=T0)
    assert due(backend, until=at(3600)) == []


def due(backend: Backend, *, until: object) -> list:
    out = []
    for minute in range(0, 70):
        bucket = times.bucket(T0 + timedelta(minutes=minute))
        for shard in range(4):
            out += backend.jobs.due_page(f"{bucket}#{shard}", until=until, cursor=None, limit=100).entries
    return out


def test_the_listing_answers_a_packs_cursor_among_the_jobs_whatever_the_filter(backend: Backend) -> None:
    # Given a job created before a pack of three and one after it
    create(backend, job("job_old", created_at=T0 - timedelta(seconds=5)))
    backend.packs.put_pack(pack(30, 60, 90), now=T0)
    create(backend, job("job_new", created_at=T0 + timedelta(seconds=5)))
    # When the tenant lists newest first, with a filter the pack's cursor cannot be asked
    page = backend.jobs.list_jobs(
        "t1", order="created", where=JobFilter(name_prefix="zz"), cursor=None, limit=10
    )
    unfiltered = backend.jobs.list_jobs("t1", order="created", where=JobFilter(), cursor=None, limit=10)
    # Then the pack stands for its jobs in its place, and the filter drops the job items only
    assert [e.pack_id for e in page.entries] == [PACK]
    kinds = [e.pack_id if isinstance(e, PackEntry) else e.job_id for e in unfiltered.entries]
    assert kinds == ["job_new", PACK, "job_old"]
    entry = unfiltered.entries[1]
    assert isinstance(entry, PackEntry) and entry.count == 3 and entry.created_at == T0
    # (by next run, the pack's cursor is listed at its next hand-over, which it answers)
    by_next = backend.jobs.list_jobs("t1", order="next_run", where=JobFilter(), cursor=None, limit=10)
    assert [e.next_run_at for e in by_next.entries if isinstance(e, PackEntry)] == [at(30)]
    # and a cursor made from the key before the pack continues at the pack
    assert unfiltered.before is not None
    again = backend.jobs.list_jobs(
        "t1", order="created", where=JobFilter(), cursor=unfiltered.before[1], limit=10
    )
    assert isinstance(again.entries[0], PackEntry)
    # and its jobs count as live for max_jobs while it has jobs to hand over
    assert backend.jobs.count_jobs("t1", statuses=[JobStatus.SCHEDULED], stop_at=100) == 5
    backend.packs.move_cursor(PACK, expected=at(30), next_run_at=None, now=T0)
    assert backend.jobs.count_jobs("t1", statuses=[JobStatus.SCHEDULED], stop_at=100) == 2


def materialized_job(p: Pack, index: int, row: Execution | None) -> Job:
    return p.definitions[index].job(row=row, packed=False)


def test_a_copy_out_writes_the_job_and_flags_its_run_row_at_once(backend: Backend) -> None:
    # Given a packed job with no run row yet
    p = pack(30)
    backend.packs.put_pack(p, now=T0)
    job_id, sf = p.definitions[0].job_id, sf_of(p, 0)
    # When it is copied out
    assert backend.packs.materialize(materialized_job(p, 0, None), row=None, scheduled_for=sf)
    # Then its item exists, SCHEDULED with its tick, and its row is PENDING, flagged
    stored = backend.jobs.get_job(job_id)
    assert stored is not None and stored.status == JobStatus.SCHEDULED and stored.next_run_at == at(30)
    row = backend.runs.get(job_id, sf)
    assert row is not None and row.status == RunStatus.PENDING and row.materialized and row.attempt == 0
    # and a second copy-out is refused
    assert not backend.packs.materialize(materialized_job(p, 0, None), row=None, scheduled_for=sf)


def test_a_copy_out_is_refused_when_the_row_moved_since_it_was_read(backend: Backend) -> None:
    # Given a packed job's row read absent, then its run started (a packed start)
    p = pack(30)
    backend.packs.put_pack(p, now=T0)
    job_id, sf = p.definitions[0].job_id, sf_of(p, 0)
    lease = Lease(owner="w/1", message="m1", worker="w", until=at(300))
    start = backend.runs.persist_running(
        job_id, sf, lease=lease, started_at=at(30), now=at(30), create=NewRun(job_id, "t1", sf), packed=True
    )
    assert start.applied
    # When a copy-out made from the stale read is tried
    refused = backend.packs.materialize(materialized_job(p, 0, None), row=None, scheduled_for=sf)
    # Then it writes nothing; made from the row as it stands now, it applies and keeps the run's lease
    assert not refused and backend.jobs.get_job(job_id) is None
    row = backend.runs.get(job_id, sf)
    assert backend.packs.materialize(materialized_job(p, 0, row), row=row, scheduled_for=sf)
    after = backend.runs.get(job_id, sf)
    assert after is not None and after.materialized and after.status == RunStatus.RUNNING
    assert after.lease_owner == "w/1"


def test_a_packed_start_is_refused_by_a_flagged_row_and_an_ordinary_claim_is_not(backend: Backend) -> None:
    # Given a packed job copied out before its run
    p = pack(30)
    backend.packs.put_pack(p, now=T0)
    job_id, sf = p.definitions[0].job_id, sf_of(p, 0)
    backend.packs.materialize(materialized_job(p, 0, None), row=None, scheduled_for=sf)
    lease = Lease(owner="w/1", message="m1", worker="w", until=at(300))
    created = NewRun(job_id, "t1", sf)
    # When a packed start and a packed claim meet its flagged PENDING row
    start = backend.runs.persist_running(
        job_id, sf, lease=lease, started_at=at(30), now=at(30), create=created, packed=True
    )
    claim = backend.runs.claim(job_id, sf, lease=lease, now=at(30), create=created, packed=True)
    # Then both are refused with the row; the job item's path (an ordinary claim) takes it
    assert not start.applied and start.row is not None and start.row.materialized
    assert not claim.applied
    assert backend.runs.claim(job_id, sf, lease=lease, now=at(30), create=created).applied


def test_get_many_answers_the_rows_that_exist(backend: Backend) -> None:
    p = pack(30, 60)
    backend.packs.put_pack(p, now=T0)
    keys = [(d.job_id, times.stored(d.run_at)) for d in p.definitions]
    backend.runs.put_pending(job_id=keys[1][0], tenant="t1", scheduled_for=at(60), now=T0)
    found = backend.runs.get_many(keys)
    assert list(found) == [keys[1]] and found[keys[1]].status == RunStatus.PENDING
