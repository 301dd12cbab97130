"""What ``kmon serve`` costs on a busy host: CPU, scrape time, and memory over a simulated day.

    python -m benchmarks serve_cost [--processes 50] [--connections 100] [--seconds 60]
                                    [--day-polls 17280]
    python -m benchmarks serve_cost --quick      # a short smoke run

1. CPU and scrapes. --processes helper processes (each with librdkafka mapped, so
the host view takes them for Kafka clients) hold --connections connections each
to a listener helper, a few of them carrying a little traffic
(dashboard_cost.py's helper roles). ``kmon serve --interval 5s`` runs as its own
process, scraped every 15 s over --seconds; beside it, over the same seconds, the
engine alone (a HostSession polled every 5 s, no exporter) in a helper process of
this script, both with --wire (auto: as root, the host's one packet capture; off: none).
Each share is user + system CPU seconds of that process (all its
threads) over wall seconds; the ratio serve/engine is the exporter's own cost.
Then 20 scrapes back to back: the time to a complete answer. Targets: serve under
3% of one core, a scrape under 50 ms.

2. Memory over a simulated day. A day of real polls takes a day, so a synthetic
host (--processes processes of --connections connections, about 1% of them closed
and replaced each poll with closed/opened events, one process in ten replaced by a
new one every simulated hour) feeds kmon's HostMetrics --day-polls times (17,280 is
a day at 5 s), collected as Prometheus text every third poll (a 15 s scrape). RSS
after gc every sixth of the run; "@end/@first" near 1.0 means flat.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import random
import statistics
import subprocess
import sys
import time
import urllib.request

import psutil

from benchmarks.api import BenchmarkError, Result, UsageError
from benchmarks.dashboard_cost import role_client, role_listener
from benchmarks.helpers import Helpers, cpu_seconds, exit_when_parent_goes
from kmon.model import (
    CloseStory,
    Connection,
    Event,
    EventKind,
    ProcessView,
    Role,
    Snapshot,
)

READY_TIMEOUT_S = 180.0
INTERVAL_S, SCRAPE_EVERY_S = 5.0, 15.0
CPU_TARGET, SCRAPE_TARGET_MS = 0.03, 50.0
MIB = 1 << 20


# -- helper roles -----------------------------------------------------------------------------


def role_kafka_client(port: int, count: int) -> None:
    """A client helper with librdkafka mapped (as every confluent-kafka program has)."""
    import confluent_kafka  # noqa: F401  (mapped: the host view's sign of a Kafka client)

    role_client(port, count)


def role_engine(seconds: float, wire: str, processes: int) -> None:
    """The engine alone: a HostSession polled every 5 s, ready once it watches ``processes``
    (its start-up, as serve's, outside the measurement); prints its poll count at the end."""
    from kmon.engine.facade import EngineSettings, HostTarget, SamplerSettings, open_session

    session = open_session(HostTarget(), EngineSettings(
        SamplerSettings(require_kafka=False, wire=wire), interval_ms=int(INTERVAL_S * 1000)))
    while len(session.poll()[0].processes) < processes:
        time.sleep(1.0)
    session.poll()  # one more: each process sampled once at least, as serve's
    print("ready", flush=True)
    ends, polls = time.monotonic() + seconds, 0
    while time.monotonic() < ends:
        began = time.monotonic()
        session.poll()
        polls += 1
        time.sleep(max(0.0, began + INTERVAL_S - time.monotonic()))
    print("polls", polls, flush=True)


# -- part 1: CPU and scrapes -----------------------------------------------------------------


def scrape(address: str) -> tuple[float, str]:
    """(milliseconds to the whole answer, the text) of one GET /metrics."""
    began = time.perf_counter()
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=60) as answer:
        text = answer.read().decode()
    return (time.perf_counter() - began) * 1000, text


def watched(text: str) -> int:
    line = next((row for row in text.splitlines()
                 if row.startswith("kmon_watched_processes ")), "")
    return int(float(line.split()[1])) if line else 0


def start_serve(wire: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "kmon", "serve", "--listen", "127.0.0.1:0",
                             "--interval", f"{INTERVAL_S:g}s", "--wire", wire],
                            stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    if "/metrics" not in line:
        raise RuntimeError(f"kmon serve did not start: {line}")
    return proc, line.split("http://", 1)[1].split("/metrics", 1)[0]


