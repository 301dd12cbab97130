"""How soon ``kmon ps`` (no ``-b``) names a plain consumer's cluster and coordinator, against a
baseline tree, on an idle and on a loaded machine.

    python -m benchmarks ps_latency [--baseline REV] [--rounds 5] [--burners 2]

The promise (issue 33): ``kmon ps -o json`` without ``-b`` names an uninstrumented consumer's
cluster by the cluster's id and counts its coordinator connection within 10 s. As
tests/test_cluster_learned.py checks it: a one-node real Apache Kafka cluster whose brokers
reap idle connections after 8 s, a plain consumer of it (``kmon.devtools.workload``), and
``kmon ps -o json`` run again and again until its row of the consumer has both; the time from
the first start to that answer, and how many runs it took. Each round measures this checkout
and the baseline (``git archive REV kmon widgets``, unpacked in a temporary directory), in
turns, first with the machine as it is, then beside ``--burners`` CPU-bound processes (busy
loops, started for the phase and stopped after it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.api import BenchmarkError, Result
from benchmarks.helpers import REPO
from benchmarks.host_view_cost import Tree, baseline_tree

IDLE_MS = 8000  # the test's brokers' connections.max.idle.ms
GIVE_UP_S = 60.0  # a tree that has not answered by then counts as this long
BURN = "while True: pass"


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--baseline", default="main", metavar="REV",
                        help="the commit to measure against (default main)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--burners", type=int, default=2,
                        help="CPU-bound processes beside the loaded phase (default 2)")


def answered_in(tree: Tree, pid: int, truth: str) -> tuple[float, int]:
    """Seconds until ``kmon ps -o json`` (run again until it does) names ``pid``'s cluster as
    ``truth`` and counts one coordinator connection; and the runs it took."""
    started, runs = time.monotonic(), 0
    while time.monotonic() - started < GIVE_UP_S:
        runs += 1
        done = subprocess.run(tree.command("ps", "-o", "json"), capture_output=True, text=True,
                              env=tree.env, timeout=GIVE_UP_S)
        if done.returncode != 0:
            raise BenchmarkError(f"{tree.name}: kmon ps failed: {done.stderr.strip()}")
        rows = [p for p in json.loads(done.stdout)["processes"] if p["pid"] == pid]
        if rows and rows[0]["cluster"] == truth and rows[0]["coordinator"] == 1:
            return time.monotonic() - started, runs
    return GIVE_UP_S, runs


def phase(name: str, trees: list[Tree], pid: int, truth: str, rounds: int,
          result: Result) -> None:
    """``rounds`` of each tree's time to the answer, in turns: figures of the medians."""
    times: dict[str, list[float]] = {tree.name: [] for tree in trees}
    runs: dict[str, list[int]] = {tree.name: [] for tree in trees}
    for round_ in range(rounds):
        for tree in trees if round_ % 2 == 0 else trees[::-1]:
            seconds, count = answered_in(tree, pid, truth)
            times[tree.name].append(seconds)
            runs[tree.name].append(count)
            print(f"{name}, {tree.name}: answered in {seconds:.2f}s, {count} run(s)", flush=True)
    for tree in trees:
        label = f"{name}, {tree.name}"
        result.figure(f"{label}: median", statistics.median(times[tree.name]), "s")
        result.figure(f"{label}: slowest", max(times[tree.name]), "s")
        result.figure(f"{label}: runs of ps", sum(runs[tree.name]) / rounds)
    result.ratio(f"{name}: this / baseline, median", f"{name}, this: median",
                 f"{name}, baseline: median")
    result.ratio(f"{name}: this / baseline, slowest", f"{name}, this: slowest",
                 f"{name}, baseline: slowest")


def cluster_id(bootstrap: str) -> str:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until it has answered
    return admin.describe_cluster().result(timeout=20).cluster_id


def run(args: argparse.Namespace) -> Result:
    from kmon.devtools.kafka_cluster import ClusterError, KafkaCluster

    result = Result()
    with tempfile.TemporaryDirectory(prefix="kmon-ps-baseline-") as tmp:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", args.baseline, "kmon",
                                  "widgets"], capture_output=True, check=False)
        if archive.returncode != 0:
            raise BenchmarkError(f"--baseline {args.baseline}: {archive.stderr.decode().strip()}")
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        trees = [Tree("this", None), Tree("baseline", baseline_tree(Path(tmp)))]
        try:
            cluster = KafkaCluster(1, {"connections.max.idle.ms": str(IDLE_MS)})
            cluster.start()
        except ClusterError as err:
            raise BenchmarkError(str(err)) from err
        consumer = burners = None
        try:
            bootstrap = cluster.bootstrap()
            consumer = subprocess.Popen([sys.executable, "-m", "kmon.devtools.workload",
                                         "consumer", bootstrap], stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True)
            assert consumer.stdout is not None
            while "READY" not in (line := consumer.stdout.readline()):
                if not line:
                    raise BenchmarkError("the consumer did not start")
            truth = cluster_id(bootstrap)
            phase("idle", trees, consumer.pid, truth, args.rounds, result)
            burners = [subprocess.Popen([sys.executable, "-c", BURN])
                       for _ in range(args.burners)]
            phase(f"{args.burners} burners", trees, consumer.pid, truth, args.rounds, result)
        finally:
            for proc in (burners or []) + ([consumer] if consumer else []):
                proc.kill()
                proc.wait()
            cluster.stop()
    return result
