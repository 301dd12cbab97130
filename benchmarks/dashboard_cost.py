"""What the attach dashboard costs: refresh time and CPU at 2,000 connections, memory per hour.

    python -m benchmarks dashboard_cost [--connections 2000] [--cpu-seconds 30] [--minutes 60]
    python -m benchmarks dashboard_cost --quick      # a short smoke run

1. Refresh cost. A helper process holds --connections TCP connections to a
listener in a second helper (127.0.0.1) and keeps a little traffic going on a
few of them, so rates and idle ages move. kmon attaches to it (ProcessSampler,
require_kafka=False) and the real AttachScreen runs in
``KmonApp(...).run_test(size=(200, 60))``: headless, so a frame is laid out and
composed but not encoded for, nor written to, a terminal. Per refresh: the
engine's ``Monitor.poll()`` and ``screen.apply()`` (wall times) and the frame
after it (CPU of the UI thread while the pilot lets Textual handle its
messages and repaint). "dash/engine" is (apply + frame) / poll. Then the CPU
share of the real timer-driven app at a 1 s interval (user + system seconds of
this process, all threads, over wall seconds; target: under 10% of one core)
next to the engine alone polling the same process at the same interval with no
UI, the baseline measured in the same run. The same for a 20-connection
process, for scale.

2. Memory over an hour. An hour of real refreshes takes an hour, so a
synthetic source (kmon.model records: ~--connections connections of one
client process with churn, CLOSE_WAITs, moving idle ages and byte counters;
events from kmon.engine.monitor.diff) feeds ``screen.apply()`` once per simulated
second, 1,000 ms apart, back to back, letting Textual draw a frame every
--pause-every (10) of them. tracemalloc's current memory and the RSS, after
gc.collect(), every sixth of the run; "@end/@first" near 1.0 means flat (the
timeline keeps 10 minutes, so the first point is already after it filled).
At the defaults the run takes about an hour (part 2, under tracemalloc, most
of it); --quick takes a few minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import platform
import random
import signal
import socket
import statistics
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import psutil
import textual

from benchmarks.api import BenchmarkError, Result, UsageError
from benchmarks.helpers import (
    Helpers,
    exit_when_parent_goes,
    no_time_wait,
    raise_fd_limit,
    serve_connections,
)
from kmon.engine.facade import ProcessSession, settle_heap
from kmon.engine.monitor import Monitor, diff
from kmon.engine.sampler import ProcessSampler, SamplerSettings
from kmon.model import (
    ClientInstance,
    Connection,
    Event,
    ProcessView,
    Role,
    Snapshot,
)
from kmon.present.dashboard_settings import DashboardSettings
from kmon.sources.kernel.socket_readers import open_socket_reader
from kmon.widgets.app import KmonApp
from kmon.widgets.attach_screen import AttachScreen
from kmon.widgets.connection_table import ConnectionTable

SIZE = (200, 60)
SMALL_CONNECTIONS = 20
BUSY_CONNECTIONS = 6  # of the helper's connections, these carry a little traffic
TRAFFIC_PERIOD_S = 0.25
FD_SLACK = 100
READY_TIMEOUT_S = 120.0
WARM_UP_REFRESHES = 3
WARM_UP_S = 3.0
CPU_TARGET = 0.10
MIB = 1 << 20
PROFILE_LINES = 25
HISTORY_WINDOW_MIN = DashboardSettings().history / 60  # at a 1 s interval


# -- helper processes ---------------------------------------------------------


def role_listener(count: int) -> None:
    """Accept connections on 127.0.0.1 and echo what arrives (a small reply: the client's
    in/s moves too); print the port first."""
    serve_connections(count + FD_SLACK, lambda data: data[:1024])


def role_client(port: int, count: int) -> None:
    """Hold `count` connections to the listener; a few of them carry a little traffic."""
    raise_fd_limit(count + FD_SLACK)
    conns = []
    for _ in range(count):
        conn = no_time_wait(socket.socket())
        conn.settimeout(10)
        conn.connect(("127.0.0.1", port))
        conns.append(conn)
    print("ready", len(conns), flush=True)
    rng = random.Random(1)
    tick = 0
    while True:
        time.sleep(TRAFFIC_PERIOD_S)
        tick += 1
        # a fixed few always busy, one more walking through the rest: idle ages reset there
        busy = conns[:BUSY_CONNECTIONS] + [conns[tick % len(conns)]]
        for conn in busy:
            with contextlib.suppress(OSError):
                conn.send(b"x" * rng.randrange(64, 4096))
                conn.recv(65536, socket.MSG_DONTWAIT)


def start_clients(helpers: Helpers, counts: list[int]) -> list[int]:
    """One listener, and one client process per count connected to it; their pids."""
    listener = helpers.start("--role", "listener", "--count", str(sum(counts)))
    port = helpers.line(listener, "port")[0]
    clients = [helpers.start("--role", "client", "--port", port, "--count", str(n))
               for n in counts]
    for client in clients:
        helpers.line(client, "ready")
    return [client.pid for client in clients]


# -- instrumented source and screen (measuring only: no behaviour changed) ----------


class TimedSource:
    """A snapshot source that times each poll of the one it wraps, one poll at a time."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.poll_ms: list[float] = []
        self.poll_cpu_s = 0.0  # CPU of the threads that ran the polls
        self._lock = threading.Lock()

    def poll(self) -> tuple[Snapshot, list[Event]]:
        with self._lock:
            start, cpu = time.perf_counter(), time.thread_time()
            result = self.inner.poll()
            self.poll_cpu_s += time.thread_time() - cpu
            self.poll_ms.append((time.perf_counter() - start) * 1000)
            return result


