"""What a user feels: kmon's CPU share in a real terminal at 2,000 connections.

    python -m benchmarks terminal_cost [--connections 2000] [--seconds 30] [--rounds 3]
                                       [--size 200x60]

A helper process holds --connections connections to another (dashboard_cost.py's
helper roles: a few connections carry traffic, so rates and idle ages move).
Measured over --seconds after a warm-up, as user + system CPU seconds of one
process (all its threads) over wall seconds, at a 1 s interval:

1. ``kmon attach PID`` in a real terminal: a tmux session of --size (200 x 60;
   80 x 24 is the smallest common terminal, where the table scrolls most; tmux
   draws what kmon writes, as a terminal emulator would; its own CPU is shown
   apart);
2. ``kmon attach PID --json > /dev/null``;

each next to its baseline, kmon's engine alone (``Monitor.poll()`` every second,
no output) in this process, measured over the same seconds: this machine's speed
drifts by a third over minutes, so a baseline taken before or after says little
about the run beside it. A round measures both; the medians over --rounds rounds
are the result. Both kmon runs use ``--any-process --wire off`` (the helper is no
Kafka client, and the wire source has its own benchmark). Targets: the dashboard
under 10% of one core and at most 2x the engine alone; ``--json`` under 8%.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import psutil

from benchmarks.api import BenchmarkError, Result, UsageError
from benchmarks.dashboard_cost import (
    READY_TIMEOUT_S,
    closing_readers,
    engine_cpu_share,
    start_clients,
)
from benchmarks.helpers import Helpers

WARM_UP_S = 5.0
TMUX_SOCKET = f"kmon-bench-{os.getpid()}"
DASHBOARD_TARGET, JSON_TARGET, RATIO_TARGET = 0.10, 0.08, 2.0


def beside_engine(procs: Callable[[], list[psutil.Process]], pid: int, seconds: float,
                  readers: list) -> tuple[list[float], float]:
    """The CPU shares of ``procs()`` and of the engine alone, over the same ``seconds``
    after the warm-up: (one share per process, the engine's share)."""
    time.sleep(WARM_UP_S)
    watched = procs()
    start, wall = [sum(p.cpu_times()[:2]) for p in watched], time.perf_counter()
    engine = engine_cpu_share(pid, seconds, readers).share
    took = time.perf_counter() - wall
    return [(sum(p.cpu_times()[:2]) - before) / took
            for p, before in zip(watched, start, strict=True)], engine


def kmon_command(pid: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "kmon", "attach", str(pid), "--any-process", "--wire", "off",
            "--interval", "1s", *extra]


def json_share(pid: int, seconds: float, readers: list) -> tuple[float, float]:
    """(``kmon attach --json`` writing to /dev/null, the engine alone beside it)."""
    with open(os.devnull, "wb") as sink:
        proc = subprocess.Popen(kmon_command(pid, "--json"), stdout=sink)
    try:
        shares, engine = beside_engine(lambda: [psutil.Process(proc.pid)], pid, seconds, readers)
        return shares[0], engine
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", "-L", TMUX_SOCKET, *args], check=True, text=True,
                          capture_output=True).stdout


def dashboard_share(pid: int, seconds: float, readers: list,
                    size: tuple[int, int]) -> tuple[float, float, float]:
    """(kmon's share, tmux's share, the engine alone beside them) for the dashboard in a
    tmux session of ``size`` (columns, lines)."""
    command = shlex.join(kmon_command(pid))
    tmux("new-session", "-d", "-x", str(size[0]), "-y", str(size[1]), "-s", "kmon",
         f"exec {command}")
    try:
        kmon = psutil.Process(int(tmux("list-panes", "-F", "#{pane_pid}").split()[0]))
        server = next(p for p in psutil.process_iter(["cmdline"])
                      if p.info["cmdline"] and "tmux" in p.info["cmdline"][0]
                      and TMUX_SOCKET in p.info["cmdline"] and p.pid != kmon.pid)

        def drawn() -> list[psutil.Process]:
            if str(pid) not in tmux("capture-pane", "-p"):
                raise RuntimeError("the dashboard did not draw in tmux:\n"
                                   + tmux("capture-pane", "-p"))
            return [kmon, server]

        (dashboard, terminal), engine = beside_engine(drawn, pid, seconds, readers)
        return dashboard, terminal, engine
    finally:
        subprocess.run(["tmux", "-L", TMUX_SOCKET, "kill-server"], capture_output=True)


