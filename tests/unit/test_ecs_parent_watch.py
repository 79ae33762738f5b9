"""The local stack's ECS worker child stops when the stack is gone, even killed -9 (no stop() ran)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from jobsched.ecsworker import watch_parent


def _running(pid: int) -> bool:
    """Whether `pid` runs: gone, or a zombie its new parent has not reaped yet, is not running."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_watch_stops_the_worker_once_its_parent_changes_and_not_before() -> None:
    # Given a parent that is there for two intervals, then gone (the child re-parented to init)
    parents = iter([41, 41, 1])
    ticks: list[int] = []
    stopped: list[bool] = []

    def every() -> bool:
        ticks.append(1)
        return len(ticks) <= 10

    # When the watch runs
    watch_parent(41, lambda: stopped.append(True), getppid=lambda: next(parents), every=every)
    # Then it stopped the worker once, at the third look, and looked no more
    assert stopped == [True] and len(ticks) == 3


def test_an_orphaned_watcher_process_exits_when_its_parent_is_killed_9() -> None:
    # Given a parent process whose child runs the watch for its parent's pid (as jobsched local's
    # ECS worker does), stop() ending the child
    child = textwrap.dedent(
        """
        import os, sys
        from jobsched.ecsworker import watch_parent
        watch_parent(int(sys.argv[1]), lambda: sys.exit(0))
        """
    )
    parent = textwrap.dedent(
        f"""
        import os, subprocess, sys, time
        p = subprocess.Popen([sys.executable, "-c", {child!r}, str(os.getpid())])
        print(p.pid, flush=True)
        time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    grandchild = int(proc.stdout.readline())
    # When the parent is killed -9 (it runs no cleanup of its own)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # Then the child notices within a few of its one-second looks and exits
    for _ in range(100):
        if not _running(grandchild):
            break
        time.sleep(0.1)
    else:
        os.kill(grandchild, signal.SIGKILL)
        raise AssertionError("the orphaned child is still running 10 s after its parent died")
