"""What escaping C1 controls and DEL costs ``--json``: one snapshot of 2,000 connections.

    python -m benchmarks json_cost [--connections 2000] [--rounds 7]

Times one ``--json`` line as ``kmon attach`` makes it (``Snapshot.to_dict()``, then the
bytes) with the escape (``kmon.cli.json_lines.json_line``) and without it (``orjson.dumps``
alone, the baseline), in the same run, each the median of --rounds taken turn about.
Prints the rows a second each way, and the ratio. Twice: with ordinary strings, and
with every client id and process name full of C1 controls (each one is replaced).
"""

from __future__ import annotations

import argparse
import statistics
import time

import orjson

from benchmarks.api import Result
from kmon.cli.json_lines import escape_c1, json_line
from kmon.model import ClientInstance, Connection, ProcessView, Role, Snapshot


def snapshot(connections: int, text: str) -> Snapshot:
    clients = [ClientInstance(f"rdkafka#consumer-{n}", f"orders-{text}-{n}", "consumer",
                              {"group.id": f"g-{text}"}) for n in range(10)]
    rows = [Connection(key=f"sock:{n}", role=Role.BROKER, node_id=n % 12, broker_id=n % 12,
                       client=clients[n % 10].name, local=f"10.0.0.1:{20000 + n}",
                       remote=f"10.0.1.{n % 12}:9092", state="ESTABLISHED", idle_ms=n,
                       idle_limit_ms=540_000, bytes_sent=n * 100, bytes_received=n * 90,
                       broker_name=f"b{n % 12}.{text}:9092/{n % 12}",
                       evidence={"role": "stats", "idle": "kernel"}, confidence=1.0)
                for n in range(connections)]
    return Snapshot(1_700_000_000_000, "host",
                    [ProcessView(4242, f"java-{text}", f"java -jar app-{text}.jar", clients,
                                 rows)])


def seconds_per_line(snap: Snapshot, rounds: int) -> tuple[float, float]:
    """Median seconds of one line without and with the escape, measured turn about (this
    machine's speed drifts: each round measures both)."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        for make_line, spent in ((lambda r: orjson.dumps(r) + b"\n", times[0]),
                                 (json_line, times[1])):
            started = time.perf_counter()
            make_line(snap.to_dict())
            spent.append(time.perf_counter() - started)
    return statistics.median(times[0]), statistics.median(times[1])


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=21)


def run(args: argparse.Namespace) -> Result:
    result = Result()
    for case, text in (("ordinary strings", "svc"), ("C1 in every string", "\u009b31m\u0085x")):
        snap = snapshot(args.connections, text)
        baseline, escaped = seconds_per_line(snap, args.rounds)
        line = orjson.dumps(snap.to_dict())
        alone = statistics.median(timed(escape_c1, line) for _ in range(args.rounds))
        print(f"{case}: {args.connections} rows; orjson alone {baseline * 1000:.2f} ms a line "
              f"({args.connections / baseline:,.0f} rows/s), escaped {escaped * 1000:.2f} ms "
              f"({args.connections / escaped:,.0f} rows/s); ratio {escaped / baseline:.3f}; the "
              f"escape alone {alone * 1000:.3f} ms ({alone / baseline:.1%} of the line)")
        result.figure(f"{case}: orjson alone", baseline * 1000, "ms a line")
        result.figure(f"{case}: escaped", escaped * 1000, "ms a line")
        result.ratio(f"{case}: escaped / orjson", f"{case}: escaped", f"{case}: orjson alone")
    return result


def timed(function, argument) -> float:
    started = time.perf_counter()
    function(argument)
    return time.perf_counter() - started
