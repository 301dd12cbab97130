"""What one poll of a Kafka client's sockets costs: kmon's sock_diag reader vs psutil.

    python -m benchmarks poll_cost [--sockets 20000] [--connections 2000] [--polls 50]

Three processes are polled: a "client process" holding 10 plain TCP connections
(kmon's socket reader alone), a real instrumented Kafka consumer on the
embedded mock cluster (kmon's whole snapshot: sockets, the agent's statistics,
the join), and a "big process" holding --connections connections (the engine's
whole poll as ``kmon attach`` makes it, events and all; the wire source off, as
without root, since benchmarks/wire_cost.py prices it; target <= 15 ms at 2,000),
back to back and then a poll a second, as kmon polls (on a virtual machine a
thread that has just woken may run at half speed: both are shown).
Each is measured next to psutil's ``net_connections()`` on the same process, on
a quiet host, then again while helper processes hold --sockets other TCP sockets
(half connecting, half accepted, over 127.0.0.1). Last, discovery: which local
processes are connected to a "broker" (the client process's listener), kmon's
search (a sock_diag dump filtered by the brokers' ports, the inode -> PID map
kept from search to search) against psutil's scan of the host (target <= 0.1x
at 20,000 host sockets).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import math
import os
import resource
import selectors
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import psutil

from benchmarks.api import BenchmarkError, Result, UsageError
from benchmarks.helpers import Helpers, exit_when_parent_goes, no_time_wait, raise_fd_limit
from kmon.engine.monitor import Monitor
from kmon.engine.sampler import ProcessSampler, SamplerSettings
from kmon.sources.kernel.host_sockets import HostClients, client_pids
from kmon.sources.kernel.sockdiag import SockDiagReader
from kmon.sources.kernel.sockets import Endpoint
from kmon.sources.kernel.sockstat import tcp_sockets

CLIENT_CONNECTIONS = 10
PER_PORT = 10_000  # connections per listening port: well inside the ephemeral port range
FD_SLACK = 100  # fds a helper needs besides its sockets
READY_TIMEOUT_S = 180.0
PACED_POLLS = 15  # engine polls a second apart, as kmon makes them


@dataclasses.dataclass
class Row:
    """One scenario's measurements; times in milliseconds."""

    scenario: str
    host_tcp: int
    kmon_cold_ms: float
    kmon_ms: float
    psutil_ms: float
    kmon_sockets: int
    kmon_idle: bool
    psutil_sockets: int
    psutil_idle: bool
    paced: tuple[float, float] | None = None  # (kmon, psutil) ms, a poll a second

    @property
    def ratio(self) -> float:
        return self.kmon_ms / self.psutil_ms


# -- helper processes ---------------------------------------------------------


