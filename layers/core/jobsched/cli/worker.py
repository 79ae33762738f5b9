"""`jobsched worker`: an external worker of a pool, against the local stack or a deployed API.

    register (pool, capacity, labels) ──> heartbeat thread (every HEARTBEAT_SECONDS: free, runs;
                                          then each running run's heartbeat: its lease, its cancel)
        └─> loop: long-poll ──> for each run placed here: ack ──> (its tick) started ──> handler
                                                               ──> finished (result | error)
    Ctrl-C: stop polling; the runs already acknowledged finish and report, heartbeating until
            they have; a run placed here but not acknowledged yet is left to its reservation,
            which lapses and places it elsewhere.

The handlers are the same registry (jobsched.handlers, --handlers mypkg.jobs imports the modules
that register theirs) and the same RunContext: effect_key is the run id, ctx.heartbeat(progress)
and ctx.checkpoint(state) report POST /api/runs/{id}/heartbeat (the API keeps them on the run's
row), ctx.last_checkpoint is the checkpoint the poll's assignment carried (a retried or re-placed
attempt resumes from it), and ctx.cancelled reads the cancel mark those reports answer.
A report the API refuses (a duplicate, a run placed elsewhere since this worker was declared dead)
is not an error: the answer says where the run stands, and this worker lets the run go.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from jobsched.cli.http import Answer, request
from jobsched.domain.workers import HEARTBEAT_SECONDS
from jobsched.handlers import HandlerRegistry, RunContext, registry

Transport = Callable[[str, str, Any], Answer]
"""(method, path, body) -> the API's answer."""
MAX_EARLY_SECONDS = 60.0
"""The longest a worker waits for the tick of a run placed early (a clock far off is not waited)."""


class CheckpointNotKept(RuntimeError):
    """The API did not answer a run heartbeat carrying a progress or a checkpoint: nothing is known
    to be kept (ctx.checkpoint() raises it; the handler may checkpoint again)."""


def _say(message: str) -> None:
    try:
        from rich.console import Console

        Console(stderr=True, highlight=False).print(message)
    except ImportError:  # pragma: no cover - rich ships with the cli extra
        print(message, file=sys.stderr)