class TimedScreen(AttachScreen):
    """The real AttachScreen, its apply() timed."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.apply_ms: list[float] = []

    def apply(self, snapshot: Snapshot, events: list[Event]) -> None:
        start = time.perf_counter()
        super().apply(snapshot, events)
        self.apply_ms.append((time.perf_counter() - start) * 1000)


def engine(pid: int, readers: list) -> Monitor:
    """kmon's engine on `pid`, as `kmon attach --any-process --wire off` builds it (the
    wire source has its own benchmark)."""
    reader = open_socket_reader()
    readers.append(reader)
    sampler = ProcessSampler(pid, reader, SamplerSettings(require_kafka=False, wire="off"))
    return Monitor([sampler])


def dashboard(pid: int, source) -> tuple[KmonApp, TimedScreen]:
    screen = TimedScreen(pid, ProcessSession(source), DashboardSettings(interval_s=1.0))
    return KmonApp(screen), screen


async def until(pilot, condition: Callable[[], object], what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the dashboard never showed {what}")
        await pilot.pause(0.05)


async def stop_timer(app: KmonApp, screen: AttachScreen, pilot) -> None:
    """Pause the screen's refresh timer ("p"), let any poll in flight land."""
    await until(pilot, lambda: screen.view is not None, "its first refresh")
    await pilot.press("p")
    await app.workers.wait_for_complete()
    await pilot.pause()
    if not screen.paused:
        raise RuntimeError("the dashboard did not pause")


# -- part 1: refresh cost and CPU share ----------------------------------------------


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _p95(values: list[float]) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=20, method="inclusive")[18]


@dataclass
class Refreshes:
    """Per-refresh times of one process in the dashboard (ms)."""

    rows: int
    first_apply_ms: float
    poll_ms: list[float]
    apply_ms: list[float]
    frame_ms: list[float]

    @property
    def ui_ms(self) -> list[float]:
        return [a + f for a, f in zip(self.apply_ms, self.frame_ms, strict=True)]

    @property
    def total_ms(self) -> list[float]:
        return [p + u for p, u in zip(self.poll_ms, self.ui_ms, strict=True)]


async def time_refreshes(pid: int, refreshes: int, readers: list,
                         profile: bool = False) -> Refreshes:
    """Refreshes driven by hand: poll, apply, then one frame; the timer is paused."""
    source = TimedSource(engine(pid, readers))
    app, screen = dashboard(pid, source)
    frame_ms: list[float] = []
    async with app.run_test(size=SIZE) as pilot:
        await stop_timer(app, screen, pilot)
        first_apply = screen.apply_ms[0]
        polled = applied = 0
        for i in range(WARM_UP_REFRESHES + refreshes):
            if i == WARM_UP_REFRESHES:
                polled, applied, frame_ms = len(source.poll_ms), len(screen.apply_ms), []
            snapshot, events = source.poll()
            screen.apply(snapshot, events)
            cpu = time.thread_time()
            await pilot.pause()
            frame_ms.append((time.thread_time() - cpu) * 1000)
        result = Refreshes(screen.query_one(ConnectionTable).row_count, first_apply,
                           source.poll_ms[polled:], screen.apply_ms[applied:], frame_ms)
        if profile:
            await profile_refreshes(source, screen, pilot)
    return result


