"""The ECS Fargate worker: the Lambda worker's run path in a long-running process on its own queue.

`python -m jobsched.ecsworker` is the container's command (infra/jobsched_infra/constructs/ecs.py) and
what `jobsched local` starts as a child process. It builds the same services as every function
(jobsched.wiring, settings from the environment, JOBSCHED_WORKER_LANE=ecs) and hands each message to
the same Worker.process: leases, heartbeat, overlap, retries, dead letter and DAG release are the
Lambda worker's own. Only the loop around it differs, and plays what the SQS event-source mapping
does for the Lambda worker:

    long poll (20 s) the ECS queue ──> each message on a thread (at most `concurrency` at once)
        │ trusted sender? no ──> delete (nothing ran, nothing written)
        v
    Worker.process: the visibility timeout is the lease; the heartbeat extends it
        │ (ChangeMessageVisibility on this queue) every lease/3 s while the handler runs, up to
        │ the job's timeout, after which the run path fails the attempt with Timeout
        v
    an outcome ──> delete the message      an exception ──> leave it: it returns after its lease

    SIGTERM (ECS scales in, or a deploy): stop receiving; runs in progress get `grace` seconds to
    finish (below the task definition's stopTimeout); the messages of those still running then are
    handed back (visibility 0) so another task takes them over once their row lease lapses, as it
    would after a crash: at least once, no lost run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger

from jobsched.domain.operations import OperationMessage, is_operation_message
from jobsched.domain.senders import trusted
from jobsched.services.run import Delivery, Outcome

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

    from jobsched.services.operations import OperationService
    from jobsched.services.run import Worker

logger = Logger(service="jobsched-ecs-worker")

LONG_POLL_SECONDS = 20  # SQS's longest: an idle task costs one ReceiveMessage per 20 s
# Below ECS's default stopTimeout (30 s) between SIGTERM and SIGKILL: time to hand back what still runs.
GRACE_SECONDS = 25
# With short polls (wait_seconds 0: the local stack), how long an empty receive waits before the next.
SHORT_POLL_IDLE_SECONDS = 0.2


@dataclass
class EcsWorker:
    """Receives runs from the ECS queue and runs each through the shared Worker (see the module docstring)."""

    sqs: SQSClient
    queue_url: str
    worker: Worker
    trusted_senders: tuple[str, ...]
    operations: OperationService | None = None
    concurrency: int = 10
    wait_seconds: int = LONG_POLL_SECONDS
    grace_seconds: float = GRACE_SECONDS
    stopping: threading.Event = field(default_factory=threading.Event)
    _pool: ThreadPoolExecutor | None = None
    _running: dict[str, tuple[str, Future[Any]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="jobsched-ecs-run")
        self._free = threading.Semaphore(self.concurrency)

    def serve(self) -> None:
        """Poll until stop() is called (SIGTERM), then drain within the grace period."""
        while not self.stopping.is_set():
            try:
                if not self.poll_once() and self.wait_seconds == 0:
                    self.stopping.wait(SHORT_POLL_IDLE_SECONDS)
            except Exception as exc:  # a failed receive: try again shortly, never die of it
                logger.warning("receive failed", extra={"error": repr(exc)})
                self.stopping.wait(1)
        self.drain()

    def stop(self) -> None:
        """Stop receiving (a signal handler may call it)."""
        self.stopping.set()

    def poll_once(self) -> int:
        """One long poll for as many messages as there are free run slots; each starts on a thread."""
        if not self._free.acquire(timeout=0.5):  # every slot busy: receive nothing meanwhile
            return 0
        free = 1
        while free < self.concurrency and self._free.acquire(blocking=False):
            free += 1
        try:
            out = self.sqs.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=free,
                WaitTimeSeconds=0 if self.stopping.is_set() else self.wait_seconds,
                MessageSystemAttributeNames=["SenderId"],
            )
        except BaseException:
            for _ in range(free):
                self._free.release()
            raise
        messages = list(out.get("Messages", []))
        for _ in range(free - len(messages)):
            self._free.release()
        assert self._pool is not None
        for message in messages:
            future = self._pool.submit(self._handle, message)
            with self._lock:
                self._running[message["MessageId"]] = (message["ReceiptHandle"], future)
        return len(messages)

    def _handle(self, message: Any) -> str | None:
        try:
            outcome = self._process(message)
            if outcome is not None:
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
            return outcome
        except Exception as exc:  # left in the queue: it comes back after its visibility timeout
            logger.info("run left queued", extra={"message_id": message["MessageId"], "error": repr(exc)})
            return None
        finally:
            with self._lock:
                self._running.pop(message["MessageId"], None)
            self._free.release()

    def _process(self, message: Any) -> str:
        sender = (message.get("Attributes") or {}).get("SenderId")
        if not trusted(sender, self.trusted_senders):
            logger.warning("run message from an untrusted sender refused", extra={"sender": sender})
            return Outcome.REFUSED.value
        body = message["Body"]
        if is_operation_message(body) and self.operations is not None:
            return self.operations.advance(OperationMessage.model_validate_json(body)).value
        delivery = Delivery(message["MessageId"], message["ReceiptHandle"], body)
        return self.worker.process(delivery).value

    def drain(self, *, monotonic: Callable[[], float] = time.monotonic) -> list[str]:
        """Wait up to the grace period for runs in progress; hand back the rest. Answers their ids."""
        assert self._pool is not None
        deadline = monotonic() + self.grace_seconds
        with self._lock:
            running = dict(self._running)
        for _, future in running.values():
            with contextlib.suppress(Exception):  # a run's own failure is the run path's business
                future.result(timeout=max(0.0, deadline - monotonic()))
        with self._lock:
            left = dict(self._running)
        for receipt, _ in left.values():
            try:  # visible again at once: another task takes the run over once its row lease lapses
                self.sqs.change_message_visibility(
                    QueueUrl=self.queue_url, ReceiptHandle=receipt, VisibilityTimeout=0
                )
            except Exception as exc:
                logger.warning("hand-back failed; the lease returns it", extra={"error": repr(exc)})
        self._pool.shutdown(wait=False, cancel_futures=True)
        return list(left)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the runs still on their threads (a test's clean-up; a task just exits)."""
        with self._lock:
            futures = [future for _, future in self._running.values()]
        for future in futures:
            with contextlib.suppress(Exception):
                future.result(timeout=timeout)


