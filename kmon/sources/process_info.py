"""What /proc and psutil say about a process: its name and command line, its owner, its
network namespace, the Kafka client libraries it has mapped, whether it is a zombie."""

from __future__ import annotations

import os
import shlex

import psutil

from kmon.redact import redact_args

KAFKA_LIBRARIES = ("librdkafka", "kafka-clients", "kafka_2.", "kafka-streams")


def describe(process: psutil.Process) -> tuple[str, str, float]:
    """(name, command line with secrets masked, start time); psutil's errors pass through."""
    with process.oneshot():
        return (process.name(), shlex.join(redact_args(process.cmdline())),
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


def is_zombie(process: psutil.Process) -> bool:
    """True for a process that has exited but not been reaped (or is gone already)."""
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.AccessDenied:
        return False
