"""What a real cluster costs to start: ``kmon devcluster --kafka`` against the mock and a bare JVM.

    python -m benchmarks kafka_cluster_start [--brokers 3] [--rounds 2]

Each round, in the same run, starts (1) ``kmon devcluster --kafka --brokers N``
until its bootstrap line (a Metadata request named every node), (2) the
embedded mock cluster (``kmon devcluster --brokers N``) until its bootstrap
line, and (3) a bare JVM (``java -version``), the floor of any Java start. It
prints each start time, the real cluster's against the other two, and each
Kafka JVM's resident memory 10 s after it was ready. The jars are cached
before the first round (the first fetch is a one-off, timed apart).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time

import psutil

from benchmarks.api import Result
from kmon.devtools import maven_jars


def until_first_line(argv: list[str]) -> tuple[float, subprocess.Popen]:
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    if not line.startswith("127.0.0.1:"):
        raise RuntimeError(f"{argv} did not start (exit code {proc.wait()})")
    return time.monotonic() - started, proc


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(60)


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)


def run(args: argparse.Namespace) -> Result:
    started = time.monotonic()
    maven_jars.resolved_jars(*maven_jars.BROKER_JARS)
    print(f"jars ready in {time.monotonic() - started:.1f}s (a fetch only the first time)")
    kmon = [sys.executable, "-m", "kmon", "devcluster", "--brokers", str(args.brokers)]
    real, mock, jvm = [], [], []
    for round_number in range(1, args.rounds + 1):
        seconds, proc = until_first_line([*kmon, "--kafka"])
        real.append(seconds)
        time.sleep(10)
        jvms = [p for p in psutil.Process(proc.pid).children(recursive=True)
                if "kafka.Kafka" in p.cmdline()]
        rss = [p.memory_info().rss / 2**20 for p in jvms]
        stop(proc)
        seconds, proc = until_first_line(kmon)
        mock.append(seconds)
        stop(proc)
        started = time.monotonic()
        subprocess.run([shutil.which("java"), "-version"], capture_output=True, check=True)
        jvm.append(time.monotonic() - started)
        print(f"round {round_number}: real {real[-1]:.1f}s, mock {mock[-1]:.2f}s, "
              f"bare JVM {jvm[-1]:.2f}s; Kafka JVMs' RSS {', '.join(f'{m:.0f}' for m in rss)} MiB")
    real_s, mock_s, jvm_s = (statistics.median(v) for v in (real, mock, jvm))
    print(f"median start of {args.brokers} real nodes: {real_s:.1f}s = {real_s / mock_s:.0f}x "
          f"the mock cluster ({mock_s:.2f}s), {real_s / jvm_s:.0f}x a bare JVM ({jvm_s:.2f}s)")
    result = Result()
    result.figure("real cluster start", real_s, "s")
    result.figure("mock cluster start", mock_s, "s")
    result.figure("bare JVM start", jvm_s, "s")
    result.ratio("real / mock", "real cluster start", "mock cluster start")
    result.ratio("real / bare JVM", "real cluster start", "bare JVM start")
    return result