def measure(args: argparse.Namespace) -> Result:
    if shutil.which("tmux") is None:
        raise BenchmarkError("needs tmux (apt-get install tmux)")
    rounds: list[tuple[float, float, float, float, float]] = []
    with Helpers("dashboard_cost", READY_TIMEOUT_S) as helpers, closing_readers() as readers:
        print(f"opening {args.connections} connections ...", file=sys.stderr, flush=True)
        pid = start_clients(helpers, [args.connections])[0]
        for number in range(1, args.rounds + 1):
            print(f"round {number}: dashboard in tmux ...", file=sys.stderr, flush=True)
            dashboard, terminal, engine = dashboard_share(pid, args.seconds, readers, args.size)
            print(f"round {number}: --json ...", file=sys.stderr, flush=True)
            rounds.append((engine, dashboard, terminal, *json_share(pid, args.seconds, readers)))
    print(f"kmon at {args.connections} connections, 1 s interval, a {args.size[0]} x "
          f"{args.size[1]} terminal, {args.seconds:.0f} s each "
          f"after {WARM_UP_S:.0f} s warm-up (user + system CPU / wall, one process), "
          f"{args.rounds} round(s); each kmon run has the engine alone beside it, over the "
          "same seconds")
    print(f"{'round':<7}{'engine':>8}{'dashboard':>11}{'/ engine':>10}{'tmux':>8}"
          f"{'engine':>9}{'--json':>8}{'/ engine':>10}")
    for number, (engine, dashboard, terminal, json_lines, json_engine) in enumerate(rounds, 1):
        print(f"{number:<7}{engine:>8.2%}{dashboard:>11.2%}{dashboard / engine:>10.2f}"
              f"{terminal:>8.2%}{json_engine:>9.2%}{json_lines:>8.2%}"
              f"{json_lines / json_engine:>10.2f}")
    dashboard = statistics.median(r[1] for r in rounds)
    json_lines = statistics.median(r[3] for r in rounds)
    ratio = statistics.median(r[1] / r[0] for r in rounds)
    json_ratio = statistics.median(r[3] / r[4] for r in rounds)
    print(f"medians: dashboard {dashboard:.2%} (target <10%), {ratio:.2f}x the engine "
          f"(target <=2x); --json {json_lines:.2%} (target <8%), {json_ratio:.2f}x the engine")
    met = dashboard < DASHBOARD_TARGET and ratio <= RATIO_TARGET and json_lines < JSON_TARGET
    print(f"targets {'met' if met else 'NOT met'}")
    result = Result()
    result.figure("dashboard, median", dashboard * 100, "% of a core")
    result.figure("engine beside it, median", statistics.median(r[0] for r in rounds) * 100,
                  "% of a core")
    result.figure("--json, median", json_lines * 100, "% of a core")
    result.figure("engine beside --json, median", statistics.median(r[4] for r in rounds) * 100,
                  "% of a core")
    result.ratio("dashboard / engine", "dashboard, median", "engine beside it, median")
    result.ratio("--json / engine", "--json, median", "engine beside --json, median")
    return result


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds of each measurement")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of the two measurements (medians are the result)")
    parser.add_argument("--size", type=terminal_size, default=(200, 60), metavar="COLSxLINES",
                        help="the dashboard's terminal (default 200x60)")


def terminal_size(text: str) -> tuple[int, int]:
    """``COLSxLINES`` (e.g. 80x24) as (columns, lines)."""
    columns, _, lines = text.lower().partition("x")
    if not (columns.isdigit() and lines.isdigit() and int(columns) >= 40 and int(lines) >= 10):
        raise argparse.ArgumentTypeError(f"{text!r} is no COLSxLINES of at least 40x10")
    return int(columns), int(lines)


def run(args: argparse.Namespace) -> Result:
    if args.connections < 1 or args.seconds < 2 or args.rounds < 1:
        raise UsageError("need --connections >= 1, --seconds >= 2 and --rounds >= 1")
    try:
        return measure(args)
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        raise BenchmarkError(str(exc)) from exc
