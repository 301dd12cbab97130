"""How ``kmon analyze`` cost grows: 10 million snapshot rows against a 1 million row baseline.

Simulates fleets (``kmon.devtools.fleet_model``) of the same shape, only with more hosts,
then times the real command, ``python -m kmon analyze DIR --out OUT``, on
``local[2]`` for each, and prints wall time, rows per second and the ratios.
A tiny fleet is timed too: its wall time is the fixed cost (JVM start, job
planning, outputs), and the growth above it is printed separately.

    python -m benchmarks analyze_scale [--rows 1000000 10000000] [--master local[2]]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.api import BenchmarkError, Result
from kmon.devtools.fleet_model import FleetSpec
from kmon.devtools.fleet_writer import simulate

SHAPE = FleetSpec(hosts=1, clients=25, brokers=30, hours=2.0, interval_ms=5000, seed=11,
                  close_wait_rate=0.05, churn_rate=0.3)


def analyze(root: Path, out: Path, master: str, driver_memory: str,
            conf: tuple[str, ...] = ()) -> float:
    """Wall seconds of one ``kmon analyze`` run (``conf``: more KEY=VALUE settings); a
    BenchmarkError on failure."""
    settings = [arg for kv in (f"spark.driver.memory={driver_memory}", *conf)
                for arg in ("--conf", kv)]
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "kmon", "analyze", str(root), "--out", str(out),
                             "--master", master, *settings], capture_output=True, text=True)
    if result.returncode != 0:
        raise BenchmarkError(f"kmon analyze failed on {root}:\n{result.stderr}")
    return time.monotonic() - started


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, nargs=2, default=[1_000_000, 10_000_000],
                        metavar=("BASELINE", "LARGE"))
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="4g")


def run(args: argparse.Namespace) -> Result:
    with tempfile.TemporaryDirectory(prefix="kmon-bench-") as tmp:
        work = Path(tmp)
        per_host = simulate(SHAPE, work / "calibrate")["rows"]["snapshots"]
        fleets = {"tiny": replace(SHAPE, hours=0.05)}
        for target in args.rows:
            fleets[f"{target:,}"] = replace(SHAPE, hosts=max(1, round(target / per_host)))
        runs = {}
        for name, spec in fleets.items():
            started = time.monotonic()
            rows = simulate(spec, work / name)["rows"]["snapshots"]
            simulated = time.monotonic() - started
            wall = analyze(work / name, work / f"{name}-out", args.master, args.driver_memory)
            runs[name] = (rows, simulated, wall)
            print(f"{name:>12}: {spec.hosts:3d} hosts, {rows:>11,} rows | simulate "
                  f"{simulated:6.1f} s | kmon analyze {wall:6.1f} s, {rows / wall:>9,.0f} rows/s",
                  flush=True)

    (tiny_rows, _, fixed), (small_rows, _, small), (large_rows, _, large) = runs.values()
    print(f"\nmaster {args.master}, driver memory {args.driver_memory}; "
          f"fleet shape: {SHAPE.clients} clients x {SHAPE.brokers} brokers per host, "
          f"{SHAPE.hours:g} h at {SHAPE.interval_ms / 1000:g} s")
    print(f"rows ratio {large_rows / small_rows:.2f}x -> wall time ratio {large / small:.2f}x; "
          f"throughput {large_rows / large:,.0f} vs {small_rows / small:,.0f} rows/s")
    print(f"above the fixed cost ({fixed:.1f} s on {tiny_rows:,} rows): "
          f"{large - fixed:.1f} s vs {small - fixed:.1f} s = "
          f"{(large - fixed) / (small - fixed):.2f}x for {large_rows / small_rows:.2f}x the rows")
    result = Result()
    result.figure("tiny fleet (the fixed cost)", fixed, "s")
    result.figure(f"{small_rows:,} rows", small, "s")
    result.figure(f"{large_rows:,} rows", large, "s")
    result.figure("rows, large / baseline", large_rows / small_rows)
    result.ratio("wall, large / baseline", f"{large_rows:,} rows", f"{small_rows:,} rows")
    return result