@dataclass
class WorkerAgent:
    """One worker process: its registration, its held runs, and the loop that runs them."""

    api: Transport
    pool: str
    capacity: dict[str, int]
    labels: dict[str, str] = field(default_factory=dict)
    handlers: HandlerRegistry = field(default_factory=lambda: registry)
    say: Callable[[str], None] = _say
    worker_id: str | None = None
    held: dict[str, str] = field(default_factory=dict)
    """run_id -> the state this worker last reported for it."""
    stopping: threading.Event = field(default_factory=threading.Event)
    """Set on Ctrl-C (or once declared dead): take no more work."""
    drained: threading.Event = field(default_factory=threading.Event)
    """Set once the runs held at the stop have finished: the heartbeats go on until then, so a run
    that outlives three heartbeat intervals after Ctrl-C is not declared lost and placed again."""
    now: Callable[[], datetime] = field(default_factory=lambda: lambda: datetime.now(UTC))
    sleep: Callable[[float], None] = time.sleep
    heartbeat_seconds: float = HEARTBEAT_SECONDS
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)
    _run_beats: dict[str, Callable[[], None]] = field(default_factory=dict)
    """run_id -> the heartbeat of a run whose handler is running (beaten every heartbeat_seconds)."""

    def register(self) -> str:
        answer = self.api(
            "POST", "/api/workers", {"pool": self.pool, "capacity": self.capacity, "labels": self.labels}
        )
        if not answer.ok:
            raise SystemExit(f"jobsched worker: registration refused: {answer.text}")
        self.worker_id = str(answer.body["worker_id"])
        self.say(
            f"[bold green]registered[/] {self.worker_id} in pool [bold]{self.pool}[/] with {self.capacity}"
        )
        return self.worker_id

    def heartbeat(self) -> list[str]:
        """One heartbeat; answers the runs the API refused (they are dropped from `held`)."""
        with self._lock:
            runs = dict(self.held)
        answer = self.api("POST", f"/api/workers/{self.worker_id}/heartbeat", {"runs": runs})
        if not answer.ok:
            return []
        refused = [str(r) for r in answer.body.get("refused_runs", [])]
        if answer.body.get("worker", {}).get("status") == "DEAD":
            self.say("[bold red]declared dead by the scheduler[/]: stopping (register again to take work)")
            self.stopping.set()
        return refused

    def poll_once(self, *, wait_seconds: float, threaded: bool = True) -> int:
        """One long-poll; each run placed here is acknowledged and run (on a thread of its own unless
        `threaded` is False). Answers how many runs it took."""
        answer = self.api("POST", f"/api/workers/{self.worker_id}/poll", {"wait_seconds": wait_seconds})
        if answer.status == 409:  # declared dead
            self.stopping.set()
            return 0
        if not answer.ok:
            return 0
        taken = 0
        for run in answer.body.get("runs", []):
            if self.stopping.is_set():
                break  # not acknowledged: its reservation lapses and it is placed elsewhere
            acked = self._report(run["run_id"], "ack")
            if not acked.get("applied"):
                continue
            taken += 1
            with self._lock:
                self.held[run["run_id"]] = "LEASED"
            if threaded:
                thread = threading.Thread(target=self.execute, args=(run,), daemon=True)
                self._threads.append(thread)
                thread.start()
            else:
                self.execute(run)
        return taken

    def execute(self, run: dict[str, Any]) -> None:
        """started -> the handler -> finished; every report conditional on the API's side."""
        run_id = str(run["run_id"])
        try:
            # A run is handed to its pool up to a second before its tick (a queue's delays are whole
            # seconds): it starts on its tick, never early, as on the worker function.
            early = (datetime.fromisoformat(str(run["scheduled_for"])) - self.now()).total_seconds()
            if early > 0:
                self.sleep(min(early, MAX_EARLY_SECONDS))
            if not self._report(run_id, "started").get("applied"):
                return
            with self._lock:
                self.held[run_id] = "RUNNING"
            cancel = {"requested": False}

            def beat() -> None:
                answer = self._report(run_id, "heartbeat")
                cancel["requested"] = bool(answer.get("cancel_requested"))

            def note(progress: str | None, checkpoint: str | None) -> bool:
                # ctx.heartbeat(progress) / ctx.checkpoint(state), sized and encoded by RunContext:
                # kept on the run's row by the API, as the worker function keeps them.
                body: dict[str, Any] = {"worker_id": self.worker_id}
                if progress is not None:
                    body["progress"] = json.loads(progress)
                if checkpoint is not None:
                    body["checkpoint"] = json.loads(checkpoint)
                answer = self.api("POST", f"/api/runs/{run_id}/heartbeat", body)
                if not answer.ok or not isinstance(answer.body, dict):
                    # Nothing is known to be kept: raised to the handler, as a store error is.
                    raise CheckpointNotKept(f"run heartbeat answered {answer.status}: {answer.text[:200]}")
                cancel["requested"] = bool(answer.body.get("cancel_requested"))
                return bool(answer.body.get("applied"))

            with self._lock:
                self._run_beats[run_id] = beat
            ctx = RunContext(
                job_id=str(run["job_id"]),
                run_id=run_id,
                tenant=str(run["tenant"]),
                scheduled_for=datetime.fromisoformat(str(run["scheduled_for"])),
                attempt=int(run["attempt"]),
                effect_key=str(run["effect_key"]),
                beat=beat,
                cancel_requested=lambda: cancel["requested"],
                note=note,
                last_checkpoint=run.get("last_checkpoint"),
            )
            self.say(f"[cyan]running[/] {run_id} ({run['handler']}, attempt {ctx.attempt})")
            try:
                result = self.handlers.get(str(run["handler"]))(dict(run["payload"]), ctx)
            except Exception as exc:  # the attempt's failure, reported as the run's error
                error = {"type": type(exc).__name__, "message": str(exc)[:2000]}
                done = self._report(run_id, "finished", error=error)
                self.say(f"[red]failed[/] {run_id}: {error['type']} ({done.get('status')})")
                return
            done = self._report(run_id, "finished", result=json.loads(json.dumps(result, default=str)))
            self.say(f"[green]finished[/] {run_id} -> {done.get('status')}")
        except Exception:  # a broken report: the run's lease lapses and the scheduler re-places it
            traceback.print_exc()
        finally:
            with self._lock:
                self.held.pop(run_id, None)
                self._run_beats.pop(run_id, None)

    def _report(self, run_id: str, what: str, **extra: Any) -> dict[str, Any]:
        answer = self.api("POST", f"/api/runs/{run_id}/{what}", {"worker_id": self.worker_id, **extra})
        return dict(answer.body) if answer.ok and isinstance(answer.body, dict) else {}

    def serve(self, *, wait_seconds: float = 10.0) -> None:
        """Register, heartbeat and poll until stopped (Ctrl-C): then let the running runs finish."""
        self.register()
        beating = threading.Thread(target=self._beat_loop, daemon=True)
        beating.start()
        try:
            while not self.stopping.is_set():
                self.poll_once(wait_seconds=wait_seconds)
        except KeyboardInterrupt:
            self.say("[yellow]stopping[/]: finishing the runs held, taking no more")
        self.stopping.set()
        try:
            self.join_runs()
        finally:
            self.drained.set()
            # Nothing of this worker's is in flight once serve returns: the beat under way ends first.
            beating.join()

    def join_runs(self, timeout: float | None = None) -> None:
        """Wait for the runs taken on threads to finish and report (each up to `timeout` seconds)."""
        for thread in list(self._threads):
            thread.join(timeout)

    def beat_once(self) -> None:
        """The worker's heartbeat, then one of each running run: as the Lambda worker's heartbeat
        does every third of a lease, it renews the run's lease and reads its cancel mark, so a
        handler that only polls ctx.cancelled sees a cancel within a beat. An unreachable API is
        logged: the next beat tries again."""
        for one in (self.heartbeat, *self._running_beats()):
            try:
                one()
            except Exception:
                traceback.print_exc()

    def _running_beats(self) -> list[Callable[[], None]]:
        with self._lock:
            return list(self._run_beats.values())

    def _beat_loop(self) -> None:
        while not self.drained.wait(self.heartbeat_seconds):
            self.beat_once()


