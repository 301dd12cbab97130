"""What recording costs: kmon record's CPU next to kmon attach's, and its disk use per hour.

    python -m benchmarks record_cost [--seconds 30]

One instrumented client process on the embedded mock cluster (a consumer and
a producer in one process, producing to every partition, so it holds several
connections) is watched at a 1 s interval, in the same run, by
``kmon record --pid P`` and by ``kmon attach P --json > /dev/null`` (the
baseline). The CPU share of each (user + system seconds over wall seconds,
after a warm-up) is printed with their ratio; the bytes the recording left,
as 10 s parts while running and compacted after a clean stop, are
extrapolated to an hour, per process and per connection (scaled to 10
connections). A linear extrapolation counts each file's fixed overhead once
per 30 s, so an hour's compacted file is smaller than this says; CPU times
come in 10 ms ticks, so a 30 s run resolves the ratio to about 0.1.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pyarrow.dataset as ds

from benchmarks.api import BenchmarkError, Result

WARM_UP_S = 3.0
INTERVAL = "1s"
BROKERS = 5  # the 4 partitions' leaders spread wider: 7 to 9 connections in the one process


def kmon_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "kmon", *args]


@contextlib.contextmanager
def processes() -> Iterator[list[subprocess.Popen]]:
    """Started processes, terminated (then killed) on the way out."""
    started: list[subprocess.Popen] = []
    try:
        yield started
    finally:
        for proc in reversed(started):
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def start_client(started: list[subprocess.Popen]) -> int:
    """A devcluster and one settled instrumented consumer+producer process; its pid."""
    cluster = subprocess.Popen(kmon_argv("devcluster", "--brokers", str(BROKERS)),
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    started.append(cluster)
    bootstrap = cluster.stdout.readline().strip()
    client = subprocess.Popen(
        [sys.executable, "-m", "kmon.devtools.workload", "both", bootstrap, "--instrument",
         "--produce-every", "0.1"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    started.append(client)
    if client.stdout.readline().strip() != "READY":
        raise RuntimeError("the benchmark's Kafka client did not start")
    return client.pid


def cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def recorded(root: Path) -> tuple[int, float, float]:
    """Bytes of the complete Parquet files under ``root``, the seconds of snapshots they
    hold, and the mean number of connections per snapshot."""
    size = sum(p.stat().st_size for p in root.rglob("*.parquet") if not p.name.startswith("."))
    stamps = ds.dataset(root / "snapshots", partitioning="hive").to_table(
        columns=["ts_ms"]).column("ts_ms").to_pylist()
    polls = sorted(set(stamps))
    seconds = (polls[-1] - polls[0]) / 1000 + (polls[1] - polls[0]) / 1000
    return size, seconds, len(stamps) / len(polls)


def measure(seconds: float) -> Result:
    with processes() as started, tempfile.TemporaryDirectory() as tmp:
        os.environ["KMON_SPOOL_DIR"] = str(Path(tmp, "spool"))
        Path(tmp, "spool").mkdir(mode=0o700)
        out = Path(tmp, "rec")
        pid = start_client(started)
        record = subprocess.Popen(
            kmon_argv("record", "--pid", str(pid), "--out", str(out), "--interval", INTERVAL),
            stderr=subprocess.PIPE, text=True)
        attach = subprocess.Popen(kmon_argv("attach", str(pid), "--json", "--interval", INTERVAL),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started += [record, attach]
        watched = {"kmon attach P --json > /dev/null": psutil.Process(attach.pid),
                   "kmon record --pid P": psutil.Process(record.pid)}
        time.sleep(WARM_UP_S)
        begin = time.monotonic()
        cpu_begin = {name: cpu_seconds(proc) for name, proc in watched.items()}
        time.sleep(seconds)
        wall = time.monotonic() - begin
        cpu = {name: cpu_seconds(proc) - cpu_begin[name] for name, proc in watched.items()}
        for proc in (record, attach):
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args[3]} ended early (exit code {proc.returncode})")
        running = recorded(out)
        record.send_signal(signal.SIGINT)
        summary = record.stderr.read().strip().splitlines()[-1]
        if record.wait(30) != 0:
            raise RuntimeError(f"kmon record failed: {summary}")
        stopped = recorded(out)

    print_cpu(cpu, wall)
    print()
    print(f"disk, one process with {stopped[2]:.1f} connections on average, "
          f"{INTERVAL} interval:")
    for label, (size, covered, connections) in (("while running (10 s parts)", running),
                                                ("after a clean stop (compacted)", stopped)):
        per_hour = size * 3600 / covered
        print(f"  {label:<32}{size:>9,} bytes for {covered:4.0f} s -> "
              f"{per_hour / 1e6:6.2f} MB/hour, {per_hour / connections / 1e3:6.1f} kB/hour "
              f"per connection, {per_hour / connections * 10 / 1e6:5.2f} MB/hour for 10")
    print(f"recorder's own summary: {summary}")
    result = Result()
    (attach, attach_cpu), (record, record_cpu) = cpu.items()
    result.figure("attach --json CPU share", attach_cpu / wall * 100, "% of a core")
    result.figure("record CPU share", record_cpu / wall * 100, "% of a core")
    result.figure("disk, compacted", stopped[0] * 3600 / stopped[1] / 1e6, "MB/hour")
    result.ratio("record / attach --json", "record CPU share", "attach --json CPU share")
    return result


def print_cpu(cpu: dict[str, float], wall: float) -> None:
    title = f"command (interval {INTERVAL})"
    header = f"{title:<36}{'cpu s':>8}{'wall s':>8}{'cpu share':>11}"
    print(header)
    print("-" * len(header))
    for name, seconds in cpu.items():
        print(f"{name:<36}{seconds:>8.3f}{wall:>8.1f}{seconds / wall:>10.2%}")
    baseline, recording = cpu.values()
    print(f"ratio record / attach: {recording / baseline:.2f}")


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=30.0, help="measured wall time")


def run(args: argparse.Namespace) -> Result:
    try:
        return measure(args.seconds)
    except (OSError, RuntimeError, psutil.Error) as exc:
        raise BenchmarkError(str(exc)) from exc
