"""What reading a JVM's Kafka client metrics over JMX costs: attach latency and per-poll cost.

    python -m benchmarks jmx_cost [--instances 50] [--seconds 8] [--interval-ms 500]

Targets are tests/java/FakeKafkaClient.java consumers on the embedded mock
cluster (real sockets, Kafka's MBean names): one with a single client instance
(the baseline) and one with --instances client instances in the same JVM.
Attach latency is the time from ``JmxSource(pid)`` to its first reading: cold
(an empty helper cache: compiling the helper, and the target's first attach,
which starts its management agent), a first attach with the helper cached,
warm (helper cached, agent running) and with the single-file source launcher
(no javac: the helper is compiled in memory at every start).
Through the CLI: time to the first snapshot of ``kmon attach PID --once --json`` on a
fresh JVM (its agent not yet started), on a JVM already attached once, and on an
instrumented librdkafka consumer, in the same run.
Per poll: the helper's own poll time (``poll_ms``), the CPU the helper and the
target JVM spend per poll (the target's measured against an equal window
without the helper), and the helper's RSS.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

from benchmarks.api import BenchmarkError, Result
from benchmarks.helpers import REPO
from kmon.sources.jvm.jmx import JmxReading, JmxSource
from kmon.sources.processes.child_env import launching_with

FAKE = REPO / "tests" / "java" / "FakeKafkaClient.java"
WARMUP_POLLS = 3  # the helper's and target's JIT warm up over the first polls


@dataclass
class PollRow:
    """Per-poll cost of one target; times in milliseconds."""

    instances: int
    mbeans: int
    polls: int
    poll_ms_median: float
    poll_ms_p95: float
    helper_cpu_ms: float
    target_cpu_ms: float
    helper_rss_mb: float


@contextmanager
def started(argv: list[str], ready: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A child process and its first stdout line starting with ``ready``; stopped on exit."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(ready):
                yield proc, line.strip()
                break
        else:
            raise SystemExit(f"{argv[:3]} ended before printing {ready!r}")
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.terminate()
        proc.wait(10)


def fake_consumer(bootstrap: str, instances: int) -> list[str]:
    """argv of a FakeKafkaClient consumer with ``instances`` client MBean sets."""
    brokers = ",".join(f"{i}={hp}" for i, hp in enumerate(bootstrap.split(","), start=1))
    return ["java", "-Xmx128m", str(FAKE), "--bootstrap", bootstrap, "--brokers", brokers,
            "--role", "consumer", "--client-id", f"bench-{instances}", "--coordinator", "2",
            "--leaders", "1,3", "--instances", str(instances)]


def attach_s(pid: int) -> float:
    """Seconds from starting a JmxSource to its first reading."""
    start = time.perf_counter()
    with JmxSource(pid) as source:
        source.wait_first(60)
        return time.perf_counter() - start


def cli_attach_s(pid: int) -> float:
    """Seconds ``kmon attach PID --once --json`` takes to print its snapshot and exit."""
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "kmon", "attach", str(pid), "--once", "--json"],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"kmon attach {pid} failed: {result.stderr.strip()}")
    return time.perf_counter() - start


def source_launcher_attach_s(pid: int) -> float:
    """attach_s with java but no javac on PATH (and an empty cache): the source launcher."""
    java = shutil.which("java")
    assert java is not None
    with tempfile.TemporaryDirectory(prefix="kmon-nojavac-") as tmp:
        (Path(tmp) / "java").symlink_to(os.path.realpath(java))
        env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
        with launching_with({**env, "PATH": tmp, "XDG_CACHE_HOME": tmp}):
            return attach_s(pid)



def cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def poll_cost(pid: int, instances: int, seconds: float, interval_ms: int) -> PollRow:
    """Attach to ``pid`` and measure every poll over ``seconds``."""
    target = psutil.Process(pid)
    idle_start = cpu_s(target)
    time.sleep(seconds)
    target_idle_s = cpu_s(target) - idle_start

    readings: list[JmxReading] = []
    with JmxSource(pid, interval_ms=interval_ms) as source:
        source.wait_first(60)
        helper = psutil.Process(source.helper_pid)
        while len(readings) < WARMUP_POLLS:  # the first polls warm up the JIT: not counted
            readings = collect(source, readings)
        counted_from = len(readings)
        helper_start, target_start = cpu_s(helper), cpu_s(target)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            readings = collect(source, readings)
        helper_used = cpu_s(helper) - helper_start
        target_used = cpu_s(target) - target_start
        rss_mb = helper.memory_info().rss / 2**20
    counted = readings[counted_from:]
    times = sorted(r.poll_ms or 0.0 for r in counted)
    polls = len(counted)
    mbeans = sum(1 + len(c.nodes) + (c.type == "consumer") for c in counted[-1].clients)
    return PollRow(instances=instances, mbeans=mbeans, polls=polls,
                   poll_ms_median=statistics.median(times),
                   poll_ms_p95=times[min(len(times) - 1, round(0.95 * (len(times) - 1)))],
                   helper_cpu_ms=helper_used * 1000 / polls,
                   target_cpu_ms=max(0.0, target_used - target_idle_s) * 1000 / polls,
                   helper_rss_mb=rss_mb)


def collect(source: JmxSource, readings: list[JmxReading]) -> list[JmxReading]:
    """``readings`` with the source's newest reading added if it is new."""
    time.sleep(0.02)
    newest = source.latest()
    if newest is not None and (not readings or newest.ts_ms != readings[-1].ts_ms):
        return [*readings, newest]
    return readings


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--instances", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--interval-ms", type=int, default=500)


