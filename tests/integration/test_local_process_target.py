"""The ecs target on the local stack (no Docker): the command runs as a local process with a Fargate
task's lifecycle. Exit 0 succeeds, any other code fails with ExitCode, a process killed by another
hand is a lost task, past its timeout it is stopped (SIGTERM, then SIGKILL) with Timeout; what it
prints is logged in the run's scope. Real processes (python3 -c), short timeouts."""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

import pytest

from jobsched.adapters.targets import LocalProcessRunner, TargetFactory
from jobsched.adapters.targets.local_process import LocalProcesses
from jobsched.domain.compute import Resources
from jobsched.domain.targets import TargetFailed, parse_target
from jobsched.errors import ValidationFailed
from jobsched.handlers import registry
from jobsched.logcontext import current_run, run_scope
from tests.support import poll_until, run_envelope

RUN_ID = "job_01m8zhesy6bj7zncxmyxbf1xq8-1796043600000"
SIZE = Resources(cpu=512, memory_mib=1024)
PY = sys.executable


def envelope(attempt: int = 1) -> dict[str, Any]:
    return run_envelope(RUN_ID, attempt)


class Ctx:
    cancelled = False

    def __init__(self) -> None:
        self.beats = 0

    def heartbeat(self, progress: Any = None) -> None:
        self.beats += 1


def runner(code: str, *, processes: LocalProcesses | None = None, **kw: Any) -> LocalProcessRunner:
    spec = parse_target(
        {
            "type": "ecs",
            "image": "busybox:1.36",
            "command": [PY, "-c", code],
            "environment": {"GREETING": "hi"},
        }
    )
    return LocalProcessRunner(spec, resources=SIZE, processes=processes, **kw)  # type: ignore[arg-type]


def invoke(r: LocalProcessRunner, ctx: Ctx | None = None) -> Any:
    with run_scope(job_id=RUN_ID.split("-")[0], run_id=RUN_ID, tenant="t"):
        return r.invoke(envelope(), ctx or Ctx())  # type: ignore[arg-type]


def printed(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "jobsched.container"]


def test_exit_0_succeeds_with_the_targets_environment_and_the_envelope_and_not_the_stacks(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the stack's own environment names an AWS endpoint
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    caplog.set_level(logging.INFO, logger="jobsched.container")
    code = (
        "import json, os; print(os.environ['GREETING'], os.environ['JOBSCHED_RUN_ID'], "
        "os.environ['JOBSCHED_ATTEMPT'], json.loads(os.environ['JOBSCHED_PAYLOAD'])['n'], "
        "'AWS_ENDPOINT_URL' in os.environ)"
    )
    # When the command runs
    result = invoke(runner(code))
    # Then it succeeds, and it saw the target's environment and the envelope, not the stack's
    assert result["exit_code"] == 0 and result["pid"] > 0
    lines = printed(caplog)
    assert f"hi {RUN_ID} 1 1 False" in lines
    # And the run's logs say there is no Docker here: the image is not pulled
    assert lines[0].startswith("jobsched local: no Docker here: busybox:1.36 is not pulled")


def test_another_exit_code_fails_with_exit_code_and_its_lines_carry_the_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="jobsched.container")
    scopes: list[dict[str, str]] = []
    seen = logging.Handler()
    seen.emit = lambda record: scopes.append(current_run())  # type: ignore[method-assign]
    logging.getLogger("jobsched.container").addHandler(seen)
    code = (
        "import sys; print('hello from the container'); print('to stderr', file=sys.stderr); "
        "raise SystemExit(3)"
    )
    try:
        with pytest.raises(TargetFailed) as failed:
            invoke(runner(code))
    finally:
        logging.getLogger("jobsched.container").removeHandler(seen)
    assert failed.value.error_type == "ExitCode" and "exit code 3" in str(failed.value)
    # stdout and stderr both, logged in the run's scope (the reader thread carries its keys)
    assert {"hello from the container", "to stderr"} <= set(printed(caplog))
    assert scopes and all(
        s == {"job_id": RUN_ID.split("-")[0], "run_id": RUN_ID, "tenant": "t"} for s in scopes
    )
    assert current_run() == {}  # nothing leaked out of the scope


def test_a_process_killed_by_another_hand_is_a_lost_task() -> None:
    with pytest.raises(TargetFailed) as failed:
        invoke(runner("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"))
    assert failed.value.error_type == "TaskLost" and "SIGKILL" in str(failed.value)


def test_the_workers_own_task_exiting_ran_unrecorded_is_a_lost_task_and_a_containers_is_not() -> None:
    # A Python run's own task (the worker's environment inherited) exits 4 when its handler ran and
    # its record failed: an unknown outcome. A user's container exiting 4 has simply failed.
    with pytest.raises(TargetFailed) as own:
        invoke(runner("raise SystemExit(4)", inherit_environment=True))
    assert own.value.error_type == "TaskLost" and "could not be recorded" in str(own.value)
    with pytest.raises(TargetFailed) as user:
        invoke(runner("raise SystemExit(4)"))
    assert user.value.error_type == "ExitCode" and "exit code 4" in str(user.value)


