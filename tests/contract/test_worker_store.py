"""The WorkerStore contract (jobsched.ports): workers, their holds, and each pool's queue; on the
in-memory fake and on DynamoDB (moto), with racing placers on threads."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import boto3
import pytest
from moto import mock_aws

from jobsched import resources
from jobsched.adapters.dynamodb.workers import WorkerStore as DynamoWorkerStore
from jobsched.adapters.memory import MemoryWorkerStore
from jobsched.domain.placement import Resources
from jobsched.domain.workers import Hold, QueuedRun, Worker
from jobsched.ports import WorkerStore
from tests.contract.conftest import T0


@pytest.fixture(params=["memory", "moto"])
def store(request: pytest.FixtureRequest) -> Iterator[WorkerStore]:
    if request.param == "memory":
        yield MemoryWorkerStore()
        return
    with mock_aws():
        made = resources.create_local_resources(
            prefix="workers", dynamodb=boto3.client("dynamodb"), sqs=boto3.client("sqs")
        )
        yield DynamoWorkerStore(
            client=boto3.client("dynamodb"), table=made[resources.WORKERS_TABLE.logical_id]
        )


def _worker(worker_id: str = "w1", *, tenant: str = "t1", pool: str = "gpu", cpu: int = 4096) -> Worker:
    return Worker(
        worker_id=worker_id,
        tenant=tenant,
        pool=pool,
        capacity=Resources(cpu=cpu, memory_mib=8192, gpus=1),
        labels={"zone": "a"},
        registered_at=T0,
        last_heartbeat=T0,
    )


def _hold(run_id: str, *, cpu: int = 1024) -> Hold:
    return Hold(
        run_id=run_id,
        job_id="j1",
        scheduled_for="2026-11-30T12:00:00.000Z",
        resources=Resources(cpu=cpu, memory_mib=1024),
        until=T0 + timedelta(seconds=15),
        enqueued_at=T0,
    )


def test_a_registered_worker_is_read_back_by_its_tenant_only(store: WorkerStore) -> None:
    # Given a registered worker
    assert store.register(_worker())
    # When its tenant and another read it
    # Then its tenant sees it as registered, the other tenant sees nothing, and its id is taken
    assert store.get_worker("t1", "w1") == _worker()
    assert store.get_worker("t2", "w1") is None
    assert not store.register(_worker())
    assert store.list_workers("t2") == []


def test_the_listing_filters_by_pool(store: WorkerStore) -> None:
    store.register(_worker("w1", pool="gpu"))
    store.register(_worker("w2", pool="cpu"))
    assert [w.worker_id for w in store.list_workers("t1")] == ["w1", "w2"]
    assert [w.worker_id for w in store.list_workers("t1", pool="cpu")] == ["w2"]


def test_a_heartbeat_records_what_the_worker_reports_and_keeps_its_holds(store: WorkerStore) -> None:
    store.register(_worker())
    assert store.reserve("t1", "w1", hold=_hold("r1"), expected_version=1)
    # When the worker heartbeats
    after = store.heartbeat(
        "t1", "w1", now=T0 + timedelta(seconds=10), free=Resources(cpu=3072), runs={"r1": "RUNNING"}
    )
    # Then its heartbeat and report are stored, its holds and version unchanged
    assert after is not None
    assert after.last_heartbeat == T0 + timedelta(seconds=10)
    assert after.reported_free == Resources(cpu=3072) and after.reported_runs == {"r1": "RUNNING"}
    assert list(after.holds) == ["r1"] and after.version == 2
    assert store.get_worker("t1", "w1") == after


def test_a_reservation_is_a_compare_and_set_on_the_workers_version(store: WorkerStore) -> None:
    store.register(_worker())
    # Given a placer that read version 1 and reserved
    assert store.reserve("t1", "w1", hold=_hold("r1"), expected_version=1)
    # When a second placer that also read version 1 reserves
    # Then it is refused, and so is a second hold on the same run
    assert not store.reserve("t1", "w1", hold=_hold("r2"), expected_version=1)
    assert not store.reserve("t1", "w1", hold=_hold("r1"), expected_version=2)
    worker = store.get_worker("t1", "w1")
    assert worker is not None and list(worker.holds) == ["r1"] and worker.version == 2
    assert worker.free() == Resources(cpu=3072, memory_mib=7168, gpus=1)


def test_an_ack_confirms_a_reservation_and_a_repeated_ack_changes_nothing(store: WorkerStore) -> None:
    store.register(_worker())
    store.reserve("t1", "w1", hold=_hold("r1"), expected_version=1)
    assert store.confirm("t1", "w1", run_id="r1", now=T0)
    worker = store.get_worker("t1", "w1")
    assert worker is not None and worker.holds["r1"].state == "confirmed"
    assert store.confirm("t1", "w1", run_id="r1", now=T0)
    again = store.get_worker("t1", "w1")
    assert again is not None and again.version == worker.version
    assert not store.confirm("t1", "w1", run_id="r9", now=T0)


def test_a_release_of_reservations_only_leaves_a_confirmed_hold(store: WorkerStore) -> None:
    store.register(_worker())
    store.reserve("t1", "w1", hold=_hold("r1"), expected_version=1)
    store.confirm("t1", "w1", run_id="r1", now=T0)
    assert not store.release("t1", "w1", run_id="r1", only=_hold("r1"))
    assert store.release("t1", "w1", run_id="r1")
    assert not store.release("t1", "w1", run_id="r1")
    worker = store.get_worker("t1", "w1")
    assert worker is not None and worker.holds == {}


def _queued_of(hold: Hold) -> QueuedRun:
    return QueuedRun(
        tenant="t1",
        pool="gpu",
        run_id=hold.run_id,
        job_id=hold.job_id,
        scheduled_for=hold.scheduled_for,
        resources=hold.resources,
        enqueued_at=hold.enqueued_at,
    )


def test_a_lapsed_reservation_is_released_and_queued_again_in_one_step(store: WorkerStore) -> None:
    # Given a reservation, read back from the store as a sweep reads it
    store.register(_worker())
    store.reserve("t1", "w1", hold=_hold("r1"), expected_version=1)
    worker = store.get_worker("t1", "w1")
    assert worker is not None
    lapsed = worker.holds["r1"]
    # When a sweep requeues it
    assert store.requeue_lapsed("t1", "w1", hold=lapsed, run=_queued_of(lapsed))
    # Then the worker holds nothing and the run waits at its old place in the queue
    after = store.get_worker("t1", "w1")
    assert after is not None and after.holds == {} and after.version == worker.version + 1
    assert [r.run_id for r in store.waiting("t1", "gpu", limit=10)] == ["r1"]


def test_a_stale_requeue_leaves_the_runs_new_reservation_and_the_queue_alone(store: WorkerStore) -> None:
    # Given a lapsed reservation that one sweep requeued and then placed again on the same worker
    store.register(_worker())
    store.reserve("t1", "w1", hold=_hold("r1"), expected_version=1)
    worker = store.get_worker("t1", "w1")
    assert worker is not None
    lapsed = worker.holds["r1"]
    assert store.requeue_lapsed("t1", "w1", hold=lapsed, run=_queued_of(lapsed))
    again = lapsed.model_copy(update={"until": lapsed.until + timedelta(seconds=30)})
    assert store.reserve("t1", "w1", hold=again, expected_version=worker.version + 1)
    assert store.dequeue(_queued_of(lapsed))
    # When a second sweep, which read the worker before all that, requeues the same lapsed hold
    # Then it is refused: the new reservation stands and the run is not queued a second time
    assert not store.requeue_lapsed("t1", "w1", hold=lapsed, run=_queued_of(lapsed))
    assert not store.release("t1", "w1", run_id="r1", only=lapsed)
    held = store.get_worker("t1", "w1")
    assert held is not None and held.holds["r1"].until == again.until
    assert store.waiting("t1", "gpu", limit=10) == []
    # And a confirmed hold is never taken for a lapsed reservation
    store.confirm("t1", "w1", run_id="r1", now=T0)
    assert not store.requeue_lapsed("t1", "w1", hold=again, run=_queued_of(again))
    assert store.release("t1", "w1", run_id="r1", only=None)


def test_a_dead_worker_drops_its_holds_and_refuses_heartbeats_and_reservations(store: WorkerStore) -> None:
    store.register(_worker())
    store.reserve("t1", "w1", hold=_hold("r1"), expected_version=1)
    # When it is marked dead at a stale version, then at its version
    assert store.mark_dead("t1", "w1", expected_version=1) is None
    before = store.mark_dead("t1", "w1", expected_version=2)
    # Then the answer shows the holds it had, and the stored worker is DEAD with none
    assert before is not None and list(before.holds) == ["r1"]
    dead = store.get_worker("t1", "w1")
    assert dead is not None and dead.status == "DEAD" and dead.holds == {}
    # And it takes no heartbeat, no reservation, no ack
    hb = store.heartbeat("t1", "w1", now=T0 + timedelta(seconds=60), free=None, runs={})
    assert hb is not None and hb.status == "DEAD" and hb.last_heartbeat == T0
    assert not store.reserve("t1", "w1", hold=_hold("r2"), expected_version=dead.version)
    assert not store.confirm("t1", "w1", run_id="r1", now=T0)
    assert store.heartbeat("t1", "nobody", now=T0, free=None, runs={}) is None


def test_the_pool_queue_answers_oldest_first_and_holds_each_run_once(store: WorkerStore) -> None:
    def queued(run_id: str, seconds: int, *, pool: str = "gpu") -> QueuedRun:
        return QueuedRun(
            tenant="t1",
            pool=pool,
            run_id=run_id,
            job_id="j1",
            scheduled_for="2026-11-30T12:00:00.000Z",
            resources=Resources(cpu=1024),
            enqueued_at=T0 + timedelta(seconds=seconds),
        )

    assert store.enqueue(queued("late", 5))
    assert store.enqueue(queued("early", 1))
    assert store.enqueue(queued("other-pool", 0, pool="cpu"))
    assert not store.enqueue(queued("early", 1))
    assert [r.run_id for r in store.waiting("t1", "gpu", limit=10)] == ["early", "late"]
    assert store.dequeue(queued("early", 1))
    assert not store.dequeue(queued("early", 1))
    assert [r.run_id for r in store.waiting("t1", "gpu", limit=10)] == ["late"]
    assert store.waiting("t2", "gpu", limit=10) == []
    assert store.is_queued(queued("late", 5))
    assert not store.is_queued(queued("early", 1))  # dequeued
    assert not store.is_queued(queued("late", 6))  # not at that enqueued_at


def test_the_pool_queue_pages_oldest_first_from_a_cursor_and_never_shows_another_tenants(
    store: WorkerStore,
) -> None:
    # Given three runs waiting in t1's pool "gpu", and one in t2's pool of the same name
    def queued(run_id: str, seconds: int, *, tenant: str = "t1") -> QueuedRun:
        return QueuedRun(
            tenant=tenant,
            pool="gpu",
            run_id=run_id,
            job_id="j1",
            scheduled_for="2026-11-30T12:00:00.000Z",
            resources=Resources(cpu=1024),
            enqueued_at=T0 + timedelta(seconds=seconds),
        )

    for run in (queued("c", 3), queued("a", 1), queued("b", 2), queued("theirs", 0, tenant="t2")):
        assert store.enqueue(run)
    # When t1 pages through it two at a time
    first, cursor = store.waiting_page("t1", "gpu", start=None, limit=2)
    assert cursor is not None
    second, end = store.waiting_page("t1", "gpu", start=cursor, limit=2)
    # Then it sees its own runs, oldest first, each once, and the last page ends the queue
    assert [r.run_id for r in first] == ["a", "b"]
    assert ([r.run_id for r in second], end) == (["c"], None)
    assert set(cursor) == {"PK", "SK"}
    # And t2's queue of the same pool name holds only its own
    assert [r.run_id for r in store.waiting_page("t2", "gpu", start=None, limit=10)[0]] == ["theirs"]
    assert store.waiting_page("t3", "gpu", start=None, limit=10) == ([], None)


def test_racing_placers_on_threads_never_oversubscribe_a_worker(store: WorkerStore) -> None:
    if isinstance(store, DynamoWorkerStore):
        pytest.skip(
            "moto in-process is not thread-safe; the racing placers run on moto_server in"
            " tests/integration/test_worker_pool_race.py"
        )
    race_placers(store)


def race_placers(store: WorkerStore) -> None:
    """Eight placers race for 1 vCPU each on a worker with 4 free: exactly four win, no more."""
    # Given a worker with 4 vCPUs free and eight placers that each want 1 vCPU on it
    store.register(_worker(cpu=4096))
    barrier = threading.Barrier(8)
    won: list[str] = []

    def place(run_id: str) -> None:
        barrier.wait(timeout=30)
        for _ in range(20):  # read, check the fit, compare-and-set; re-read when another won
            worker = store.get_worker("t1", "w1")
            assert worker is not None
            if not Resources(cpu=1024, memory_mib=1024).fits_in(worker.free()):
                return
            if store.reserve("t1", "w1", hold=_hold(run_id), expected_version=worker.version):
                won.append(run_id)
                return

    threads = [threading.Thread(target=place, args=(f"r{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    # Then exactly four won, and the worker holds exactly their 4 vCPUs
    worker = store.get_worker("t1", "w1")
    assert worker is not None
    assert len(won) == 4 and sorted(worker.holds) == sorted(won)
    assert worker.free().cpu == 0