def _fd_budget() -> int:
    """How many sockets one helper may hold: its hard RLIMIT_NOFILE, less some slack."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return (1 << 20 if hard == resource.RLIM_INFINITY else hard) - FD_SLACK


def role_client(port: int, count: int) -> None:
    """Hold `count` connections to 127.0.0.1:`port`, as a Kafka client would."""
    conns = [no_time_wait(socket.create_connection(("127.0.0.1", port))) for _ in range(count)]
    for conn in conns:
        conn.sendall(b"hello")
    print("ready", flush=True)
    threading.Event().wait()


def role_listener(count: int) -> None:
    """Accept `count` connections on ceil(count / PER_PORT) ports; print the ports first."""
    raise_fd_limit(count + FD_SLACK)
    selector = selectors.DefaultSelector()
    for _ in range(max(1, math.ceil(count / PER_PORT))):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(4096)
        listener.setblocking(False)
        selector.register(listener, selectors.EVENT_READ)
    ports = [str(key.fileobj.getsockname()[1]) for key in selector.get_map().values()]
    print("ports", ",".join(ports), flush=True)
    accepted: list[socket.socket] = []
    while len(accepted) < count:
        for key, _ in selector.select():
            with contextlib.suppress(BlockingIOError):
                while len(accepted) < count:
                    accepted.append(no_time_wait(key.fileobj.accept()[0]))
    print("ready", len(accepted), flush=True)
    threading.Event().wait()


def role_connector(ports: list[int], count: int) -> None:
    """Open `count` connections spread over `ports` of 127.0.0.1."""
    raise_fd_limit(count + FD_SLACK)
    conns = []
    for i in range(count):
        conn = no_time_wait(socket.socket())
        conn.settimeout(10)
        conn.connect(("127.0.0.1", ports[i % len(ports)]))
        conns.append(conn)
    print("ready", len(conns), flush=True)
    threading.Event().wait()


# -- measuring ----------------------------------------------------------------


def _timed(call: Callable[[], list]) -> tuple[float, list]:
    start = time.perf_counter_ns()
    result = call()
    return (time.perf_counter_ns() - start) / 1e6, result


def _median_ms(call: Callable[[], list], polls: int, pause_s: float = 0.0) -> tuple[float, list]:
    """The median time of ``polls`` calls, back to back or ``pause_s`` apart."""
    gc.collect()
    samples = []
    for _ in range(polls):
        time.sleep(pause_s)
        took, result = _timed(call)
        samples.append(took)
    return statistics.median(samples), result


def measure(scenario: str, pid: int, polls: int) -> Row:
    """Cold and steady-state kmon socket polls, then psutil polls, of process `pid`."""
    with SockDiagReader() as kmon:
        cold_ms, _ = _timed(lambda: kmon.sockets_of(pid))
        kmon_ms, ours = _median_ms(lambda: kmon.sockets_of(pid), polls)
    return _against_psutil(scenario, pid, polls, cold_ms, kmon_ms, ours)


def measure_snapshot(scenario: str, pid: int, polls: int) -> Row:
    """Cold and steady-state whole kmon snapshots (sockets + statistics + join) of `pid`."""
    with SockDiagReader() as reader:
        sampler = ProcessSampler(pid, reader, SamplerSettings(wire="off"))

        def snapshot() -> list:
            return sampler.sample(int(time.time() * 1000)).connections

        cold_ms, _ = _timed(snapshot)
        kmon_ms, rows = _median_ms(snapshot, polls)
    if not any(r.client for r in rows):
        raise RuntimeError("the Kafka client's connections were not joined with its statistics")
    return _against_psutil(scenario, pid, polls, cold_ms, kmon_ms, rows)


def measure_engine(scenario: str, pid: int, polls: int) -> Row:
    """Cold and steady-state polls of kmon's engine (sampler and monitor) on `pid`."""
    with SockDiagReader() as reader:
        sampler = ProcessSampler(pid, reader, SamplerSettings(require_kafka=False, wire="off"))
        monitor = Monitor([sampler])

        def poll() -> list:
            snapshot, _ = monitor.poll()
            return snapshot.processes[0].connections

        cold_ms, _ = _timed(poll)
        kmon_ms, rows = _median_ms(poll, polls)
        kmon_paced_ms, _ = _median_ms(poll, PACED_POLLS, pause_s=1.0)
    row = _against_psutil(scenario, pid, polls, cold_ms, kmon_ms, rows)
    proc = psutil.Process(pid)
    psutil_paced_ms, _ = _median_ms(lambda: proc.net_connections(kind="tcp"), PACED_POLLS,
                                    pause_s=1.0)
    return dataclasses.replace(row, paced=(kmon_paced_ms, psutil_paced_ms))


def _against_psutil(scenario: str, pid: int, polls: int, cold_ms: float, kmon_ms: float,
                    ours: list) -> Row:
    proc = psutil.Process(pid)
    proc.net_connections(kind="tcp")  # warm-up, as for kmon
    psutil_ms, theirs = _median_ms(lambda: proc.net_connections(kind="tcp"), polls)
    return Row(
        scenario=scenario,
        host_tcp=tcp_sockets(),
        kmon_cold_ms=cold_ms,
        kmon_ms=kmon_ms,
        psutil_ms=psutil_ms,
        kmon_sockets=len(ours),
        kmon_idle=bool(ours) and all(s.idle_ms is not None for s in ours),
        psutil_sockets=len(theirs),
        psutil_idle=any("idle" in field for c in theirs for field in c._fields),  # pconn fields
    )


