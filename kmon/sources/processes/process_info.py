"""What /proc and psutil say about a process: its name and command line, its owner, its
network namespace, the Kafka client libraries it has mapped, whether it still runs; and
which processes of this host have such a library mapped."""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Collection

import psutil

from kmon.redact import redact_args
from kmon.sources.kernel.proc_fds import host_pids
from kmon.sources.text import valid

KAFKA_LIBRARIES = ("librdkafka", "kafka-clients", "kafka_2.", "kafka-streams")
# what the sources raise for a process that has gone, or that the OS keeps from kmon
ProcessVanished = psutil.NoSuchProcess
ProcessDenied = psutil.AccessDenied
Process = psutil.Process  # a process by pid: ``Process(pid)`` raises ProcessVanished


def real_uid(process: psutil.Process) -> int:
    """The uid that runs ``process``; psutil's errors pass through."""
    return process.uids().real


def describe(process: psutil.Process) -> tuple[str, str, float]:
    """(name, command line with secrets masked, start time), as valid text (an
    undecodable byte as ``\\xNN``); psutil's errors pass through."""
    with process.oneshot():
        return (valid(process.name()), shlex.join(redact_args([valid(arg) for arg in
                                                               process.cmdline()])),
                process.create_time())


def exists(pid: int) -> bool:
    """True while there is a process (or a kernel thread) with this id."""
    return psutil.pid_exists(pid)


def owner(pid: int) -> str:
    """The user name of ``pid``'s real owner (its uid where the name is unknown), or '?'
    once it has gone."""
    try:
        uid = psutil.Process(pid).uids().real
    except psutil.Error:
        return "?"
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def in_other_network_namespace(pid: int) -> bool:
    """True when ``pid`` lives in a network namespace other than kmon's own."""
    try:
        return os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")
    except OSError:
        return False


def loads_kafka_library(pid: int) -> bool:
    """True when the process has a Kafka client library mapped (librdkafka, kafka-clients)."""
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
            return any(lib in line for line in maps for lib in KAFKA_LIBRARIES)
    except OSError:
        return False


PF_KTHREAD = 0x00200000  # the kernel's flag for its own threads (/proc/PID/stat field 9)


def is_kernel_thread(pid: int) -> bool:
    """True for a kernel thread (kthreadd, kworkers): no user space, no sockets of its own."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            fields = stat_file.read(4096).rsplit(b")", 1)[1].split()
        return bool(int(fields[6]) & PF_KTHREAD)
    except (OSError, IndexError, ValueError):
        return False


def running_since(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (/proc/PID/stat), while it runs: None
    once it has exited or is a zombie. One read: a poll asks it of every process it watches."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            fields = stat_file.read(4096).rsplit(b")", 1)[1].split()
        return None if fields[0] in (b"Z", b"X") else int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


class LibraryScan:
    """The processes of this host with a Kafka client library mapped, by a listing of /proc.

    A process found without one is looked at again every ``recheck_s`` (a program may load
    its client library late); one found with one is not read again.
    """

    def __init__(self, recheck_s: float = 60.0) -> None:
        self.recheck_s = recheck_s
        self._mapped: dict[int, tuple[bool, float]] = {}  # pid -> (library mapped, checked at)

    def __call__(self, skip: Collection[int] = ()) -> set[int]:
        """Every process but ``skip`` with a Kafka client library mapped."""
        now = time.monotonic()
        pids = host_pids()
        for gone in self._mapped.keys() - pids:
            del self._mapped[gone]
        return {pid for pid in pids.difference(skip) if self._has_library(pid, now)}

    def of(self, pids: Collection[int]) -> set[int]:
        """Those of ``pids`` with a Kafka client library mapped (as ``__call__`` finds them,
        without listing /proc)."""
        now = time.monotonic()
        return {pid for pid in pids if self._has_library(pid, now)}

    def _has_library(self, pid: int, now: float) -> bool:
        known = self._mapped.get(pid)
        if known is not None and (known[0] or now - known[1] < self.recheck_s):
            return known[0]
        found = not is_kernel_thread(pid) and loads_kafka_library(pid)
        self._mapped[pid] = (found, now)
        return found
