"""What a refresh of the process and connection tables costs, the keyed table next to the old ones.

    python -m benchmarks table_cost [--processes 50] [--connections 100] [--refreshes 60]

The old tables (the DataTable-based ProcessTable and the line-drawn ConnectionTable of commit
OLD_COMMIT) are read from git into this process only, beside kmon's KeyedTable tables. Each
table is shown in an app of the host view's size (200 x 60, headless: a frame is laid out
and composed, not written), focused, and fed the same refreshes: --processes process rows
under a cluster heading (as the host view's), every process's idle age moving each refresh
and one in ten changing its churn, or one process's --connections connection rows, every
idle bar moving. Per refresh: the CPU of ``show()`` and of the frame after it (this thread).
Old and new take turns, --rounds times (each first in every other round), so that a noisy
machine slows both alike; the ratios new / old are of medians measured in this one run. At
the host view's 1 s interval, a refresh of N ms is N/10 % of a core.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

from rich.text import Text
from textual.app import App

from benchmarks.api import BenchmarkError, Result, UsageError
from kmon.model import Role
from kmon.present import format as fmt
from kmon.tcp_state import TcpState
from kmon.widgets.connection_table import ConnectionTable
from kmon.widgets.process_table import COLUMNS, ProcessTable

OLD_COMMIT = "2458013"  # the last commit with the DataTable-based process table
SIZE = (200, 60)  # as host_view_cost's tmux
WARM_UP = 5
ROOT = Path(__file__).resolve().parent.parent


def old_module(name: str) -> ModuleType:
    """``widgets/NAME.py`` as it was at OLD_COMMIT, loaded as a module of its own."""
    try:
        source = subprocess.run(["git", "-C", str(ROOT), "show", f"{OLD_COMMIT}:widgets/{name}.py"],
                                check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BenchmarkError(f"needs the git history (commit {OLD_COMMIT}): {exc}") from exc
    spec = importlib.util.spec_from_loader(f"kmon_old_{name}", loader=None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    exec(compile(source, f"{OLD_COMMIT}:widgets/{name}.py", "exec"), module.__dict__)
    return module


def old_process_table() -> type:
    """The old ProcessTable, its ``show()`` under the new one's name, ``show_groups()``."""
    old = old_module("process_table").ProcessTable
    return type("ProcessTable", (old,), {"show_groups": old.show})


def process_groups(processes: int, tick: int) -> list[tuple[str, str, list[tuple]]]:
    """The host view's rows at refresh ``tick``: one cluster, ``processes`` processes (cells as
    ``process_cells`` makes them), each one's idle age moving, one in ten's churn changing."""
    rows = []
    for n in range(processes):
        pid = 10_000 + n
        churn = tick // 10 if n % 10 == tick % 10 else 0
        rows.append((Text(str(pid)), Text(f"producer-{n}.py"),
                     Text(fmt.duration(((tick + n) % 30) * 1000 + 200)), Text(), Text("1"),
                     Text("99"), Text(), Text(), Text(f"bench-producer-{pid}"),
                     Text(f"{churn}/{churn}") if churn else Text(), Text(), Text()))
    assert len(rows[0]) == len(COLUMNS)
    return [("bench", "1 broker: 127.0.0.1:9092", rows)]


def connection_rows(connections: int, tick: int) -> list[tuple[str, tuple]]:
    """One process's connections at refresh ``tick`` (cells as ``connection_cells`` makes
    them), every idle bar moving."""
    rows = []
    for n in range(connections):
        idle = ((tick + n) % 600) * 1000
        rows.append((f"conn{n}", (
            fmt.role(Role.BROKER.value), fmt.node_and_broker(n % 3, n % 3, False),
            f"127.0.0.1:{9092 + n % 3}", fmt.state(TcpState.ESTABLISHED),
            fmt.idle_bar(idle, 540_000, 0.8), fmt.duration(540_000 - idle),
            f"bench-producer-{n % 4}", fmt.rate(200.0 * (n % 5)), fmt.rate(100.0 * (n % 7)),
            fmt.round_trip(1.5 + n % 4, None, False), fmt.styled("broker conf 0.95", "dim"))))
    return rows


class Tables(App):
    """One table, focused, as on a screen."""

    def __init__(self, table) -> None:
        super().__init__()
        self.table = table

    def compose(self):
        yield self.table

    def on_mount(self) -> None:
        self.table.focus()


def feeder(kind: str, table, size: int):
    """``show(tick)`` for ``table``: the process rows or the connection rows at ``tick``."""
    if kind == "process":
        return lambda tick: table.show_groups(process_groups(size, tick))
    return lambda tick: table.show(connection_rows(size, tick), lambda cells: cells)


async def refresh_ms(table, kind: str, size: int, refreshes: int, first_tick: int) -> list[float]:
    """CPU (this thread) of each refresh: ``show()`` and the frame after it."""
    spent = []
    async with Tables(table).run_test(size=SIZE) as pilot:
        show = feeder(kind, table, size)
        for i in range(WARM_UP + refreshes):
            began = time.thread_time()
            show(first_tick + i)
            await pilot.pause()
            if i >= WARM_UP:
                spent.append((time.thread_time() - began) * 1000)
    return spent


def measure(args: argparse.Namespace) -> Result:
    old = {"process": old_process_table(),
           "connection": old_module("connection_table").ConnectionTable}
    new = {"process": ProcessTable, "connection": ConnectionTable}
    sizes = {"process": args.processes, "connection": args.connections}
    times: dict[tuple[str, str], list[float]] = {}
    for round_ in range(args.rounds):
        for kind in ("process", "connection"):
            turns = (("old", old), ("new", new))
            for which, classes in turns if round_ % 2 == 0 else turns[::-1]:
                table = classes[kind](grouped=True) if kind == "process" else classes[kind]()
                spent = asyncio.run(refresh_ms(table, kind, sizes[kind], args.refreshes,
                                               round_ * args.refreshes))
                times.setdefault((kind, which), []).extend(spent)
    result = Result()
    print(f"a refresh (show() and its frame, CPU ms), {SIZE[0]}x{SIZE[1]}, focused; "
          f"{args.rounds} rounds of {args.refreshes}, old and new in turn")
    for kind, rows in (("process", f"{args.processes} processes"),
                       ("connection", f"{args.connections} connections")):
        for which in ("old", "new"):
            spent = times[(kind, which)]
            median = result.figure(f"{kind} table, {which}: refresh median",
                                   statistics.median(spent), "ms")
            p95 = statistics.quantiles(spent, n=20)[18]
            result.figure(f"{kind} table, {which}: refresh p95", p95, "ms")
            print(f"  {kind} table ({rows}), {which}: median {median:6.2f} ms, "
                  f"p95 {p95:6.2f} ms (at 1 s: {median / 10:.2f}% of a core)")
        ratio = result.ratio(f"{kind} table: new / old", f"{kind} table, new: refresh median",
                             f"{kind} table, old: refresh median")
        print(f"  {kind} table new / old: {ratio:.2f}x")
    return result


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--processes", type=int, default=50, help="process rows")
    parser.add_argument("--connections", type=int, default=100, help="connection rows")
    parser.add_argument("--refreshes", type=int, default=60, help="timed refreshes per turn")
    parser.add_argument("--rounds", type=int, default=3, help="turns of old and new each")


def run(args: argparse.Namespace) -> Result:
    if args.processes < 1 or args.connections < 1 or args.refreshes < 2 or args.rounds < 1:
        raise UsageError("need --processes, --connections, --rounds >= 1, --refreshes >= 2")
    return measure(args)
