"""What the host view, the engine and ``kmon serve`` cost on a busy host, against a baseline.

    python -m benchmarks host_view_cost [--load talking|silent|many] [--seconds 30]
                                        [--baseline DIR] [--processes N] [--connections N]

The loads (benchmarks/host_loads.py): ``talking``, 50 processes x 100 connections, each
process sending 2 Produce requests a second on its connections in turn; ``silent``, 50
processes each running a real librdkafka producer (2 messages a second, the embedded mock
cluster) beside 100 more connections to the brokers that never carry a request; ``many``,
``talking`` at 500 processes x 10 connections. Every process has librdkafka mapped.

Three measurements, one after the other, each of kmon and, with ``--baseline DIR`` (a
kmon source tree: ``mkdir DIR && git archive COMMIT kmon widgets | tar -x -C DIR``), of
the baseline beside it over the same seconds (the machine is shared and noisy: only ratios
within one run count):

1. the host view (``kmon``, ``--wire auto``: as root, the wire of every process) in a
   200 x 60 tmux session at the default 1 s;
2. the engine alone: a HostSession polled every second, no screen, the collector set as
   the host view sets it, in a helper process; its poll times' p50 and p95, and the rows
   with a "wire missed" notice;
3. ``kmon serve`` at its default 5 s.

Each starts once the process watches every client; then (``talking``, ``many``) every
client sends a request on every connection, so that every socket has a wire flow (the
steady state of a long run), and the share is taken after a warm-up. A share is user +
system CPU seconds of that process (all its threads) over wall seconds. Targets: the host
view under 5% of a core at 50 x 100 and under 10% at 500 x 10, serve under 1%, no packet
missed.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from benchmarks import host_loads
from benchmarks.api import BenchmarkError, Result, UsageError
from benchmarks.helpers import REPO, Helpers, cpu_seconds, exit_when_parent_goes
from benchmarks.host_loads import LOADS

READY_TIMEOUT_S = 300.0
WARM_UP_S = 10.0
SIZE = (200, 60)
TMUX_SOCKET = f"kmon-host-bench-{os.getpid()}"
VIEW_TARGET = {"many": 0.10}  # else 5%
SERVE_TARGET = 0.01
MISSED = "the wire missed"
WATCHING = re.compile(r"(\d+) Kafka client process")


# -- the engine helper -----------------------------------------------------------------------


def role_engine(seconds: float, processes: int) -> None:
    """The engine alone: a HostSession polled every second, "watching" once it watches
    ``processes``, "ready" after a warm-up; then prints its polls, the "wire missed"
    notices they made, and its poll times' p50 and p95 (ms)."""
    from kmon.engine.facade import (
        EngineSettings,
        HostTarget,
        SamplerSettings,
        open_session,
        settle_heap,
    )

    session = open_session(HostTarget(), EngineSettings(SamplerSettings(require_kafka=False)))
    while len(session.poll()[0].processes) < processes:
        time.sleep(1.0)
    settle_heap()  # the collector as the host view sets it
    print("watching", flush=True)
    for _ in range(int(WARM_UP_S)):
        session.poll()
        time.sleep(1.0)
    print("ready", flush=True)
    ends, missed, times = time.monotonic() + seconds, 0, []
    while time.monotonic() < ends:
        began = time.monotonic()
        snapshot, _ = session.poll()
        times.append((time.monotonic() - began) * 1000)
        missed += sum(any(MISSED in n for n in view.notices) for view in snapshot.processes)
        time.sleep(max(0.0, began + 1.0 - time.monotonic()))
    p50, p95 = percentiles(times)
    print("polls", len(times), missed, f"{p50:.1f}", f"{p95:.1f}", flush=True)
    time.sleep(READY_TIMEOUT_S)  # until the benchmark, its CPU time read, closes stdin


def percentiles(times: list[float]) -> tuple[float, float]:
    """(p50, p95) of ``times``."""
    if len(times) < 2:
        return (times[0], times[0]) if times else (0.0, 0.0)
    return statistics.median(times), statistics.quantiles(times, n=20)[18]


# -- the kmon trees ----------------------------------------------------------------------------


class Tree:
    """One kmon to measure: this checkout, or a baseline source tree (its ``kmon`` first
    on the path: PYTHONSAFEPATH keeps the working directory's off it)."""

    def __init__(self, name: str, root: Path | None) -> None:
        self.name = name
        self.env = None if root is None else {
            **os.environ, "PYTHONSAFEPATH": "1", "PYTHONPATH": f"{root}{os.pathsep}{REPO}"}

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "kmon", *args]


def baseline_tree(path: Path) -> Path:
    """``path`` checked as a kmon source tree, its widgets linked in as kmon.widgets."""
    if not (path / "kmon" / "__init__.py").is_file() or not (path / "widgets").is_dir():
        raise UsageError(f"--baseline {path}: not a kmon source tree (kmon/ and widgets/)")
    link = path / "kmon" / "widgets"
    if not link.exists():
        link.symlink_to(Path("..") / "widgets")
    return path.resolve()


