"""What ``kmon analyze`` costs above Spark itself, and on a standalone cluster.

Times, in one run and each against its baseline:

* a bare Spark session (``--master``, UI off) that counts one row: the floor;
* ``kmon analyze`` on a tiny recording on that master: its ratio to the floor is
  kmon's fixed cost;
* ``kmon analyze`` on the same recording on a Spark standalone cluster (a master
  and two one-core workers started from pyspark's own scripts on this machine),
  against the local run, after checking both wrote the same tables.

kmon's first run on a machine also writes the driver's class archive
(kmon.analysis.classes), which costs it more; the script says whether it was there.

    python -m benchmarks analyze_cost [--master local[2]] [--runs 2] [--no-cluster]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq

from benchmarks.analyze_scale import SHAPE, analyze
from benchmarks.api import BenchmarkError, Result
from kmon.analysis.classes import archive_path
from kmon.devtools.fleet_writer import simulate
from kmon.devtools.spark_cluster import DRIVER_CONF, standalone

BARE = """
import sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master(sys.argv[1]).config("spark.ui.enabled", "false")
         .getOrCreate())
assert spark.range(1).count() == 1
spark.stop()
"""


def bare_session(master: str) -> float:
    """Wall seconds of a Python process that starts a Spark session and counts one row."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", BARE, master], check=True, capture_output=True)
    return time.monotonic() - started


def same_tables(first: Path, second: Path) -> bool:
    """True when two ``--out`` directories hold equal Parquet tables."""
    names = sorted(p.name for p in first.glob("*.parquet"))
    return bool(names) and names == sorted(p.name for p in second.glob("*.parquet")) and all(
        pq.read_table(first / n).equals(pq.read_table(second / n)) for n in names)


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--runs", type=int, default=2, help="alternating runs of each")
    parser.add_argument("--no-cluster", action="store_true")


def run(args: argparse.Namespace) -> Result:
    result = Result()
    with tempfile.TemporaryDirectory(prefix="kmon-bench-") as tmp:
        work = Path(tmp)
        rows = simulate(replace(SHAPE, hours=0.05), work / "tiny")["rows"]["snapshots"]
        archive = archive_path()
        archived = archive is not None and archive.is_file()
        print(f"class archive {archive}: "
              f"{'present' if archived else 'absent, the first run writes it'}")
        bare, local = [], []
        for run in range(args.runs):
            bare.append(bare_session(args.master))
            local.append(analyze(work / "tiny", work / f"local-{run}", args.master, "1g"))
            print(f"run {run + 1}: bare session {bare[-1]:5.1f} s | kmon analyze "
                  f"({rows:,} rows) {local[-1]:5.1f} s = {local[-1] / bare[-1]:.2f}x",
                  flush=True)
        floor, fixed = statistics.median(bare), statistics.median(local)
        print(f"median on {args.master}: bare session {floor:.1f} s, kmon analyze "
              f"{fixed:.1f} s = {fixed / floor:.2f}x the bare session")
        result.figure("bare Spark session", floor, "s")
        result.figure("kmon analyze, local", fixed, "s")
        result.ratio("analyze / bare session", "kmon analyze, local", "bare Spark session")
        if args.no_cluster:
            return result
        started = time.monotonic()
        with standalone(workers=2, cores=1) as url:
            up = time.monotonic() - started
            conf = [f"{key}={value}" for key, value in DRIVER_CONF.items()]
            cluster = analyze(work / "tiny", work / "cluster", url, "1g", conf)
        equal = same_tables(work / "local-0", work / "cluster")
        print(f"standalone {url} (2 workers x 1 core, up in {up:.1f} s): kmon analyze "
              f"{cluster:.1f} s = {cluster / fixed:.2f}x local; tables equal to local's: "
              f"{equal}")
        if not equal:
            raise BenchmarkError("the cluster's tables differ from local mode's")
        result.figure("kmon analyze, standalone", cluster, "s")
        result.ratio("standalone / local", "kmon analyze, standalone", "kmon analyze, local")
    return result
