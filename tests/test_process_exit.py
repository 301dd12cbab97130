"""A watched process's exit, from a pidfd: told once it exits, unreaped or not; a pid reused
between the start time's read and the pidfd is told as exited; beyond the descriptor budget
(a quarter of the soft limit, really lowered in a child interpreter) each look reads
/proc/PID/stat, with the same answers; ``close`` gives the descriptor back."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from helpers import wait_for

from kmon.sources.processes.process_exit import ExitWatch
from kmon.sources.processes.process_info import running_since

pytestmark = pytest.mark.integration


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_an_exit_is_told_though_the_process_is_not_reaped_and_close_gives_the_fd_back():
    child = subprocess.Popen(["sleep", "30"])
    try:
        before = open_fds()
        watch = ExitWatch(child.pid, running_since(child.pid))
        assert watch.polled and open_fds() == before + 1
        assert not watch.exited()
        child.kill()
        wait_for(watch.exited, "the exit told")
        assert running_since(child.pid) is None  # a zombie: not reaped yet, as /proc says
        watch.close()
        watch.close()
        assert open_fds() == before and watch.exited()
    finally:
        child.kill()
        child.wait()


def test_a_pid_whose_start_time_is_not_the_one_read_is_told_exited_and_holds_no_fd():
    child = subprocess.Popen(["sleep", "30"])
    try:
        before = open_fds()
        started = running_since(child.pid)
        assert started is not None
        reused = ExitWatch(child.pid, started + 1)  # as a pid another process took meanwhile
        assert reused.exited() and not reused.polled and open_fds() == before
        assert ExitWatch(child.pid, None).exited()  # gone before the sampler looked
    finally:
        child.kill()
        child.wait()


def test_beyond_the_budget_each_look_reads_proc_and_answers_alike():
    script = textwrap.dedent("""
        import resource, subprocess
        from kmon.sources.processes.process_exit import ExitWatch, budget
        from kmon.sources.processes.process_info import running_since
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
        assert budget() == 16
        child = subprocess.Popen(["sleep", "30"])
        watches = [ExitWatch(child.pid, running_since(child.pid)) for _ in range(20)]
        print(sum(w.polled for w in watches), sum(w.exited() for w in watches))
        child.kill()
        child.wait()
        print(sum(w.exited() for w in watches))
        for w in watches[:4]:
            w.close()
        more = [ExitWatch(1, running_since(1)) for _ in range(5)]
        print(sum(w.polled for w in more))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split("\n")
    assert out[:3] == ["16 0", "20", "4"]  # a closed pidfd's place is taken again, no more