def _one_second() -> bool:
    time.sleep(1)
    return True


def watch_parent(
    parent: int,
    stop: Callable[[], None],
    *,
    getppid: Callable[[], int] = os.getppid,
    every: Callable[[], bool] | None = None,
) -> None:
    """Call stop() (a SIGTERM's drain and hand-back) once this process's parent is no longer `parent`.

    The local stack starts this worker as its child and stops it in its own stop(); a stack killed
    -9 runs none, and its orphan (re-parented to init) would go on polling. Polled: a parent-death
    signal (prctl) is Linux-only. `every` waits one interval and answers whether to go on (default:
    a second, for good).
    """
    while (every or _one_second)():
        if getppid() != parent:
            stop()
            return


def run_one(environ: Mapping[str, str] | None = None) -> int:
    """`--run`: this task runs one attempt of one Python run bigger than the worker's own task (the
    worker that holds its lease started it: Worker.run_in_own_task); answers the exit code. The run
    and attempt are the JOBSCHED_RUN_ID and JOBSCHED_ATTEMPT its container was given, as a container
    target's task is given them (adapters/targets/ecs.py envelope_environment)."""
    from jobsched.logcontext import route_stdlib_logs, run_scope
    from jobsched.settings import Settings
    from jobsched.wiring import build, clients

    env = os.environ if environ is None else environ
    run_id, attempt = env.get("JOBSCHED_RUN_ID", ""), env.get("JOBSCHED_ATTEMPT", "")
    if not run_id or not attempt.isdigit():
        raise SystemExit("--run needs JOBSCHED_RUN_ID and JOBSCHED_ATTEMPT")
    # The handler's own `logging` lines as JSON lines with the run's keys on stdout: the task's log
    # driver sends them to the worker's group (GET /api/runs/{id}/logs finds them by run_id); locally
    # the worker that started this process logs each line it prints in the run's scope. At INFO
    # whatever the console's level (WARNING locally): this task's output is the run's lines.
    logger.setLevel(min(logging.INFO, logger.log_level))
    route_stdlib_logs(logger)
    settings = Settings.from_env(env)
    _, sqs, _ = clients()
    services = build(settings, sqs=sqs)
    job_id = env.get("JOBSCHED_JOB_ID") or run_id.rpartition("-")[0]
    with run_scope(job_id=job_id, run_id=run_id, tenant=env.get("JOBSCHED_TENANT")):
        return services.worker.run_in_own_task(run_id, int(attempt))


def main() -> int:
    """The container's entry point: build the services from the environment and serve until SIGTERM
    (`--run`: run one run in this task instead, run_one)."""
    from jobsched import constants as c
    from jobsched.adapters.targets import TargetFactory
    from jobsched.services.operations import OperationService
    from jobsched.settings import Settings
    from jobsched.wiring import build, clients

    if "--run" in sys.argv[1:]:
        code = run_one()
        sys.stdout.flush()
        sys.stderr.flush()
        return code
    settings = Settings.from_env()
    if settings.worker_lane != "ecs" or not settings.ecs_queue_url:
        raise SystemExit(f"{c.WORKER_LANE_ENV}=ecs and {c.ECS_QUEUE_URL_ENV} are required")
    if not settings.trusted_senders:
        raise SystemExit(f"{c.TRUSTED_SENDERS_ENV} is not set: the worker trusts no sender")
    _, sqs, _ = clients()
    services = build(settings, sqs=sqs)
    ecs = EcsWorker(
        sqs=sqs,
        queue_url=settings.ecs_queue_url,
        worker=services.worker,
        trusted_senders=settings.trusted_senders,
        operations=OperationService(schedule=services.schedule),
        concurrency=settings.worker_concurrency,
        wait_seconds=int(os.environ.get(c.ECS_POLL_SECONDS_ENV, LONG_POLL_SECONDS)),
        grace_seconds=float(os.environ.get(c.ECS_GRACE_SECONDS_ENV, GRACE_SECONDS)),
    )
    signal.signal(signal.SIGTERM, lambda signum, frame: ecs.stop())
    signal.signal(signal.SIGINT, lambda signum, frame: ecs.stop())
    if os.environ.get(c.ECS_PARENT_PID_ENV):
        parent = int(os.environ[c.ECS_PARENT_PID_ENV])
        threading.Thread(target=watch_parent, args=(parent, ecs.stop), daemon=True).start()
    print(f"jobsched ecs worker: polling {settings.ecs_queue_url}", flush=True)
    ecs.serve()
    if isinstance(services.worker.targets, TargetFactory):
        # The local stack's container processes stop with their worker (on AWS: nothing to stop).
        services.worker.targets.close()
    # Runs handed back may still be on their threads (Python cannot stop a thread): exit without
    # joining them; their messages are visible again and their leases lapse, as after a crash.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