async def profile_refreshes(source: TimedSource, screen: TimedScreen, pilot,
                            refreshes: int = 10) -> None:
    """cProfile of apply() and of the frame after it, separately, over a few refreshes."""
    import cProfile
    import io
    import pstats

    apply, frame = cProfile.Profile(), cProfile.Profile()
    for _ in range(refreshes):
        snapshot, events = source.poll()
        apply.runcall(screen.apply, snapshot, events)
        frame.enable()
        await pilot.pause()
        frame.disable()
    for name, prof in (("apply", apply), ("frame", frame)):
        out = io.StringIO()
        stats = pstats.Stats(prof, stream=out).sort_stats("cumulative")
        stats.print_stats("textual|rich|widgets|kmon", PROFILE_LINES)
        text = out.getvalue()
        print(f"\ncProfile of {name} over {refreshes} refreshes of PID {screen.pid}, by "
              f"cumulative time:\n{text[text.index('   ncalls'):].rstrip()}")


@dataclass
class CpuShare:
    """CPU seconds over wall seconds of this process, and how many refreshes that bought."""

    cpu_s: float
    wall_s: float
    refreshes: int
    poll_cpu_s: float = 0.0
    apply_ms: list[float] = field(default_factory=list)

    @property
    def share(self) -> float:
        return self.cpu_s / self.wall_s


def engine_cpu_share(pid: int, seconds: float, readers: list) -> CpuShare:
    """The engine alone, no UI: Monitor.poll() of `pid` every 1 s for `seconds` (its heap
    settled as kmon's own loops settle theirs)."""
    monitor = engine(pid, readers)
    monitor.poll()
    settle_heap()
    wall, cpu = time.perf_counter(), time.process_time()
    refreshes, due = 0, wall
    while True:
        due += 1.0
        if due - wall > seconds + 1e-6:
            break
        time.sleep(max(0.0, due - time.perf_counter()))
        monitor.poll()
        refreshes += 1
    return CpuShare(time.process_time() - cpu, time.perf_counter() - wall, refreshes)


async def app_cpu_share(pid: int, seconds: float, readers: list) -> CpuShare:
    """The real app, its own 1 s timer polling in a worker thread, left alone for `seconds`."""
    source = TimedSource(engine(pid, readers))
    app, screen = dashboard(pid, source)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: screen.view is not None, "its first refresh")
        await asyncio.sleep(WARM_UP_S)
        polls, applies, poll_cpu = len(source.poll_ms), len(screen.apply_ms), source.poll_cpu_s
        wall, cpu = time.perf_counter(), time.process_time()
        await asyncio.sleep(seconds)
        result = CpuShare(time.process_time() - cpu, time.perf_counter() - wall,
                          len(source.poll_ms) - polls, source.poll_cpu_s - poll_cpu,
                          screen.apply_ms[applies:])
    return result


# -- part 2: memory over simulated time ---------------------------------------------


@dataclass
class _Live:
    """One synthetic connection's changing state."""

    key: str
    role: Role
    node_id: int | None
    broker_id: int | None
    client: str
    local: str
    remote: str
    hot: bool
    state: str = "ESTABLISHED"
    idle_ms: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    requests: int = 0
    rtt_ms: float = 1.0
    close_at: int | None = None  # tick at which a CLOSE_WAIT connection goes away


