"""What the host view costs on a busy host: one packet capture for every process, in tmux.

    python -m benchmarks host_view_cost [--processes 50] [--connections 100] [--seconds 30]
                                        [--beside-old-table]

--processes helper processes (each with librdkafka mapped, so the host view takes them
for Kafka clients) hold --connections connections each to a listener helper that answers
like a broker; each process sends --rate Produce requests a second (a real request
header with its client_id, then a body), on its connections in turn, and reads the
answer. ``kmon`` (the host view, ``--wire auto``: as root, the wire of every process)
runs in a 200 x 60 tmux session at the default 1 s; beside it, over the same seconds,
the engine alone (a HostSession polled every second, no screen, the collector set as
the host view sets it) in a helper process, and the engine with a packet tap per process
(as before one capture served the host). Once each engine helper watches every client,
the clients send a request on every connection, so what is measured is the steady state
of a long run: every socket has a wire flow. Both shares are taken over the same seconds,
the helper's measured ones, after its warm-up (the helper's start and the burst of new
flows are in neither). Each share is user + system CPU seconds of that process (all its
threads) over wall seconds. The engine helpers count the "wire missed" notices their
polls made. Targets: the host view under 10% of one core, no packet missed.

With --beside-old-table, a second host view runs in a tmux session of its own, the process
table of commit ``table_cost.OLD_COMMIT`` (DataTable-based) in place of kmon's (read from git
into that process only), and its share is taken over the same seconds: "new / old table".
"""

from __future__ import annotations

import argparse
import os
import selectors
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time

import psutil

from benchmarks.api import BenchmarkError, Result, UsageError
from benchmarks.dashboard_cost import FD_SLACK
from benchmarks.helpers import (
    REPO,
    Helpers,
    cpu_seconds,
    exit_when_parent_goes,
    listening,
    no_time_wait,
    raise_fd_limit,
)

READY_TIMEOUT_S = 240.0
WARM_UP_S = 10.0
SIZE = (200, 60)
TMUX_SOCKET = f"kmon-host-bench-{os.getpid()}"
CPU_TARGET = 0.10
MISSED = "the wire missed"
PRODUCE = 0  # the Produce API key


def produce_request(correlation: int, client_id: str) -> bytes:
    """A Produce request frame (v9 header, client_id) with a small body after its header."""
    header = (PRODUCE.to_bytes(2, "big") + (9).to_bytes(2, "big")
              + correlation.to_bytes(4, "big") + len(client_id).to_bytes(2, "big")
              + client_id.encode())
    body = bytes(200)
    return (len(header) + len(body)).to_bytes(4, "big") + header + body


# -- helper roles -------------------------------------------------------------------------------


def role_listener(count: int) -> None:
    """Accept connections on 127.0.0.1 and answer each request with a short response frame
    carrying its correlation id; print the port first."""
    selector, listener = listening(count + FD_SLACK)
    while True:
        for key, _ in selector.select():
            sock = key.fileobj
            if sock is listener:
                try:
                    while True:
                        conn = no_time_wait(listener.accept()[0])
                        conn.setblocking(False)
                        selector.register(conn, selectors.EVENT_READ)
                except BlockingIOError:
                    pass
                continue
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                selector.unregister(sock)
                sock.close()
                continue
            if len(data) >= 12:
                sock.send((8).to_bytes(4, "big") + data[8:12] + bytes(4))


def role_client(port: int, count: int, rate: float) -> None:
    """Hold ``count`` connections to the listener, with librdkafka mapped (as every
    confluent-kafka program has), and send ``rate`` Produce requests a second on them in
    turn; on SIGUSR1, one on each connection (the steady state of a long run, at once)."""
    import confluent_kafka  # noqa: F401  (mapped: the host view's sign of a Kafka client)

    raise_fd_limit(count + FD_SLACK)
    conns = []
    for _ in range(count):
        conn = no_time_wait(socket.socket())
        conn.settimeout(10)
        conn.connect(("127.0.0.1", port))
        conns.append(conn)
    primed: list[int] = []
    signal.signal(signal.SIGUSR1, lambda *_: primed.append(1))
    print("ready", len(conns), flush=True)
    client_id = f"bench-producer-{os.getpid()}"
    sent = 0
    while True:
        time.sleep(1.0 / rate)
        turn = [conns[sent % len(conns)]]
        if primed:
            primed.clear()
            turn = conns
        for conn in turn:
            sent += 1
            try:
                conn.sendall(produce_request(sent, client_id))
                conn.recv(65536)
            except OSError:
                continue