# -- the three measurements ----------------------------------------------------------------------


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", "-L", TMUX_SOCKET, *args], check=True, text=True,
                          capture_output=True).stdout


def wait_for(what: str, ready) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} never watched every client")
        time.sleep(1.0)


def shares(pids: list[int], seconds: float) -> list[float]:
    """Each process's CPU share over the same ``seconds``."""
    before, began = [cpu_seconds(pid) for pid in pids], time.perf_counter()
    time.sleep(seconds)
    wall = time.perf_counter() - began
    return [(cpu_seconds(pid) - b) / wall for pid, b in zip(pids, before, strict=True)]


def host_views(trees: list[Tree], prime, processes: int,
               seconds: float) -> tuple[list[float], list[bool]]:
    """Each tree's host view in tmux: (CPU shares, "wire missed" on its screen)."""
    pids = []
    try:
        for tree in trees:
            env = "" if tree.env is None else "env PYTHONSAFEPATH=1 " + shlex.quote(
                f"PYTHONPATH={tree.env['PYTHONPATH']}") + " "
            tmux("new-session", "-d", "-x", str(SIZE[0]), "-y", str(SIZE[1]), "-s", tree.name,
                 "-c", str(REPO), f"exec {env}{shlex.join(tree.command())}")
            pids.append(int(tmux("list-panes", "-t", tree.name, "-F", "#{pane_pid}").split()[0]))
        for tree in trees:
            wait_for(f"the host view ({tree.name})", lambda t=tree: (
                (found := WATCHING.search(tmux("capture-pane", "-p", "-t", t.name)))
                is not None and int(found[1]) >= processes))
        prime()
        time.sleep(WARM_UP_S)
        got = shares(pids, seconds)
        return got, [MISSED in tmux("capture-pane", "-p", "-t", t.name) for t in trees]
    finally:
        subprocess.run(["tmux", "-L", TMUX_SOCKET, "kill-server"], capture_output=True)


def engines(helpers: Helpers, trees: list[Tree], prime, processes: int,
            seconds: float) -> list[tuple[float, int, float, float]]:
    """Each tree's engine helper: (CPU share, rows missing a packet, poll p50, p95 ms)."""
    procs = [helpers.start("--role", "engine", "--seconds", str(seconds), "--count",
                           str(processes), env=tree.env) for tree in trees]
    for proc in procs:
        helpers.line(proc, "watching")
    prime()
    for proc in procs:
        helpers.line(proc, "ready")
    before, began = [cpu_seconds(p.pid) for p in procs], time.perf_counter()
    ends = [helpers.line(proc, "polls") for proc in procs]
    wall = time.perf_counter() - began
    spent = [cpu_seconds(p.pid) for p in procs]
    for proc in procs:
        proc.stdin.close()  # type: ignore[union-attr]
        proc.wait()
    return [((after - b) / wall, int(end[1]), float(end[2]), float(end[3]))
            for after, b, end in zip(spent, before, ends, strict=True)]


def serves(trees: list[Tree], prime, processes: int, seconds: float) -> list[float]:
    """Each tree's ``kmon serve`` (5 s): CPU shares over the same seconds."""
    from benchmarks.serve_cost import scrape, watched

    procs, addresses = [], []
    try:
        for tree in trees:
            proc = subprocess.Popen(tree.command("serve", "--listen", "127.0.0.1:0"), cwd=REPO,
                                    env=tree.env, stderr=subprocess.PIPE, text=True)
            procs.append(proc)
            line = proc.stderr.readline()  # type: ignore[union-attr]
            if "/metrics" not in line:
                raise RuntimeError(f"kmon serve ({tree.name}) did not start: {line}")
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # type: ignore
            addresses.append(line.split("http://", 1)[1].split("/metrics", 1)[0])
        for tree, address in zip(trees, addresses, strict=True):
            wait_for(f"kmon serve ({tree.name})",
                     lambda a=address: watched(scrape(a)[1]) >= processes)
        prime()
        time.sleep(WARM_UP_S)
        return shares([p.pid for p in procs], seconds)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait()


# -- the run -------------------------------------------------------------------------------------


def start_load(helpers: Helpers, load: str, processes: int, connections: int,
               rate: float) -> tuple[subprocess.Popen[str], list[int]]:
    """The load's broker side and its fleet of clients, ready: the fleet's helper (SIGUSR1:
    a request on every connection) and the clients' PIDs."""
    print(f"{load}: opening {processes} x {connections} connections ...", file=sys.stderr,
          flush=True)
    if load == "silent":
        server = helpers.start("--role", "mock", "--count", str(processes * (connections + 8)))
        target = helpers.line(server, "bootstrap")[0]
    else:
        server = helpers.start("--role", "listener", "--count", str(processes * connections))
        target = helpers.line(server, "port")[0]
    fleet = helpers.start("--role", "fleet", "--load", load, "--target", target,
                          "--processes", str(processes), "--connections", str(connections),
                          "--rate", str(rate))
    return fleet, [int(pid) for pid in helpers.line(fleet, "ready")]