class ChurnSource:
    """Synthetic refreshes of one Kafka client process with about `connections` connections.

    Every refresh is 1,000 ms after the last. About 5% of the connections are
    busy almost every second, the rest now and then; idle ones age until the
    9-minute idle limit reaps them and they reconnect (a new key). Every 5
    refreshes 3 connections close and 3 new ones open; every 2 minutes one goes
    to CLOSE_WAIT and closes 30 s later. Events come from kmon.engine.monitor.diff,
    as the engine makes them.
    """

    BROKERS = 12
    CLIENTS = 8
    IDLE_LIMIT_MS = 540_000

    def __init__(self, pid: int, connections: int, seed: int = 7) -> None:
        self.pid, self.target = pid, connections
        self.rng = random.Random(seed)
        self.tick = 0
        self.ts_ms = 1_700_000_000_000
        self.next_port = 10_000
        self.next_inode = 5_000_000
        self.clients = [
            ClientInstance(name=f"rdkafka#consumer-{i}", client_id=f"orders-{i}", type="consumer",
                           config={"group.id": "orders", "bootstrap.servers": "kafka:9092"},
                           stats_age_ms=500)
            for i in range(self.CLIENTS)]
        self.live: dict[str, _Live] = {}
        for _ in range(connections):
            self._open()
        self.previous: ProcessView | None = None

    def _open(self) -> None:
        rng = self.rng
        client = rng.choice(self.clients).name
        broker = rng.randrange(self.BROKERS)
        pick = rng.random()
        if pick < 0.02:
            role, node = Role.BOOTSTRAP, -1 - rng.randrange(3)
        elif pick < 0.06:
            role, node = Role.COORDINATOR, 2147483647 - broker
        else:
            role, node = Role.BROKER, broker
        self.next_inode += 1
        self.next_port = 10_000 + (self.next_port + 1 - 10_000) % 50_000
        self.live[f"sock:{self.next_inode}"] = _Live(
            key=f"sock:{self.next_inode}", role=role, node_id=node,
            broker_id=None if role is Role.BOOTSTRAP else broker, client=client,
            local=f"10.0.0.5:{self.next_port}", remote=f"10.1.0.{broker + 1}:9092",
            hot=rng.random() < 0.05, idle_ms=rng.randrange(0, 300_000))

    def _advance(self) -> None:
        rng = self.rng
        self.tick += 1
        self.ts_ms += 1000
        for conn in list(self.live.values()):
            if conn.close_at is not None:
                if self.tick >= conn.close_at:
                    del self.live[conn.key]
                else:
                    conn.idle_ms += 1000
                continue
            if rng.random() < (0.9 if conn.hot else 0.01):
                conn.idle_ms = rng.randrange(0, 1000)
                conn.bytes_sent += rng.randrange(100, 200_000)
                conn.bytes_received += rng.randrange(100, 2_000_000)
                conn.requests += rng.randrange(1, 50)
                conn.rtt_ms = round(rng.uniform(0.2, 40.0), 1)
            else:
                conn.idle_ms += 1000
            if conn.idle_ms >= self.IDLE_LIMIT_MS:
                del self.live[conn.key]  # reaped by the broker
        if self.tick % 5 == 0:
            for key in rng.sample(sorted(self.live), min(3, len(self.live))):
                if self.live[key].close_at is None:
                    del self.live[key]
        if self.tick % 120 == 0 and self.live:
            conn = self.live[rng.choice(sorted(self.live))]
            conn.state, conn.close_at = "CLOSE_WAIT", self.tick + 30
        while len(self.live) < self.target:
            self._open()

    def _connection(self, c: _Live) -> Connection:
        return Connection(
            key=c.key, role=c.role, node_id=c.node_id, broker_id=c.broker_id, client=c.client,
            local=c.local, remote=c.remote, state=c.state, idle_ms=c.idle_ms,
            idle_limit_ms=self.IDLE_LIMIT_MS, bytes_sent=c.bytes_sent,
            bytes_received=c.bytes_received, requests_sent=c.requests,
            requests_received=c.requests, in_flight=0, rtt_ms=c.rtt_ms, tcp_rtt_ms=c.rtt_ms,
            broker_name=f"kafka-{c.broker_id}:9092/{c.broker_id}", fd=None,
            inode=int(c.key[5:]),
            evidence={"role": "stats", "node_id": "stats", "idle": "sock_diag",
                      "bytes": "sock_diag", "state": "sock_diag", "idle_limit": "client config",
                      "pairing": "exact"},
            confidence=1.0)

    def poll(self) -> tuple[Snapshot, list[Event]]:
        self._advance()
        view = ProcessView(self.pid, "java", "java -jar orders-consumer.jar", self.clients,
                           [self._connection(c) for c in self.live.values()])
        events = diff(self.previous, view, self.ts_ms) if self.previous else []
        self.previous = view
        return Snapshot(self.ts_ms, "bench-host", [view]), events


