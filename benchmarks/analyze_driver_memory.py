"""What ``kmon analyze`` holds on its driver when a recording makes a result huge.

A tiny simulated fleet plus one ``lives`` file of N connections, each of another pid (a
recording anyone can hand kmon): ``churn_and_leaks`` has a row per pid. The real command
runs twice on it, ``--max-rows 0`` (every row to the driver, as before the bound) and the
default (the top 10,000), with Spark's default driver memory (1 GiB heap); for each run:
wall time, kmon's Python peak RSS, the Spark JVM's peak RSS and the most heap it kept
live after a collection (its GC log), and the ratios. A run still going after
``--limit`` seconds (a JVM out of heap can hang) is killed and said to be.

    python -m benchmarks analyze_driver_memory [--rows 300000 1000000] [--master local[2]]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.api import Result
from kmon.devtools.fleet_model import FleetSpec
from kmon.devtools.fleet_writer import simulate
from kmon.record.schema import SCHEMAS

TINY = FleetSpec(hosts=1, clients=4, brokers=3, hours=0.05, interval_ms=5000, seed=3)


def plant_lives(root: Path, rows: int) -> None:
    """A lives file of ``rows`` connections of ``rows`` pids, in the fleet's session."""
    snapshot = next((root / "snapshots").rglob("*.parquet"))
    session = pq.read_table(snapshot, columns=["session_id"])["session_id"][0].as_py()
    folder = root / "lives" / snapshot.parent.relative_to(root / "snapshots")
    folder.mkdir(parents=True, exist_ok=True)
    opened = pa.array(range(1_700_000_000_000, 1_700_000_000_000 + rows), pa.int64())
    pq.write_table(pa.table({
        "schema_version": pa.array([3] * rows, pa.int32()),
        "session_id": pa.array([session] * rows),
        "pid": pa.array(range(1, rows + 1), pa.int32()),
        "local": pa.array(["127.0.0.1:40000"] * rows),
        "remote": pa.array(["127.0.0.1:9092"] * rows),
        "opened_ms": opened,
        "closed_ms": pa.array(range(1_700_000_000_100, 1_700_000_000_100 + rows), pa.int64()),
        "closed_by": pa.array(["client"] * rows),
        "ending": pa.array([None] * rows, pa.string()),
    }, schema=SCHEMAS["lives"]), folder / "planted.parquet")


def analyze(root: Path, master: str, limit: float, *extra: str) -> dict:
    """One ``kmon analyze`` run: wall seconds, peak RSS of its Python and of its JVM, the
    JVM's most live heap after a collection (MiB), its exit and last stderr line."""
    gc_log = root.parent / "gc.log"
    gc_log.unlink(missing_ok=True)
    options = ["--conf", f"spark.driver.extraJavaOptions=-Xlog:gc:file={gc_log}"]
    started = time.monotonic()
    proc = psutil.Popen([sys.executable, "-m", "kmon", "analyze", str(root), "--master", master,
                         *options, *extra], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                        text=True)
    python = jvm = 0
    while proc.poll() is None:
        try:
            python = max(python, proc.memory_info().rss)
            jvm = max([jvm, *(c.memory_info().rss for c in proc.children(recursive=True))])
        except psutil.Error:
            pass
        if time.monotonic() - started > limit:
            for child in proc.children(recursive=True):
                child.kill()
            proc.kill()
        time.sleep(0.1)
    wall = time.monotonic() - started
    said = proc.stderr.read().strip().splitlines()
    heaps = [int(after) for after in re.findall(r"\d+M->(\d+)M\(", gc_log.read_text())
             ] if gc_log.exists() else []
    end = (f"killed after {limit:.0f} s" if wall > limit else
           f"exit {proc.returncode}: {(said or [''])[-1][:110]}")
    return {"wall": wall, "python": python / 2**20, "jvm": jvm / 2**20,
            "heap": max(heaps, default=0), "end": end}


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, nargs="+", default=[300_000, 1_000_000])
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--limit", type=float, default=300, help="seconds a run may take")


def run(args: argparse.Namespace) -> Result:
    result = Result()
    for rows in args.rows:
        with tempfile.TemporaryDirectory(prefix="kmon-bench-") as tmp:
            root = Path(tmp) / "rec"
            simulate(TINY, root)
            plant_lives(root, rows)
            runs = []
            for name, extra in (("every row (--max-rows 0)", ("--max-rows", "0")),
                                ("top 10,000 (default)", ())):
                runs.append(analyze(root, args.master, args.limit, *extra))
                r = runs[-1]
                print(f"{rows:>9,} rows, {name:>24}: {r['wall']:6.1f} s | Python "
                      f"{r['python']:5.0f} MiB, JVM {r['jvm']:5.0f} MiB, live heap "
                      f"{r['heap']:4d} MiB | {r['end']}", flush=True)
            old, new = runs
            print(f"{rows:>9,} rows, bounded / whole: wall {new['wall'] / old['wall']:.2f}x, "
                  f"Python {new['python'] / old['python']:.2f}x, "
                  f"JVM {new['jvm'] / old['jvm']:.2f}x, "
                  f"live heap {new['heap'] / max(old['heap'], 1):.2f}x\n", flush=True)
            for label, r in (("whole", old), ("bounded", new)):
                result.figure(f"{rows:,} rows, {label}: wall", r["wall"], "s")
                result.figure(f"{rows:,} rows, {label}: JVM RSS", r["jvm"], "MiB")
            for figure in ("wall", "JVM RSS"):
                result.ratio(f"{rows:,} rows, bounded / whole: {figure}",
                             f"{rows:,} rows, bounded: {figure}",
                             f"{rows:,} rows, whole: {figure}")
    return result
