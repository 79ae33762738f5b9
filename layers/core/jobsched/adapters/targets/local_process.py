"""The ecs target on the local stack: the container's `command` as a local process.

There is no Docker where the local stack runs (and moto's ECS records tasks but runs none), so the
image, or the task definition's, is never pulled nor run: only the target's `command` runs, as a
process of the ECS worker, with the lifecycle a Fargate task has on AWS (adapters/targets/ecs.py)
and behind the same ports.Target, so the run path around it is unchanged (lease, heartbeat, the
vCPU reservation, retries, dead letter). The placed size is reserved, not enforced: the process gets
whatever CPU and memory the machine has.

    no command ──> TargetFailed(TargetUnavailable): the image's own entrypoint needs the image
    the overrides past RunTask's 8 KiB ──> TargetFailed(PayloadTooLarge), as on AWS
        v
    start `command` in a session (a process group) of its own, in a fresh temporary directory; its
        environment: PATH, the target's `environment`, the envelope as JOBSCHED_* variables (the
        same as a task's). Not the stack's own: no credentials nor endpoints leak into it.
        │ it cannot start ──> TargetFailed(TaskLost), as ECS stops a task whose container cannot
        │ a reader thread logs each line it prints (stdout and stderr) in the run's scope, so the
        │ lines go where the run's own lines go: GET /api/runs/{id}/logs
        v
    wait up to poll_seconds at a time (ctx.heartbeat() between waits: the run's lease) until it exits:
        (once it exits, what it left running in its group is killed, as a container ends with its
        main process)
        exit code 0             ──> success {"pid", "exit_code": 0}
        any other code          ──> TargetFailed(ExitCode, "exit code N")
        killed by another hand  ──> TargetFailed(TaskLost): no exit code, retried like a lost worker
        timeout_seconds passed  ──> SIGTERM to its group, SIGKILL after the grace, TargetFailed(Timeout)
        the run cancelled       ──> the same stop; exit 0 succeeds, else TargetFailed(Cancelled), never
                                    retried (not for the worker's own task: its handler sees ctx.cancelled)

The run path reserves the run's vCPU before invoke() and releases it at the run's outcome, which
comes after invoke() returns or raises, so after the process is gone (a timeout included: the stop
waits for it, within the 5% of the job's timeout the run path leaves this target).

Crash points:
    the worker dies before the start    -> nothing ran; the redelivery starts the process
    the worker dies while it runs       -> LocalProcesses.stop_all() stops it when the worker stops
        (SIGTERM, or its parent, the local stack, gone); a worker killed -9 leaves it running to its
        end, unwatched. No attempt adopts it (AWS's _adopt follows the first task; a local process
        cannot be waited for by another process): the takeover starts a second one. At least once,
        as the envelope's effect_key says.
    the worker dies after the exit, before the record -> the redelivery runs the command again
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import IO, Any

from jobsched.adapters.targets.ecs import DEFAULT_TIMEOUT_SECONDS, TASK_LOST, container_override
from jobsched.domain.compute import Resources
from jobsched.domain.ecs_tasks import RAN_UNRECORDED, unrecorded
from jobsched.domain.logs import IMAGE_CONTAINER
from jobsched.domain.targets import CANCELLED, EcsTarget, TargetFailed
from jobsched.handlers import RunContext
from jobsched.ports import Clock, SystemClock

# ECS's default stopTimeout: the time between StopTask's SIGTERM and its SIGKILL.
ECS_STOP_TIMEOUT_SECONDS = 30.0
MAX_LINE_CHARS = 16 * 1024  # a line longer than this is cut (CloudWatch takes 256 KB per event)
READER_JOIN_SECONDS = 5.0  # after the exit: the last lines still in the pipe
EXIT_POLL_SECONDS = 0.02  # how often an exit is looked for (a container's end is seen this late at most)

# The lines a container prints: logged in the run's scope, so they carry its run_id and tenant.
container_lines = logging.getLogger("jobsched.container")


class LocalProcesses:
    """The container processes one worker process has running: stopped together when it stops."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[bytes]] = set()

    def add(self, process: subprocess.Popen[bytes]) -> None:
        """Track a started process."""
        with self._lock:
            self._running.add(process)

    def discard(self, process: subprocess.Popen[bytes]) -> None:
        """Forget a process that ended."""
        with self._lock:
            self._running.discard(process)

    def running(self) -> int:
        """How many are still tracked."""
        with self._lock:
            return len(self._running)

    def stop_all(self, grace_seconds: float = 2.0) -> None:
        """SIGTERM every process group still running, SIGKILL what is left after the grace."""
        with self._lock:
            processes = list(self._running)
        for process in processes:
            _signal_group(process, signal.SIGTERM)
        for process in processes:
            _exited(process, grace_seconds)
            _finish(process)
            self.discard(process)


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Signal the process's group (the command and what it started); gone already: nothing."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