@dataclass
class MemoryPoint:
    minute: float
    refreshes: int
    rows: int
    tracks: int
    traced: int
    rss: int
    real_s: float


async def memory_over_time(connections: int, minutes: int, pause_every: int,
                           ) -> tuple[list[MemoryPoint], list[str], list[float]]:
    """Apply `minutes` * 60 synthetic refreshes; memory at six evenly spaced points."""
    gc.collect()
    tracemalloc.start()
    source = TimedSource(ChurnSource(pid=4242, connections=connections))
    app, screen = dashboard(4242, source)
    total = minutes * 60
    marks = {round(total * k / 6) for k in range(1, 7)}
    points: list[MemoryPoint] = []
    snapshots: list[tracemalloc.Snapshot] = []
    process = psutil.Process()
    start = time.perf_counter()
    async with app.run_test(size=SIZE) as pilot:
        await stop_timer(app, screen, pilot)  # the mount's own refresh was the first
        table = screen.query_one(ConnectionTable)
        while len(screen.apply_ms) < total:
            snapshot, events = source.poll()
            screen.apply(snapshot, events)
            done = len(screen.apply_ms)
            if done % pause_every == 0 or done in marks:
                await pilot.pause()
            if done in marks:
                gc.collect()
                points.append(MemoryPoint(done / 60, done, table.row_count,
                                          len(screen.history.tracks),
                                          tracemalloc.get_traced_memory()[0],
                                          process.memory_info().rss,
                                          time.perf_counter() - start))
                if len(points) in (1, 6):
                    snapshots.append(tracemalloc.take_snapshot())
                print(f"  memory: {done / 60:.0f} simulated min", file=sys.stderr, flush=True)
        apply_ms = screen.apply_ms[1:]
    tracemalloc.stop()
    growth = []
    if len(snapshots) == 2:
        # by file: memory that only moved between lines of one file (a timeline strip first
        # allocated where it is created, later where it is appended to) nets out
        stats = snapshots[1].compare_to(snapshots[0], "filename")
        growth = [f"{s.size_diff / 1024:+.0f} KiB  {s.traceback[0].filename}"
                  for s in sorted(stats, key=lambda s: -s.size_diff)[:5] if s.size_diff > 0]
    return points, growth, apply_ms


# -- report ---------------------------------------------------------------------------


def ms(values: list[float]) -> str:
    return f"{_median(values):>8.1f}{_p95(values):>7.1f}"


def print_refreshes(rows: list[tuple[str, Refreshes]], count: int) -> None:
    print(f"\n1a. time per refresh ({count} refreshes after {WARM_UP_REFRESHES} warm-up; "
          "ms, median and p95)")
    print("    poll = Monitor.poll() (engine), apply = screen.apply() wall time, frame = UI-thread")
    print("    CPU while Textual handles the messages and repaints, dash = apply + frame")
    header = (f"{'process':<18}{'rows':>6}{'poll med':>10}{'p95':>7}{'apply med':>10}{'p95':>7}"
              f"{'frame med':>10}{'p95':>7}{'dash med':>10}{'p95':>7}{'total med':>10}{'p95':>7}"
              f"{'dash/engine':>12}")
    print(header)
    print("-" * len(header))
    for name, r in rows:
        print(f"{name:<18}{r.rows:>6}{ms(r.poll_ms):>17}{_median(r.apply_ms):>10.1f}"
              f"{_p95(r.apply_ms):>7.1f}{ms(r.frame_ms):>17}{ms(r.ui_ms):>17}"
              f"{ms(r.total_ms):>17}{_median(r.ui_ms) / _median(r.poll_ms):>12.2f}")
    for name, r in rows:
        print(f"{name}: first refresh (every row added) apply {r.first_apply_ms:.1f} ms")