def cpu_and_scrapes(processes: int, connections: int, seconds: float, wire: str) -> dict:
    with Helpers("serve_cost", READY_TIMEOUT_S) as helpers:
        listener = helpers.start("--role", "listener", "--count", str(processes * connections))
        port = helpers.line(listener, "port")[0]
        clients = [helpers.start("--role", "client", "--port", port, "--count",
                                 str(connections)) for _ in range(processes)]
        for client in clients:
            helpers.line(client, "ready")
        serve, address = start_serve(wire)
        try:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while watched(scrape(address)[1]) < processes:
                if time.monotonic() > deadline:
                    raise RuntimeError("kmon serve never found every client process")
                time.sleep(1.0)
            time.sleep(INTERVAL_S)  # one more poll: each process sampled once at least
            engine = helpers.start("--role", "engine", "--seconds", str(seconds), "--wire", wire,
                                   "--count", str(processes))
            helpers.line(engine, "ready")
            serve_before, engine_before = cpu_seconds(serve.pid), cpu_seconds(engine.pid)
            began, scrapes = time.perf_counter(), []
            while time.perf_counter() - began < seconds:
                scrapes.append(scrape(address)[0])
                time.sleep(max(0.0, began + len(scrapes) * SCRAPE_EVERY_S
                               - time.perf_counter()))
            took = time.perf_counter() - began
            serve_share = (cpu_seconds(serve.pid) - serve_before) / took
            engine_share = (cpu_seconds(engine.pid) - engine_before) / took
            helpers.line(engine, "polls")
            burst = [scrape(address) for _ in range(20)]
            rss = psutil.Process(serve.pid).memory_info().rss
        finally:
            serve.terminate()
            serve.wait(30)
    return {"serve": serve_share, "engine": engine_share, "scrapes_ms": scrapes,
            "burst_ms": [ms for ms, _ in burst], "series": burst[-1][1].count("\nkmon_"),
            "bytes": len(burst[-1][1]), "rss": rss}


# -- part 2: memory over a simulated day ---------------------------------------------------------