def role_engine(seconds: float, processes: int, per_process: bool) -> None:
    """The engine alone: a HostSession polled every second, ready once it watches
    ``processes``; prints its poll count and the "wire missed" notices its polls made.
    ``per_process``: each process with a packet tap of its own, as before the host's one."""
    from kmon.engine.facade import HostSession, settle_heap
    from kmon.engine.sampler import SamplerSettings

    session = HostSession(SamplerSettings(require_kafka=False), interval_ms=1000)
    if per_process:
        session.discovery.wire = None  # the samplers open their own taps
    while len(session.poll()[0].processes) < processes:
        time.sleep(1.0)
    settle_heap()  # the collector as the host view sets it
    print("watching", flush=True)
    for _ in range(int(WARM_UP_S)):
        session.poll()
        time.sleep(1.0)
    print("ready", flush=True)
    ends, polls, missed = time.monotonic() + seconds, 0, 0
    while time.monotonic() < ends:
        began = time.monotonic()
        snapshot, _ = session.poll()
        polls += 1
        missed += sum(any(MISSED in n for n in view.notices) for view in snapshot.processes)
        time.sleep(max(0.0, began + 1.0 - time.monotonic()))
    print("polls", polls, missed, flush=True)
    session.close()


# -- the run --------------------------------------------------------------------------------------


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", "-L", TMUX_SOCKET, *args], check=True, text=True,
                          capture_output=True).stdout


def engine_share(helpers: Helpers, clients: list[subprocess.Popen[str]], seconds: float,
                 per_process: bool, views: list[int]) -> tuple[float, list[float], int]:
    """(the engine helper's CPU share, each host view's (pids ``views``) over the same seconds,
    rows with a "wire missed" notice); once the helper watches every client, each sends a
    request on every connection (SIGUSR1), and both shares are taken from the helper's
    "ready" on, so both measure the steady state of a long run: every socket with a wire
    flow (not the helper's start, nor the burst of new flows)."""
    engine = helpers.start("--role", "engine", "--seconds", str(seconds), "--count",
                           str(len(clients)), *(["--per-process"] if per_process else []))
    helpers.line(engine, "watching")
    for client in clients:
        os.kill(client.pid, signal.SIGUSR1)
    helpers.line(engine, "ready")
    before, views_before = cpu_seconds(engine.pid), [cpu_seconds(view) for view in views]
    began = time.perf_counter()
    _, missed = helpers.line(engine, "polls")
    wall = time.perf_counter() - began
    return ((cpu_seconds(engine.pid) - before) / wall,
            [(cpu_seconds(view) - b) / wall for view, b in zip(views, views_before, strict=True)],
            int(missed))


def start_load(helpers: Helpers, processes: int, connections: int,
               rate: float) -> list[subprocess.Popen[str]]:
    """The listener, and ``processes`` clients of ``connections`` connections each sending
    ``rate`` requests a second, ready (``helpers`` run this benchmark)."""
    print(f"opening {processes} x {connections} connections ...", file=sys.stderr, flush=True)
    listener = helpers.start("--role", "listener", "--count", str(processes * connections))
    port = helpers.line(listener, "port")[0]
    clients = [helpers.start("--role", "client", "--port", port, "--count", str(connections),
                             "--rate", str(rate)) for _ in range(processes)]
    for client in clients:
        helpers.line(client, "ready")
    return clients


def host_view(session: str, role: str = "") -> psutil.Process:
    """A host view (``kmon``, at 1 s) in tmux session ``session``, SIZE large: kmon itself, or
    this benchmark in helper ``role`` (the old table's view)."""
    argv = ["-m", "benchmarks", "host_view_cost", "--role", role] if role else ["-m", "kmon"]
    tmux("new-session", "-d", "-x", str(SIZE[0]), "-y", str(SIZE[1]), "-s", session,
         "-c", str(REPO), f"exec {shlex.join([sys.executable, *argv])}")
    return psutil.Process(int(tmux("list-panes", "-t", session, "-F", "#{pane_pid}").split()[0]))


