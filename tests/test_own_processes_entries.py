"""kmon's registry of its own processes as several kmon commands use it at once: an entry
being written is never read as a process gone (and pruned by another command)."""

from __future__ import annotations

import os
import threading

from kmon.sources.processes import own_processes

REWRITES = 3000


def test_an_entry_rewritten_by_one_command_is_always_read_whole_by_another(
        tmp_path, monkeypatch):
    """A JMX helper's entry is written as another kmon command starts its own helpers (each
    register reads every entry to prune those of processes gone): read half written (empty),
    it was taken for a process gone and removed, and every other view showed that helper's
    connection to the JVM as the JVM's own."""
    monkeypatch.setattr(own_processes, "_directory", lambda: tmp_path)
    pid = os.getpid()
    own_processes.register(pid)
    done = threading.Event()

    def rewrite() -> None:
        for _ in range(REWRITES):
            own_processes.register(pid)
        done.set()

    writer = threading.Thread(target=rewrite)
    writer.start()
    missed = 0
    while not done.is_set():
        missed += pid not in own_processes.own_pids()
    writer.join()
    assert missed == 0
    assert own_processes.own_pids() == {pid}
    assert sorted(os.listdir(tmp_path)) == [str(pid)]  # no hidden leftover