def print_cpu(rows: list[tuple[str, CpuShare, CpuShare]], seconds: float) -> None:
    print(f"\n1b. CPU share at a 1 s interval ({seconds:.0f} s each, after {WARM_UP_S:.0f} s "
          "warm-up; user + system of this process, all threads, / wall)")
    header = (f"{'process':<18}{'engine alone':>13}{'refr':>6}{'dashboard app':>15}{'refr':>6}"
              f"{'of it: poll thread':>20}{'apply med ms':>14}{'dashboard/engine':>18}"
              f"{'target <10%':>13}")
    print(header)
    print("-" * len(header))
    for name, eng, app in rows:
        apply_med = _median(app.apply_ms) if app.apply_ms else float("nan")
        ok = "ok" if app.share < CPU_TARGET else "OVER"
        print(f"{name:<18}{eng.share:>12.2%}{eng.refreshes:>7}{app.share:>14.2%}"
              f"{app.refreshes:>7}{app.poll_cpu_s / app.wall_s:>19.2%}{apply_med:>15.1f}"
              f"{app.share / eng.share:>18.2f}{ok:>13}")


def print_memory(points: list[MemoryPoint], growth: list[str], apply_ms: list[float],
                 connections: int, pause_every: int) -> None:
    print(f"\n2. memory over {points[-1].refreshes} simulated 1 s refreshes "
          f"(synthetic source, ~{connections} connections with churn: an hour of real "
          "refreshes would take an hour)")
    print(f"   screen.apply() back to back, a Textual frame every {pause_every}; "
          "tracemalloc on (it slows the run); after gc.collect()")
    header = (f"{'sim min':>8}{'refreshes':>10}{'rows':>7}{'tracks':>8}{'traced MiB':>12}"
              f"{'RSS MiB':>9}{'real s':>8}")
    print(header)
    print("-" * len(header))
    for p in points:
        print(f"{p.minute:>8.0f}{p.refreshes:>10}{p.rows:>7}{p.tracks:>8}{p.traced / MIB:>12.1f}"
              f"{p.rss / MIB:>9.1f}{p.real_s:>8.0f}")
    first, last = points[0], points[-1]
    if first.minute < HISTORY_WINDOW_MIN:
        print(f"(the timeline keeps {DashboardSettings().history} refreshes, "
              f"{HISTORY_WINDOW_MIN:.0f} simulated min: memory grows by design until then)")
    print(f"memory@{last.minute:.0f}min / memory@{first.minute:.0f}min: traced "
          f"{last.traced / first.traced:.3f}, RSS {last.rss / first.rss:.3f} (flat ~ 1.0)")
    print(f"apply under churn, with tracemalloc: median {_median(apply_ms):.1f} ms, "
          f"p95 {_p95(apply_ms):.1f} ms")
    if growth:
        print(f"largest traced growth {first.minute:.0f} -> {last.minute:.0f} min, by file:")
        for line in growth:
            print(f"  {line}")


# -- driver ---------------------------------------------------------------------------


@contextlib.contextmanager
def closing_readers() -> Iterator[list]:
    readers: list = []
    try:
        yield readers
    finally:
        for reader in readers:
            with contextlib.suppress(OSError):
                getattr(reader, "close", lambda: None)()