def measure(args: argparse.Namespace) -> Result:
    if shutil.which("tmux") is None:
        raise BenchmarkError("needs tmux (apt-get install tmux)")
    if os.geteuid() != 0:
        raise BenchmarkError("the wire needs CAP_NET_RAW: run as root")
    processes, connections = args.processes, args.connections
    trees = [Tree("kmon", None)]
    if args.baseline is not None:
        trees.append(Tree("baseline", baseline_tree(args.baseline)))
    with Helpers("host_view_cost", READY_TIMEOUT_S) as helpers:
        fleet, _ = start_load(helpers, args.load, processes, connections, args.rate)

        def prime() -> None:  # a request on every connection (talking, many)
            os.kill(fleet.pid, signal.SIGUSR1)

        print("the host views ...", file=sys.stderr, flush=True)
        views, screens = host_views(trees, prime, processes, args.seconds)
        print("the engines ...", file=sys.stderr, flush=True)
        engine = engines(helpers, trees, prime, processes, args.seconds)
        print("kmon serve ...", file=sys.stderr, flush=True)
        serve = serves(trees, prime, processes, args.seconds)
    return report(args, trees, views, screens, engine, serve)


def report(args: argparse.Namespace, trees: list[Tree], views: list[float],
           screens: list[bool], engine: list[tuple[float, int, float, float]],
           serve: list[float]) -> Result:
    print(f"{args.load}: {args.processes} processes x {args.connections} connections, "
          f"{args.rate:g}/s each, host view and engine at 1 s, serve at 5 s, --wire auto, "
          f"{args.seconds:.0f} s each (user + system CPU / wall)")
    print(f"  {'':10} {'host view':>10} {'engine':>10} {'serve':>10} {'poll p50':>10} "
          f"{'poll p95':>10}  missed (engine rows, screen)")
    result = Result()
    for i, tree in enumerate(trees):
        share, missed, p50, p95 = engine[i]
        print(f"  {tree.name:10} {views[i]:10.2%} {share:10.2%} {serve[i]:10.2%} "
              f"{p50:8.1f}ms {p95:8.1f}ms  {missed}, {'yes' if screens[i] else 'no'}")
        suffix = "" if i == 0 else ", baseline"
        result.figure(f"host view{suffix}", views[i] * 100, "% of a core")
        result.figure(f"engine{suffix}", share * 100, "% of a core")
        result.figure(f"serve{suffix}", serve[i] * 100, "% of a core")
        result.figure(f"engine poll p50{suffix}", p50, "ms")
        result.figure(f"engine poll p95{suffix}", p95, "ms")
        result.figure(f"rows with a missed packet{suffix}", missed)
    if len(trees) > 1:
        for what in ("host view", "engine", "serve", "engine poll p95"):
            result.ratio(f"{what} / baseline", what, f"{what}, baseline")
    else:
        result.ratio("host view / engine", "host view", "engine")
    target = VIEW_TARGET.get(args.load, 0.05)
    met = (views[0] < target and serve[0] < SERVE_TARGET and not engine[0][1]
           and not screens[0])
    print(f"target (host view <{target:.0%}, serve <{SERVE_TARGET:.0%}, no packet missed) "
          f"{'met' if met else 'NOT met'}")
    return result


def load_arguments(parser: argparse.ArgumentParser) -> None:
    """The load's options (``start_load``'s): --load, --processes, --connections, --rate."""
    parser.add_argument("--load", choices=tuple(LOADS), default="talking")
    parser.add_argument("--processes", type=int, help="default: the load's")
    parser.add_argument("--connections", type=int, help="per process; default: the load's")
    parser.add_argument("--rate", type=float, default=2.0,
                        help="requests (or messages) a second, each process")


def load_shape(args: argparse.Namespace) -> None:
    """Fill in the load's own --processes and --connections where not given."""
    default_processes, default_connections = LOADS[args.load]
    args.processes = args.processes or default_processes
    args.connections = args.connections or default_connections


def options(parser: argparse.ArgumentParser) -> None:
    load_arguments(parser)
    parser.add_argument("--seconds", type=float, default=30.0, help="of each measurement")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="a kmon source tree measured beside this one")
    parser.add_argument("--target", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)


ROLES = ("listener", "mock", "fleet", "engine")


def helper(args: argparse.Namespace) -> int:
    exit_when_parent_goes()
    if args.role == "listener":
        host_loads.role_listener(args.count)
    elif args.role == "mock":
        host_loads.role_mock(args.count)
    elif args.role == "fleet":
        host_loads.role_fleet(args.load, args.target, args.processes, args.connections,
                              args.rate)
    else:
        role_engine(args.seconds, args.count)
    return 0


def run(args: argparse.Namespace) -> Result:
    load_shape(args)
    if args.processes < 1 or args.connections < 1 or args.seconds < 5 or args.rate <= 0:
        raise UsageError("need --processes >= 1, --connections >= 1, --seconds >= 5, "
                         "--rate > 0")
    try:
        return measure(args)
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        raise BenchmarkError(str(exc)) from exc