# Where os.waitid exists (Linux, the BSDs), an exit is seen without reaping the process: its id, which
# is its group's, stays taken until _finish reaps it, so the group can be signalled by that id safely.
_UNREAPED = hasattr(os, "waitid")


def _exited(process: subprocess.Popen[bytes], seconds: float) -> bool:
    """Wait up to `seconds` for the process to exit; True once it has (not reaped yet where _UNREAPED)."""
    if not _UNREAPED:
        try:
            process.wait(timeout=seconds)
            return True
        except subprocess.TimeoutExpired:
            return False
    end = time.monotonic() + seconds
    while True:
        try:
            if os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:  # reaped already (LocalProcesses.stop_all on another thread)
            return True
        left = end - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(EXIT_POLL_SECONDS, left))


def _finish(process: subprocess.Popen[bytes]) -> int:
    """End what is left of the process's group, as a container ends with its main process (a
    background child would otherwise run on, holding the output open), then reap it: its exit code,
    or minus the signal that ended it."""
    if _UNREAPED:
        _signal_group(process, signal.SIGKILL)
    return process.wait()


class LocalProcessRunner:
    """jobsched.ports.Target for an ecs target spec on the local stack (see the module docstring)."""

    def __init__(
        self,
        spec: EcsTarget,
        *,
        resources: Resources,
        timeout_seconds: float | None = None,
        poll_seconds: float = 5.0,
        stop_grace_seconds: float | None = None,
        processes: LocalProcesses | None = None,
        clock: Clock | None = None,
        inherit_environment: bool = False,
    ) -> None:
        self.spec = spec
        self._resources = resources
        # The ECS worker's own task (TargetFactory.for_worker_task): its container has the worker's
        # environment (the task definition's on AWS), so the process gets this one's, not PATH alone.
        self._inherit = inherit_environment
        self._timeout = timeout_seconds or DEFAULT_TIMEOUT_SECONDS
        self._poll = poll_seconds
        # Within the 5% of the job's timeout the run path leaves (services/run.py _target), so the
        # run's outcome (and the release of its vCPU) comes after the process is gone.
        self._grace = (
            stop_grace_seconds
            if stop_grace_seconds is not None
            else max(0.5, min(ECS_STOP_TIMEOUT_SECONDS, self._timeout / 0.95 * 0.05 * 0.8))
        )
        self._processes = processes or LocalProcesses()
        self._clock = clock or SystemClock()

    def invoke(self, envelope: Mapping[str, Any], ctx: RunContext) -> object:
        """Run the command to its end, or stop it at the timeout (see the module docstring)."""
        if not self.spec.command:
            raise TargetFailed(
                "the local stack runs a container target's command as a local process (there is no "
                "Docker here to run the image's own entrypoint): give the target a command",
                error_type="TargetUnavailable",
            )
        override = container_override(self.spec, envelope, IMAGE_CONTAINER)
        environment = dict(os.environ) if self._inherit else {"PATH": os.environ.get("PATH", os.defpath)}
        environment.update({e["name"]: e["value"] for e in override["environment"]})
        source = self.spec.image or self.spec.task_definition_arn
        container_lines.info(
            "jobsched local: no Docker here: %s is not pulled; its command runs as a local process "
            "(%s CPU units and %s MiB reserved, not enforced)",
            source,
            self._resources.cpu,
            self._resources.memory_mib,
        )
        deadline = self._clock.now() + timedelta(seconds=self._timeout)
        with tempfile.TemporaryDirectory(prefix="jobsched-container-") as workdir:
            try:
                process = subprocess.Popen(
                    list(self.spec.command),
                    # The worker's own task starts where the worker did (its image's WORKDIR on AWS).
                    cwd=os.getcwd() if self._inherit else workdir,
                    env=environment,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                raise TargetFailed(
                    f"the command could not start: {exc}"[:2000], error_type=TASK_LOST
                ) from exc
            self._processes.add(process)
            try:
                return self._follow(process, ctx, deadline)
            finally:
                self._processes.discard(process)

    def _follow(self, process: subprocess.Popen[bytes], ctx: RunContext, deadline: datetime) -> object:
        assert process.stdout is not None
        context = contextvars.copy_context()  # the run's log keys follow the lines onto the reader
        reader = threading.Thread(
            target=context.run, args=(_pump, process.stdout), name="jobsched-container-out", daemon=True
        )
        reader.start()
        cancelled = False
        while True:
            remaining = (deadline - self._clock.now()).total_seconds()
            if remaining <= 0:
                self._stop(process, f"over {self._timeout:g} s")
                reader.join(READER_JOIN_SECONDS)
                raise TargetFailed(
                    f"pid {process.pid}: stopped after {self._timeout:g} s", error_type="Timeout"
                )
            if _exited(process, min(self._poll, remaining)):
                break
            ctx.heartbeat()
            # As on AWS, a container target is stopped by its run's cancel; the worker's own task
            # (a Python run, self._inherit) is not: its handler sees ctx.cancelled.
            if not self._inherit and ctx.cancelled:
                self._stop(process, "its run was cancelled")
                cancelled = True
                break
        code = _finish(process)
        reader.join(READER_JOIN_SECONDS)
        if cancelled and code != 0:
            raise TargetFailed(
                f"pid {process.pid}: stopped by its run's cancel ({_said(code)})", error_type=CANCELLED
            )
        if code < 0:
            raise TargetFailed(f"pid {process.pid}: {_said(code)}, with no exit code", error_type=TASK_LOST)
        if self._inherit and code == RAN_UNRECORDED:  # a Python run's own task (ecs_tasks.task_ended)
            raise TargetFailed(unrecorded(f"pid {process.pid}"), error_type=TASK_LOST)
        if code != 0:
            raise TargetFailed(f"pid {process.pid}: exit code {code}", error_type="ExitCode")
        return {"pid": process.pid, "exit_code": 0}

    def _stop(self, process: subprocess.Popen[bytes], why: str) -> None:
        """As StopTask: SIGTERM, then SIGKILL after the grace; returns once the process is gone."""
        container_lines.info("jobsched local: %s: SIGTERM, SIGKILL after %g s", why, self._grace)
        _signal_group(process, signal.SIGTERM)
        _exited(process, self._grace)
        _finish(process)


def _said(code: int) -> str:
    """A process's end as a message says it: "exit code N" or "killed by SIGTERM"."""
    if code >= 0:
        return f"exit code {code}"
    return "killed by " + (signal.Signals(-code).name if -code in signal.valid_signals() else str(-code))


def _pump(stream: IO[bytes]) -> None:
    """Log each line the process prints until its output closes."""
    with stream:
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            container_lines.info(line[:MAX_LINE_CHARS])