def test_a_command_that_cannot_start_is_a_lost_task_and_no_command_is_unavailable() -> None:
    spec = parse_target({"type": "ecs", "image": "busybox:1.36", "command": ["/no/such/binary"]})
    with pytest.raises(TargetFailed) as failed:
        invoke(LocalProcessRunner(spec, resources=SIZE))  # type: ignore[arg-type]
    assert failed.value.error_type == "TaskLost"
    bare = parse_target({"type": "ecs", "image": "busybox:1.36"})
    with pytest.raises(TargetFailed) as unavailable:
        invoke(LocalProcessRunner(bare, resources=SIZE))  # type: ignore[arg-type]
    assert unavailable.value.error_type == "TargetUnavailable" and "no Docker" in str(unavailable.value)


def test_past_its_timeout_it_is_stopped_sigterm_then_sigkill_with_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="jobsched.container")
    # Given a command that ignores SIGTERM and sleeps for 30 s
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(30)"
    )
    processes = LocalProcesses()
    ctx = Ctx()
    started = time.monotonic()
    # When it runs with a 1 s timeout, polling every 0.2 s and a 0.5 s grace
    with pytest.raises(TargetFailed) as failed:
        invoke(
            runner(code, processes=processes, timeout_seconds=1, poll_seconds=0.2, stop_grace_seconds=0.5),
            ctx,
        )
    # Then the attempt fails with Timeout once the process is gone (SIGKILL after the grace)
    assert failed.value.error_type == "Timeout" and "stopped after 1 s" in str(failed.value)
    assert time.monotonic() - started < 5
    assert processes.running() == 0
    # And it was heartbeating while it ran, and its line is logged
    assert ctx.beats >= 2
    assert "ready" in printed(caplog)


def test_the_factory_runs_ecs_targets_locally_and_close_stops_what_still_runs() -> None:
    # Given the local stack's factory (no ECS cluster wired) and a container that sleeps 30 s
    factory = TargetFactory(
        handlers=registry, roles=None, signing_secret=lambda t: "s", local_containers=True
    )
    spec = parse_target(
        {"type": "ecs", "image": "busybox:1.36", "command": [PY, "-c", "import time; time.sleep(30)"]}
    )
    target = factory.for_spec(spec, timeout_seconds=60, resources=SIZE)
    assert isinstance(target, LocalProcessRunner)
    out: dict[str, BaseException] = {}

    def run() -> None:
        try:
            invoke(target)  # type: ignore[arg-type]
        except BaseException as exc:
            out["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 5
    while factory.processes.running() == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    # When the worker stops (its factory closes)
    factory.close()
    thread.join(5)
    # Then the process was stopped: the attempt ends as a lost task (SIGTERM, not its own exit)
    error = out["error"]
    assert isinstance(error, TargetFailed) and error.error_type == "TaskLost" and "SIGTERM" in str(error)


def test_where_containers_run_locally_a_target_with_no_command_is_refused_naming_target_command() -> None:
    bare = parse_target({"type": "ecs", "image": "busybox:1.36"})
    local = TargetFactory(handlers=registry, roles=None, signing_secret=lambda t: "s", local_containers=True)
    with pytest.raises(ValidationFailed) as refused:
        local.check(bare)
    assert refused.value.field == "target.command"
    # On AWS the image's own entrypoint runs: no command is fine
    TargetFactory(handlers=registry, roles=None, signing_secret=lambda t: "s").check(bare)
    local.check(parse_target({"type": "ecs", "image": "busybox:1.36", "command": ["true"]}))


def test_what_the_command_left_running_ends_with_it_as_in_a_container(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="jobsched.container")
    # Given a command that starts a 30 s sleep in the background (holding its output open) and exits 0
    spec = parse_target(
        {"type": "ecs", "image": "busybox:1.36", "command": ["sh", "-c", "sleep 30 & echo $!"]}
    )
    started = time.monotonic()
    # When it runs
    result = invoke(LocalProcessRunner(spec, resources=SIZE))  # type: ignore[arg-type]
    # Then the attempt ends with the command, not with the sleep, and the sleep was killed with it
    assert result["exit_code"] == 0 and time.monotonic() - started < 3
    background = int(printed(caplog)[-1])

    def gone() -> bool:
        try:
            with open(f"/proc/{background}/stat") as stat:
                return stat.read().split(") ")[1].startswith("Z")  # a zombie, awaiting its reaper
        except FileNotFoundError:
            return True

    assert poll_until(gone, "the background sleep to be killed", timeout=5)