def showing(session: str, clients: list[subprocess.Popen[str]]) -> None:
    """Wait until the host view in ``session`` shows the last client."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while str(clients[-1].pid) not in tmux("capture-pane", "-p", "-t", session):
        if time.monotonic() > deadline:
            raise RuntimeError("the host view never showed every client:\n"
                               + tmux("capture-pane", "-p", "-t", session))
        time.sleep(1.0)


def measure(args: argparse.Namespace) -> Result:
    if shutil.which("tmux") is None:
        raise BenchmarkError("needs tmux (apt-get install tmux)")
    if os.geteuid() != 0:
        raise BenchmarkError("the wire needs CAP_NET_RAW: run as root")
    with Helpers("host_view_cost", READY_TIMEOUT_S) as helpers:
        clients = start_load(helpers, args.processes, args.connections, args.rate)
        try:
            views = [host_view("kmon")]
            if args.beside_old_table:
                views.append(host_view("kmon-old", "old_table_view"))
            for session in ("kmon", "kmon-old")[:len(views)]:
                showing(session, clients)
            pids = [view.pid for view in views]
            print("host view and engine alone ...", file=sys.stderr, flush=True)
            engine, shares, missed = engine_share(helpers, clients, args.seconds, False, pids)
            screen = tmux("capture-pane", "-p", "-t", "kmon")
            print("host view and engine with a tap per process ...", file=sys.stderr,
                  flush=True)
            taps, beside_taps, taps_missed = engine_share(helpers, clients, args.seconds, True,
                                                          pids)
        finally:
            subprocess.run(["tmux", "-L", TMUX_SOCKET, "kill-server"], capture_output=True)
    view, view_beside_taps = shares[0], beside_taps[0]
    print(f"host view of {args.processes} processes x {args.connections} connections, "
          f"{args.rate:g} Produce requests/s each, 1 s interval, --wire auto, tmux "
          f"{SIZE[0]}x{SIZE[1]}, {args.seconds:.0f} s each (user + system CPU / wall)")
    print(f"  host view (one capture)        {view:7.2%}   engine alone beside it "
          f"{engine:7.2%}   ratio {view / engine:.2f}x")
    print(f"  host view, beside the taps run {view_beside_taps:7.2%}   engine, a tap per "
          f"process {taps:7.2%}   one capture / taps {engine / taps:.2f}x")
    if args.beside_old_table:
        print(f"  host view with the old table   {shares[1]:7.2%}   beside the taps run "
              f"{beside_taps[1]:7.2%}   new / old table {view / shares[1]:.2f}x, "
              f"{view_beside_taps / beside_taps[1]:.2f}x")
    print(f"  rows with '{MISSED}': one capture {missed} of {args.processes} x polls, "
          f"a tap per process {taps_missed}; on the host view's screen: "
          f"{'yes' if MISSED in screen else 'no'}")
    met = view < CPU_TARGET and not missed and MISSED not in screen
    print(f"target (<{CPU_TARGET:.0%} of a core, no packet missed) {'met' if met else 'NOT met'}")
    result = Result()
    result.figure("host view", view * 100, "% of a core")
    result.figure("engine alone beside it", engine * 100, "% of a core")
    result.figure("engine, a tap per process", taps * 100, "% of a core")
    result.figure("rows with a missed packet", missed)
    result.ratio("host view / engine alone", "host view", "engine alone beside it")
    result.ratio("one capture / a tap per process", "engine alone beside it",
                 "engine, a tap per process")
    if args.beside_old_table:
        result.figure("host view, old table", shares[1] * 100, "% of a core")
        result.figure("host view beside the taps", view_beside_taps * 100, "% of a core")
        result.figure("host view beside the taps, old table", beside_taps[1] * 100,
                      "% of a core")
        result.ratio("host view: new / old table", "host view", "host view, old table")
        result.ratio("host view beside the taps: new / old table", "host view beside the taps",
                     "host view beside the taps, old table")
    return result


def load_arguments(parser: argparse.ArgumentParser) -> None:
    """The load's options: --processes, --connections, --rate (``start_load``'s)."""
    parser.add_argument("--processes", type=int, default=50)
    parser.add_argument("--connections", type=int, default=100, help="per process")
    parser.add_argument("--rate", type=float, default=2.0, help="Produce requests/s a process")


def options(parser: argparse.ArgumentParser) -> None:
    load_arguments(parser)
    parser.add_argument("--seconds", type=float, default=30.0, help="of each measurement")
    parser.add_argument("--beside-old-table", action="store_true",
                        help="a second host view beside, with the old (DataTable) process table")
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--per-process", action="store_true", help=argparse.SUPPRESS)


ROLES = ("listener", "client", "engine", "old_table_view")


def helper(args: argparse.Namespace) -> int:
    if args.role == "old_table_view":  # in tmux: ends with its session
        from benchmarks.table_cost import old_process_table
        from kmon import cli
        from kmon.widgets import process_table

        process_table.ProcessTable = old_process_table()  # for the screens yet to be imported
        return cli.main([])
    exit_when_parent_goes()
    if args.role == "listener":
        role_listener(args.count)
    elif args.role == "client":
        role_client(args.port, args.count, args.rate)
    else:
        role_engine(args.seconds, args.count, args.per_process)
    return 0


def run(args: argparse.Namespace) -> Result:
    if args.processes < 1 or args.connections < 1 or args.seconds < 5 or args.rate <= 0:
        raise UsageError("need --processes >= 1, --connections >= 1, --seconds >= 5, "
                             "--rate > 0")
    try:
        return measure(args)
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        raise BenchmarkError(str(exc)) from exc