def print_table(rows: list[Row]) -> None:
    """The results table, then which reader returned idle times."""
    header = (
        f"{'scenario':<22}{'host TCP':>9}{'kmon cold ms':>14}{'kmon median ms':>16}"
        f"{'psutil median ms':>18}{'kmon/psutil':>13}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r.scenario:<22}{r.host_tcp:>9}{r.kmon_cold_ms:>14.3f}{r.kmon_ms:>16.3f}"
            f"{r.psutil_ms:>18.3f}{r.ratio:>13.3f}"
        )
    for r in rows:
        print(
            f"{r.scenario}: kmon {r.kmon_sockets} sockets, idle times "
            f"{'yes' if r.kmon_idle else 'no'}; psutil {r.psutil_sockets} sockets, idle times "
            f"{'yes' if r.psutil_idle else 'no'}"
        )


def measure_discovery(scenario: str, broker: Endpoint, client: int, polls: int) -> str:
    """kmon's search for the broker's local clients against psutil's scan; a result line."""
    search = HostClients()
    try:
        cold_ms, _ = _timed(lambda: list(search({broker})))
        ours_ms, ours = _median_ms(lambda: list(search({broker})), polls)
    finally:
        search.close()
    theirs_ms, theirs = _median_ms(lambda: list(client_pids({broker})), max(5, polls // 5))
    if set(ours) != set(theirs) or client not in ours:
        raise RuntimeError(f"discovery disagrees: kmon {ours}, psutil {theirs}")
    return (f"discovery ({scenario}, {tcp_sockets()} host TCP sockets): kmon "
            f"{ours_ms:.2f} ms (first search {cold_ms:.1f} ms), psutil's scan "
            f"{theirs_ms:.1f} ms = {ours_ms / theirs_ms:.3f}x (target <= 0.1)")


@contextlib.contextmanager
def client_process(helpers: Helpers) -> Iterator[tuple[int, Endpoint]]:
    """A subprocess holding CLIENT_CONNECTIONS connections to a listener here: its pid and
    the listener's endpoint."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(CLIENT_CONNECTIONS)
        listener.settimeout(READY_TIMEOUT_S)
        client = helpers.start(
            "--role", "client", "--port", str(listener.getsockname()[1]),
            "--count", str(CLIENT_CONNECTIONS),
        )  # fmt: skip
        peers = [no_time_wait(listener.accept()[0]) for _ in range(CLIENT_CONNECTIONS)]
        try:
            helpers.line(client, "ready")
            yield client.pid, Endpoint("127.0.0.1", listener.getsockname()[1])
        finally:
            for peer in peers:
                peer.close()


def big_process(helpers: Helpers, connections: int) -> int:
    """A helper holding `connections` connections to another; its pid."""
    listener = helpers.start("--role", "listener", "--count", str(connections))
    ports = helpers.line(listener, "ports")[0]
    connector = helpers.start("--role", "connector", "--ports", ports,
                              "--count", str(connections))
    helpers.line(connector, "ready")
    helpers.line(listener, "ready")
    return connector.pid


def load_host(helpers: Helpers, sockets: int) -> None:
    """Have helpers hold `sockets` TCP sockets: sockets/2 connections over loopback.

    Each listener/connector pair holds as many as the fd limit lets one process hold.
    """
    connections, budget = sockets // 2, _fd_budget()
    counts = [min(budget, connections - done) for done in range(0, connections, budget)]
    listeners = [helpers.start("--role", "listener", "--count", str(n)) for n in counts]
    pairs = []
    for listener, count in zip(listeners, counts, strict=True):
        ports = helpers.line(listener, "ports")[0]
        args = ("--role", "connector", "--ports", ports, "--count", str(count))
        pairs.append((listener, helpers.start(*args)))
    for listener, connector in pairs:
        helpers.line(connector, "ready")
        helpers.line(listener, "ready")


@contextlib.contextmanager
def kafka_consumer(spool: str) -> Iterator[int]:
    """An instrumented consumer on the embedded mock cluster, settled; yields its pid."""
    env = {**os.environ, "KMON_SPOOL_DIR": spool}
    os.environ["KMON_SPOOL_DIR"] = spool
    procs = []
    try:
        cluster = subprocess.Popen([sys.executable, "-m", "kmon", "devcluster"], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(cluster)
        bootstrap = cluster.stdout.readline().strip()
        consumer = subprocess.Popen(
            [sys.executable, "-m", "kmon.devtools.workload", "consumer", bootstrap, "--instrument"],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(consumer)
        if consumer.stdout.readline().strip() != "READY":
            raise RuntimeError("the benchmark's Kafka consumer did not start")
        yield consumer.pid
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait()


def measure_all(sockets: int, connections: int, polls: int) -> Result:
    """Measure on the quiet host, load it with `sockets` sockets, measure again."""
    import tempfile

    with (Helpers("poll_cost", READY_TIMEOUT_S) as helpers,
          client_process(helpers) as (pid, broker),
          tempfile.TemporaryDirectory() as spool, kafka_consumer(spool) as consumer):
        big = big_process(helpers, connections)
        rows = [measure("quiet host", pid, polls),
                measure_snapshot("quiet, Kafka snapshot", consumer, polls),
                measure_engine(f"quiet, {connections} conns", big, polls)]
        discovery = [measure_discovery("quiet", broker, pid, polls)]
        print(f"opening {sockets} other TCP sockets ...", file=sys.stderr, flush=True)
        load_host(helpers, sockets)
        rows.append(measure(f"{sockets} other sockets", pid, polls))
        rows.append(measure_snapshot(f"{sockets}, Kafka snapshot", consumer, polls))
        rows.append(measure_engine(f"{sockets}, {connections} conns", big, polls))
        discovery.append(measure_discovery("loaded", broker, pid, polls))
    print_table(rows)
    print("\n".join(discovery))
    print(f"ratio at {sockets} sockets: socket reader {rows[3].ratio:.3f}, "
          f"whole Kafka snapshot {rows[4].ratio:.3f} (target <= 0.5)")
    for row in (rows[2], rows[5]):
        kmon_paced, psutil_paced = row.paced
        print(f"engine poll of a {connections}-connection process ({row.scenario}): "
              f"{row.kmon_ms:.1f} ms (target <= 15) = {row.ratio:.2f}x psutil's "
              f"net_connections of it, which reads no tcp_info; a poll a second, as kmon "
              f"polls: {kmon_paced:.1f} ms = {kmon_paced / psutil_paced:.2f}x psutil's "
              f"{psutil_paced:.1f} ms")
    result = Result()
    for row in rows:
        result.figure(f"{row.scenario}: kmon", row.kmon_ms, "ms")
        result.figure(f"{row.scenario}: psutil", row.psutil_ms, "ms")
        result.ratio(f"{row.scenario}: kmon / psutil", f"{row.scenario}: kmon",
                     f"{row.scenario}: psutil")
        if row.paced:
            result.figure(f"{row.scenario}, a poll a second: kmon", row.paced[0], "ms")
            result.figure(f"{row.scenario}, a poll a second: psutil", row.paced[1], "ms")
            result.ratio(f"{row.scenario}, a poll a second: kmon / psutil",
                         f"{row.scenario}, a poll a second: kmon",
                         f"{row.scenario}, a poll a second: psutil")
    return result


ROLES = ("client", "listener", "connector")


def helper(args: argparse.Namespace) -> int:
    """Play one helper role; its failure shows as one line and a missing "ready"."""
    exit_when_parent_goes()
    try:
        if args.role == "client":
            role_client(args.port, args.count)
        elif args.role == "listener":
            role_listener(args.count)
        else:
            role_connector([int(p) for p in args.ports.split(",")], args.count)
    except (OSError, ValueError) as exc:
        print(f"poll_cost {args.role}: {exc}", file=sys.stderr)
        return 1
    return 0


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sockets", type=int, default=20_000, help="other TCP sockets to open")
    parser.add_argument("--connections", type=int, default=2000,
                        help="connections of the big process")
    parser.add_argument("--polls", type=int, default=50, help="polls per measurement")
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ports", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> Result:
    if args.sockets < 2 or args.polls < 1 or args.connections < 1:
        raise UsageError("--sockets must be at least 2, --polls and --connections at least 1")
    try:
        return measure_all(args.sockets, args.connections, args.polls)
    except (OSError, RuntimeError) as exc:
        raise BenchmarkError(str(exc)) from exc