def measure(args: argparse.Namespace) -> Result:
    print(f"kmon dashboard cost: Python {platform.python_version()}, Textual "
          f"{textual.__version__}, {os.cpu_count()} CPUs, {platform.machine()}")
    print(f"headless: KmonApp(AttachScreen).run_test(size={SIZE}); frames are laid out and "
          "composed,\nnot encoded or written to a terminal: the terminal write is not included")
    sizes = [(f"{SMALL_CONNECTIONS} connections", SMALL_CONNECTIONS),
             (f"{args.connections} connections", args.connections)]
    with Helpers("dashboard_cost", READY_TIMEOUT_S) as helpers, closing_readers() as readers:
        print(f"opening {args.connections} + {SMALL_CONNECTIONS} connections ...",
              file=sys.stderr, flush=True)
        pids = start_clients(helpers, [n for _, n in sizes])
        refreshes, cpu = [], []
        for (name, _), pid in zip(sizes, pids, strict=True):
            print(f"  refresh times: {name}", file=sys.stderr, flush=True)
            profile = args.profile and name == sizes[-1][0]
            refreshes.append((name, asyncio.run(
                time_refreshes(pid, args.refreshes, readers, profile))))
        for (name, _), pid in zip(sizes, pids, strict=True):
            print(f"  CPU share: {name}", file=sys.stderr, flush=True)
            eng = engine_cpu_share(pid, args.cpu_seconds, readers)
            app = asyncio.run(app_cpu_share(pid, args.cpu_seconds, readers))
            cpu.append((name, eng, app))
    print_refreshes(refreshes, args.refreshes)
    print_cpu(cpu, args.cpu_seconds)
    sys.stdout.flush()
    points, growth, apply_ms = asyncio.run(
        memory_over_time(args.connections, args.minutes, args.pause_every))
    print_memory(points, growth, apply_ms, args.connections, args.pause_every)
    big_refresh, (_, _, big_cpu) = refreshes[-1][1], cpu[-1]
    print(f"\nat {args.connections} connections: refresh median "
          f"{_median(big_refresh.total_ms):.0f} ms (engine {_median(big_refresh.poll_ms):.0f}, "
          f"dashboard {_median(big_refresh.ui_ms):.0f}); app CPU at 1 s "
          f"{big_cpu.share:.1%} of one core (target < 10%); memory "
          f"@{points[-1].minute:.0f}/@{points[0].minute:.0f} min "
          f"{points[-1].traced / points[0].traced:.2f}")
    result = Result()
    for name, eng, app in cpu:
        result.figure(f"{name}: app CPU at 1 s", app.share * 100, "% of a core")
        result.figure(f"{name}: engine alone", eng.share * 100, "% of a core")
        result.ratio(f"{name}: app / engine", f"{name}: app CPU at 1 s", f"{name}: engine alone")
    for name, r in refreshes:
        result.figure(f"{name}: refresh median", _median(r.total_ms), "ms")
        result.figure(f"{name}: engine poll median", _median(r.poll_ms), "ms")
        result.ratio(f"{name}: refresh / engine poll", f"{name}: refresh median",
                     f"{name}: engine poll median")
    result.figure("memory, first", points[0].traced / 2**20, "MiB")
    result.figure("memory, last", points[-1].traced / 2**20, "MiB")
    result.ratio("memory last / first", "memory, last", "memory, first")
    return result


ROLES = ("listener", "client")


def helper(args: argparse.Namespace) -> int:
    exit_when_parent_goes()
    try:
        if args.role == "listener":
            role_listener(args.count)
        else:
            role_client(args.port, args.count)
    except (OSError, ValueError) as exc:
        print(f"dashboard_cost {args.role}: {exc}", file=sys.stderr)
        return 1
    return 0


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--connections", type=int, default=2000,
                        help="connections of the big client process (and of the synthetic one)")
    parser.add_argument("--refreshes", type=int, default=60, help="timed refreshes per process")
    parser.add_argument("--cpu-seconds", type=float, default=30.0,
                        help="seconds of each CPU-share measurement")
    parser.add_argument("--minutes", type=int, default=60, help="simulated minutes of memory run")
    parser.add_argument("--pause-every", type=int, default=10,
                        help="let Textual draw a frame after every N synthetic refreshes")
    parser.add_argument("--profile", action="store_true",
                        help="also print cProfile of apply and frame for the big process")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 300 connections, 10 refreshes, 5 s, 6 minutes")
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> Result:
    if args.quick:
        args.connections, args.refreshes, args.cpu_seconds, args.minutes = 300, 10, 5.0, 6
    if args.connections < 1 or args.refreshes < 2 or args.cpu_seconds < 2 or args.minutes < 1:
        raise UsageError("need --connections >= 1, --refreshes >= 2, --cpu-seconds >= 2, "
                             "--minutes >= 1")

    # SIGTERM as Ctrl-C: asyncio turns SIGINT into a clean stop of the Textual app, then the
    # helpers go (SIGINT is restored in case this was started with it ignored, as by `&`)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: os.kill(os.getpid(), signal.SIGINT))
    try:
        return measure(args)
    except (OSError, RuntimeError) as exc:
        raise BenchmarkError(str(exc)) from exc
