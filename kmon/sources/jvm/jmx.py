"""A JVM's Kafka client metrics over JMX, read by a small Java helper.

The helper (``kmon/java/KmonJmx.java``) attaches to the JVM by PID with the
JDK's attach API, starts its local management agent and streams one JSON line
per interval with every producer, consumer and admin client MBean it finds.
One long-lived helper runs per watched JVM; a reader thread here keeps the
newest line, so ``latest()`` never blocks.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import math
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import psutil

from kmon.classify import java_node_id
from kmon.files import UnsafeFile, private_cache_dir
from kmon.sources.processes import own_processes
from kmon.sources.processes.child_env import jvm_environment, trusted_program

HELPER = "KmonJmx"
MAX_METRIC = 2**63 - 1  # what a recording's int64 columns hold
# The helper is tiny: a small serial-GC heap, the quick JIT tier, no perf-data file of its own.
HELPER_JVM_OPTIONS = ("-Xmx32m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                      "-XX:-UsePerfData")
_STDERR_LINES = 20


class JmxUnavailable(Exception):
    """JMX cannot be read from this PID; the message is one line saying why."""


@dataclass(frozen=True)
class JvmClient:
    """One Kafka client instance of a JVM, as its MBeans show it.

    ``type`` is "producer", "consumer" or "admin". ``metrics`` are the
    client-wide values (``connection-count``, ``connection-creation-total``, …);
    ``nodes`` maps Java node ids (``-1``, ``2147483647 - brokerId``, broker ids;
    a 4.x client's ``+brokerId`` coordinator is given as ``2147483647 - brokerId``)
    to that connection's values (``outgoing-byte-total``, ``request-total``, …).
    A value with no samples yet (NaN in JMX) is absent.
    """

    client_id: str
    type: str
    metrics: dict[str, float]
    nodes: dict[int, dict[str, float]]


@dataclass(frozen=True)
class JmxReading:
    """One poll of a JVM's Kafka MBeans; ``poll_ms`` is what the poll cost the helper."""

    ts_ms: int
    clients: list[JvmClient]
    poll_ms: float | None = None


def is_jvm(pid: int) -> bool:
    """Whether ``pid`` runs a JVM (its executable is ``java``, or it maps libjvm.so)."""
    proc = Path("/proc", str(pid))
    if not proc.parent.joinpath("self").exists():
        try:
            return psutil.Process(pid).name().lower() in ("java", "java.exe")
        except psutil.Error:
            return False
    try:
        if Path(os.readlink(proc / "exe")).name == "java":
            return True
    except OSError:
        pass
    try:
        with open(proc / "maps", "rb") as maps:
            return any(line.rstrip().endswith(b"/libjvm.so") for line in maps)
    except OSError:
        return False


def parse_reading(line: str) -> JmxReading:
    """A helper's JSON line as a reading; raises JmxUnavailable for its error line."""
    data = json.loads(line)
    if "error" in data:
        raise JmxUnavailable(str(data["error"]))
    clients = [JvmClient(client_id=c["client_id"], type=c["type"],
                         metrics=_numbers(c["metrics"]), nodes=_nodes(c["nodes"]))
               for c in data["clients"]]
    return JmxReading(ts_ms=data["ts_ms"], clients=clients, poll_ms=data.get("poll_ms"))


def _nodes(by_id: dict[str, dict[str, float]]) -> dict[int, dict[str, float]]:
    """Node metrics keyed by the client's connection ids ("-1", "3", "+3") -> kmon's node ids."""
    nodes = {}
    for text, values in by_id.items():
        node_id = java_node_id(text)
        if node_id is None:
            raise ValueError(f"not a node id: {text[:40]!r}")
        nodes[node_id] = _numbers(values)
    return nodes


def _numbers(values: Mapping[str, object]) -> dict[str, float]:
    """The metrics that are numbers a row, its JSON and a recording's int64 columns hold:
    finite, within MAX_METRIC either way (the watched JVM registers its MBeans itself: a
    counter of 1e300, NaN or a string is no reading)."""
    return {name: value for name, value in values.items()
            if isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and abs(value) <= MAX_METRIC}


def helpers_of(pid: int) -> set[int]:
    """The JMX helpers attached to ``pid``: this kmon's and every other kmon command's (kmon's
    registry of its own processes names them, so their command lines are kmon's own)."""
    found = set()
    for own in own_processes.own_pids():
        try:
            argv = psutil.Process(own).cmdline()
        except psutil.Error:
            continue
        if HELPER in argv and argv[argv.index(HELPER) + 1:][:1] == [str(pid)]:
            found.add(own)
    return found


class JmxSource:
    """Kafka client metrics of one JVM, from a helper process attached to it.

    Raises JmxUnavailable at once when java is missing or the PID is gone, of
    another user, or not a JVM; a failed attach is raised by ``wait_first`` and,
    once the helper has ended on its own, by ``latest``.
    """

    def __init__(self, pid: int, interval_ms: int = 1000) -> None:
        self.pid = pid
        java = trusted_program("java", home="JAVA_HOME")
        if java is None:
            raise JmxUnavailable("java not found: JMX needs a JDK 11+ on PATH or in JAVA_HOME")
        _check_target(pid)
        self._latest: JmxReading | None = None
        self._error: str | None = None
        self._closed = False
        self._changed = threading.Condition()
        self._stderr: collections.deque[str] = collections.deque(maxlen=_STDERR_LINES)
        argv = [java, *HELPER_JVM_OPTIONS, *_helper_entry(java), str(pid),
                "--interval-ms", str(interval_ms)]
        self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, bufsize=1,
                                      env=jvm_environment(java))
        own_processes.register(self._proc.pid)  # kmon's machinery: never listed as a client
        threading.Thread(target=self._read_stdout, name=f"jmx-{pid}", daemon=True).start()
        threading.Thread(target=self._read_stderr, name=f"jmx-{pid}-err", daemon=True).start()

    @property
    def helper_pid(self) -> int:
        """PID of the helper JVM (to measure what it costs)."""
        return self._proc.pid

    def latest(self) -> JmxReading | None:
        """The newest reading, None before the first; raises once the helper has failed."""
        if self._error is not None and not self._closed:
            raise JmxUnavailable(self._error)
        return self._latest

    def wait_first(self, timeout_s: float) -> JmxReading:
        """Block until the first reading (attach takes about a second); JmxUnavailable if none."""
        with self._changed:
            self._changed.wait_for(lambda: self._latest is not None or self._error is not None,
                                   timeout_s)
        if self._latest is not None:
            return self._latest
        if self._error is not None:
            raise JmxUnavailable(self._error)
        raise JmxUnavailable(f"no JMX reading from PID {self.pid} within {timeout_s:g} s")

    def wait_newer(self, ts_ms: int, timeout_s: float) -> JmxReading | None:
        """Block until a reading newer than ``ts_ms`` (or the timeout); the newest reading."""
        with self._changed:
            self._changed.wait_for(lambda: self._error is not None or (
                self._latest is not None and self._latest.ts_ms > ts_ms), timeout_s)
        return self.latest()

    def close(self) -> None:
        """Stop the helper (it exits when its stdin closes)."""
        self._closed = True
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        own_processes.unregister(self._proc.pid)

    def __enter__(self) -> JmxSource:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _read_stdout(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            try:
                reading = parse_reading(line)
            except JmxUnavailable as exc:
                self._set(error=f"JMX of PID {self.pid}: {exc}")
                continue
            except (ValueError, KeyError, TypeError) as exc:
                self._set(error=f"JMX helper for PID {self.pid} wrote an unreadable line: {exc}")
                continue
            self._set(reading=reading)
        code = self._proc.wait()
        if self._error is None and not self._closed:
            said = next((s for s in reversed(self._stderr) if s.strip()), "no message")
            self._set(error=f"JMX helper for PID {self.pid} exited ({code}): {said}")

    def _read_stderr(self) -> None:
        assert self._proc.stderr is not None
        for line in self._proc.stderr:
            self._stderr.append(line.rstrip("\n"))

    def _set(self, reading: JmxReading | None = None, error: str | None = None) -> None:
        with self._changed:
            if reading is not None:
                self._latest = reading
            if error is not None and self._error is None:
                self._error = error
            self._changed.notify_all()


def _check_target(pid: int) -> None:
    """Refuse what attach cannot do; attach signals its target, which kills a non-JVM."""
    try:
        proc = psutil.Process(pid)
        name, uid = proc.name(), proc.uids().effective
    except psutil.NoSuchProcess:
        raise JmxUnavailable(f"no such process: PID {pid}") from None
    except psutil.Error as exc:
        raise JmxUnavailable(f"cannot inspect PID {pid}: {exc}") from None
    if uid != os.geteuid() and os.geteuid() != 0:
        raise JmxUnavailable(f"PID {pid} ({name}) runs as uid {uid}: "
                             "JMX attach needs the same user")
    if not is_jvm(pid):
        raise JmxUnavailable(f"PID {pid} ({name}) is not a JVM")


def _helper_entry(java: str) -> list[str]:
    """Arguments naming the helper: compiled classes when javac exists, else its source."""
    source = (files("kmon") / "java" / f"{HELPER}.java").read_bytes()
    cache = _cache_dir() / hashlib.sha256(source).hexdigest()
    if (cache / f"{HELPER}.class").exists():
        return ["-cp", str(cache), HELPER]
    javac = trusted_program("javac", home="JAVA_HOME")
    if javac is None:  # the single-file source launcher compiles it in memory, every start
        cache.mkdir(mode=0o700, exist_ok=True)
        path = cache / f"{HELPER}.java"
        path.write_bytes(source)
        return [str(path)]
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=cache.parent))
    try:
        (work / f"{HELPER}.java").write_bytes(source)
        result = subprocess.run([javac, "-nowarn", "-d", str(work), str(work / f"{HELPER}.java")],
                                capture_output=True, text=True, timeout=120,
                                env=jvm_environment(javac))
        if result.returncode != 0:
            said = (result.stderr.strip().splitlines() or ["no message"])[0]
            raise JmxUnavailable(f"cannot compile the JMX helper: {said}")
        try:
            work.rename(cache)  # atomic: a concurrent kmon may have won, which is as good
        except OSError:
            if not (cache / f"{HELPER}.class").exists():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return ["-cp", str(cache), HELPER]


def _cache_dir() -> Path:
    """The helper cache (see kmon.files.private_cache_dir: root's own when kmon runs as root)."""
    try:
        return private_cache_dir("jmx")
    except UnsafeFile as err:
        raise JmxUnavailable(f"refusing to run the JMX helper: {err}") from None