class SyntheticHost:
    """Processes whose connections close and open each poll, with events as the engine
    makes them; a tenth of the processes replaced by new ones every simulated hour."""

    def __init__(self, processes: int, connections: int, seed: int = 11) -> None:
        self.rng, self.connections = random.Random(seed), connections
        self.ts_ms, self.next_pid, self.next_key, self.polls = 1_700_000_000_000, 100_000, 0, 0
        self.procs: dict[int, dict[str, Connection]] = {}
        for _ in range(processes):
            self._new_process()

    def _new_process(self) -> None:
        self.next_pid += 1
        self.procs[self.next_pid] = dict(self._connection() for _ in range(self.connections))

    def _connection(self) -> tuple[str, Connection]:
        self.next_key += 1
        broker = self.rng.randrange(6)
        role = Role.COORDINATOR if self.rng.random() < 0.05 else Role.BROKER
        key = f"sock:{self.next_key}"
        return key, Connection(key=key, role=role, node_id=broker, broker_id=broker,
                               client=f"rdkafka#producer-{self.rng.randrange(3)}",
                               local=f"10.0.0.5:{20_000 + self.next_key % 40_000}",
                               remote=f"10.1.0.{broker}:9092", state="ESTABLISHED",
                               idle_ms=self.rng.randrange(300_000), idle_limit_ms=540_000,
                               idle_limit_by="client")

    def poll(self) -> tuple[Snapshot, list[Event]]:
        self.polls += 1
        self.ts_ms += int(INTERVAL_S * 1000)
        events = []
        if self.polls % 720 == 0:  # an hour at 5 s
            for pid in self.rng.sample(sorted(self.procs), max(1, len(self.procs) // 10)):
                del self.procs[pid]
                self._new_process()
        for pid, conns in self.procs.items():
            for conn in conns.values():
                conn.idle_ms += int(INTERVAL_S * 1000)
            for key in self.rng.sample(sorted(conns), max(1, len(conns) // 100)):
                gone = conns.pop(key)
                events.append(Event(self.ts_ms, EventKind.CLOSED, pid, key, gone.role,
                                    broker_id=gone.broker_id, client=gone.client,
                                    close=CloseStory("client", "client_idle_reap",
                                                     gone.idle_ms, 600_000)))
                key, conn = self._connection()
                conns[key] = conn
                events.append(Event(self.ts_ms, EventKind.OPENED, pid, key, conn.role,
                                    broker_id=conn.broker_id, client=conn.client))
        views = [ProcessView(pid, "java", f"java -jar app-{pid}.jar",
                             connections=list(conns.values()))
                 for pid, conns in self.procs.items()]
        return Snapshot(self.ts_ms, "bench-host", views), events


def memory_over_a_day(processes: int, connections: int, polls: int) -> list[tuple[int, int]]:
    from prometheus_client import CollectorRegistry, generate_latest

    from kmon.export.collector import HostCollector
    from kmon.export.metrics import HostMetrics

    host = SyntheticHost(processes, connections)
    metrics = HostMetrics(count_fds=False)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HostCollector(metrics))
    points, me = [], psutil.Process()
    for poll in range(1, polls + 1):
        snapshot, events = host.poll()
        metrics.update(snapshot, events, dict.fromkeys(host.procs, "10.1.0.0:9092 +5"), 0.01)
        if poll % 3 == 0:
            generate_latest(registry)
        if poll % max(1, polls // 6) == 0:
            gc.collect()
            points.append((poll, me.memory_info().rss))
    return points


# -- report -------------------------------------------------------------------------------------


def measure(args: argparse.Namespace) -> Result:
    print(f"kmon serve cost: Python {platform.python_version()}, {os.cpu_count()} CPUs; "
          f"{args.processes} processes x {args.connections} connections")
    cpu = cpu_and_scrapes(args.processes, args.connections, args.seconds, args.wire)
    ratio = cpu["serve"] / cpu["engine"] if cpu["engine"] else float("inf")
    print(f"--wire {args.wire}: CPU over {args.seconds:g}s at a {INTERVAL_S:g}s interval, "
          f"{SCRAPE_EVERY_S:g}s scrapes: kmon serve {cpu['serve']:.2%} of one core, the engine "
          f"alone {cpu['engine']:.2%} (serve/engine {ratio:.2f}x; target < {CPU_TARGET:.0%})")
    print(f"scrapes during the run: {', '.join(f'{ms:.1f}' for ms in cpu['scrapes_ms'])} ms; "
          f"20 back to back: median {statistics.median(cpu['burst_ms']):.1f} ms, max "
          f"{max(cpu['burst_ms']):.1f} ms (target < {SCRAPE_TARGET_MS:g} ms); "
          f"{cpu['series']} series, {cpu['bytes']:,} bytes; serve RSS {cpu['rss'] / MIB:.0f} MiB")
    began = time.perf_counter()
    points = memory_over_a_day(args.processes, args.connections, args.day_polls)
    print(f"memory over {args.day_polls} simulated polls ({args.day_polls * INTERVAL_S / 3600:.0f}"
          f" h at {INTERVAL_S:g}s; {time.perf_counter() - began:.0f}s to run): RSS "
          + ", ".join(f"@{poll}: {rss / MIB:.1f} MiB" for poll, rss in points)
          + f"; @end/@first {points[-1][1] / points[0][1]:.3f}")
    result = Result()
    result.figure("kmon serve CPU", cpu["serve"] * 100, "% of a core")
    result.figure("engine alone CPU", cpu["engine"] * 100, "% of a core")
    result.figure("scrape median", statistics.median(cpu["burst_ms"]), "ms")
    result.figure("RSS, first", points[0][1] / MIB, "MiB")
    result.figure("RSS, end of the day", points[-1][1] / MIB, "MiB")
    if cpu["engine"]:
        result.ratio("serve / engine", "kmon serve CPU", "engine alone CPU")
    result.ratio("RSS end / first", "RSS, end of the day", "RSS, first")
    return result


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--processes", type=int, default=50)
    parser.add_argument("--connections", type=int, default=100, help="per process")
    parser.add_argument("--seconds", type=float, default=60.0, help="of the CPU measurement")
    parser.add_argument("--day-polls", type=int, default=17_280,
                        help="polls of the memory run (17,280: a day at 5 s)")
    parser.add_argument("--wire", choices=("auto", "off"), default="auto",
                        help="kmon's --wire for serve and the engine alone (default auto: "
                             "the host's one packet capture, as root)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 5 processes, 20 s, 600 polls")
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)


ROLES = ("listener", "client", "engine")


def helper(args: argparse.Namespace) -> int:
    exit_when_parent_goes()
    if args.role == "listener":
        role_listener(args.count)
    elif args.role == "client":
        role_kafka_client(args.port, args.count)
    else:
        role_engine(args.seconds, args.wire, args.count)
    return 0


def run(args: argparse.Namespace) -> Result:
    if args.quick:
        args.processes, args.seconds, args.day_polls = 5, 20.0, 600
    if args.processes < 1 or args.connections < 1 or args.seconds < 15 or args.day_polls < 6:
        raise UsageError("need --processes >= 1, --connections >= 1, --seconds >= 15, "
                             "--day-polls >= 6")
    try:
        return measure(args)
    except (OSError, RuntimeError) as exc:
        raise BenchmarkError(str(exc)) from exc