def run(args: argparse.Namespace) -> Result:
    if shutil.which("java") is None:
        raise BenchmarkError("java (a JDK 11+) is needed")

    cluster_argv = [sys.executable, "-m", "kmon", "devcluster", "--brokers", "3"]
    cache = tempfile.mkdtemp(prefix="kmon-jmx-bench-")
    rdkafka_argv = [sys.executable, "-m", "kmon.devtools.workload", "consumer", "--instrument"]
    with started(cluster_argv, "127.0.0.1:") as (_, bootstrap), \
            started(fake_consumer(bootstrap, 1), "READY") as (one, _), \
            started(fake_consumer(bootstrap, args.instances), "READY") as (many, _), \
            started(fake_consumer(bootstrap, 1), "READY") as (fresh, _), \
            started([*rdkafka_argv, bootstrap], "READY") as (rdkafka, _), \
            launching_with({**os.environ, "XDG_CACHE_HOME": cache}):
        cold = attach_s(one.pid)  # compiles the helper, starts the target's agent
        cli_fresh = cli_attach_s(fresh.pid)  # helper cached, starts the target's agent
        cli_jvm = statistics.median(cli_attach_s(fresh.pid) for _ in range(3))
        cli_rdkafka = statistics.median(cli_attach_s(rdkafka.pid) for _ in range(3))
        first = attach_s(many.pid)  # helper cached, starts the target's agent
        warm = statistics.median(attach_s(one.pid) for _ in range(3))
        source_launcher = source_launcher_attach_s(one.pid)
        rows = [poll_cost(one.pid, 1, args.seconds, args.interval_ms),
                poll_cost(many.pid, args.instances, args.seconds, args.interval_ms)]
    shutil.rmtree(cache, ignore_errors=True)

    print("attach latency (JmxSource() to first reading)")
    print(f"  cold: compile helper, start target's agent {cold * 1000:6.0f} ms   "
          f"({cold / warm:.1f}x warm)")
    print(f"  helper cached, start target's agent        {first * 1000:6.0f} ms   "
          f"({first / warm:.1f}x warm)")
    print(f"  warm: helper cached, agent running         {warm * 1000:6.0f} ms   (median of 3)")
    print(f"  source launcher (no javac), agent running  {source_launcher * 1000:6.0f} ms   "
          f"({source_launcher / warm:.1f}x warm)")
    print()
    print("kmon attach PID --once --json, to its snapshot (process start included)")
    print(f"  librdkafka consumer (agent's spool)        {cli_rdkafka * 1000:6.0f} ms   "
          "(median of 3)")
    print(f"  JVM, first attach (starts its agent)       {cli_fresh * 1000:6.0f} ms   "
          f"({cli_fresh / cli_rdkafka:.1f}x librdkafka)")
    print(f"  JVM, agent running                         {cli_jvm * 1000:6.0f} ms   "
          f"({cli_jvm / cli_rdkafka:.1f}x librdkafka, median of 3)")
    print()
    print(f"per poll (interval {args.interval_ms} ms, {args.seconds:g} s after "
          f"{WARMUP_POLLS} warm-up polls)")
    header = ("instances", "MBeans", "polls", "poll ms p50", "poll ms p95", "helper CPU ms",
              "target CPU ms", "helper RSS MB")
    print("  " + "  ".join(f"{h:>13}" for h in header))
    for r in rows:
        values = (r.instances, r.mbeans, r.polls, f"{r.poll_ms_median:.1f}",
                  f"{r.poll_ms_p95:.1f}", f"{r.helper_cpu_ms:.1f}", f"{r.target_cpu_ms:.1f}",
                  f"{r.helper_rss_mb:.0f}")
        print("  " + "  ".join(f"{v:>13}" for v in values))
    base, big = rows
    print("  " + "  ".join(f"{v:>13}" for v in (
        "ratio", f"{big.mbeans / base.mbeans:.0f}x", "",
        f"{big.poll_ms_median / base.poll_ms_median:.1f}x",
        f"{big.poll_ms_p95 / base.poll_ms_p95:.1f}x",
        f"{big.helper_cpu_ms / max(base.helper_cpu_ms, 0.01):.1f}x",
        f"{big.target_cpu_ms / max(base.target_cpu_ms, 0.01):.1f}x",
        f"{big.helper_rss_mb / base.helper_rss_mb:.2f}x")))
    result = Result()
    for name, seconds in (("attach, cold", cold), ("attach, warm", warm),
                          ("kmon attach --once, JVM first", cli_fresh),
                          ("kmon attach --once, librdkafka", cli_rdkafka)):
        result.figure(name, seconds * 1000, "ms")
    result.figure("poll, 1 instance", base.poll_ms_median, "ms")
    result.figure(f"poll, {big.instances} instances", big.poll_ms_median, "ms")
    result.ratio("attach cold / warm", "attach, cold", "attach, warm")
    result.ratio("kmon attach --once, JVM / librdkafka", "kmon attach --once, JVM first",
                 "kmon attach --once, librdkafka")
    result.ratio(f"poll, {big.instances} instances / 1", f"poll, {big.instances} instances",
                 "poll, 1 instance")
    return result