def cmd_worker(args: argparse.Namespace) -> int:
    """Run a worker of --pool until Ctrl-C."""
    if args.handlers:
        registry.load_modules(m.strip() for m in args.handlers.split(",") if m.strip())
    labels = dict(item.split("=", 1) for item in args.label or [])
    capacity = {"cpu": args.cpu, "memory_mib": args.memory_mib, "gpus": args.gpus}

    def transport(method: str, path: str, body: Any) -> Answer:
        return request(args, method, path, body)

    WorkerAgent(api=transport, pool=args.pool, capacity=capacity, labels=labels).serve(wait_seconds=args.wait)
    return 0


def add_parser(client: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """`jobsched worker` on the command line's parser (`client` adds the API flags)."""
    p = client("worker", "run an external worker of a pool (registers, heartbeats, polls, runs handlers)")
    p.add_argument("--pool", required=True, help="the pool it serves")
    p.add_argument("--handlers", default="", help="modules that register handlers, comma-separated")
    p.add_argument("--cpu", type=int, required=True, help="CPU units it offers (1024 = one vCPU)")
    p.add_argument("--memory-mib", type=int, required=True, help="memory it offers, MiB")
    p.add_argument("--gpus", type=int, default=0, help="GPUs it offers")
    p.add_argument("--label", action="append", help="key=value, repeatable")
    p.add_argument("--wait", type=float, default=10.0, help="long-poll wait, seconds (<= 20)")
    p.add_argument("--api", dest="api_url", help="the API base URL (same as --api-url)")
    p.set_defaults(func=cmd_worker)
