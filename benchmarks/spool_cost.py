"""What reading every instrumented process's statistics costs a poll, as the spool grows.

    python -m benchmarks spool_cost [--processes 500] [--polls 5] [--baseline DIR]

A spool of ``--processes`` processes' records (one client instance each, as the agent
writes them). A poll reads every process's records with ``spool.read_records``, as the
sampler does, twice: with the directory unchanged, and with an agent's write (a file
renamed in) before each process's read, as a busy host's agents write while a poll runs.
The baseline, in the same run: one listing of the directory and one read of each record
(the floor for any reader), and with ``--baseline DIR`` (a kmon source tree:
``mkdir DIR && git archive COMMIT kmon | tar -x -C DIR``) that tree's ``read_records``.
CPU seconds of this process per poll.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.api import Result, UsageError
from benchmarks.helpers import REPO, command

FIRST_PID = 100_000
CASES = {"unchanged": False, "a write before each read": True}
ROLES = ("reader",)


def spool_of(root: Path, processes: int) -> Path:
    directory = root / "spool"
    directory.mkdir(mode=0o700)
    record = json.dumps({"format": 1, "stats": {"name": "rdkafka#producer-1"}})
    for pid in range(FIRST_PID, FIRST_PID + processes):
        (directory / f"{pid}-rdkafka#producer-1.json").write_text(record)
    past = time.time() - 5  # settled: listed once, kept
    os.utime(directory, (past, past))
    return directory


def poll(read, directory: Path, processes: int, busy: bool) -> float:
    """CPU seconds to read every process's records; ``busy``: a write before each read."""
    began = time.process_time()
    for pid in range(FIRST_PID, FIRST_PID + processes):
        if busy:
            written = directory / "agent-write"
            written.write_text("{}")
            written.rename(directory / "0-rdkafka#producer-1.json")
        read(directory, pid)
    return time.process_time() - began


def floor(directory: Path, processes: int) -> float:
    """One listing, then one plain read of each process's record."""
    began = time.process_time()
    names = os.listdir(directory)
    for name in names:
        if not name.startswith("0-") and name.endswith(".json"):
            (directory / name).read_bytes()
    return time.process_time() - began


def read_times(processes: int, polls: int) -> dict[str, float]:
    """This interpreter's ``read_records``: CPU ms a poll, by case (best of ``polls``)."""
    from kmon.sources.clients import spool

    uid = os.getuid()
    times = {}
    with tempfile.TemporaryDirectory() as root:
        directory = spool_of(Path(root), processes)
        times["floor"] = min(floor(directory, processes) for _ in range(polls)) * 1000
        for case, busy in CASES.items():
            times[case] = min(poll(lambda d, pid: spool.read_records(d, pid, uid),
                                   directory, processes, busy) for _ in range(polls)) * 1000
    return times


def baseline_times(root: Path, processes: int, polls: int) -> dict[str, float]:
    """The same, of the kmon source tree at ``root`` (its kmon first on the path)."""
    if not (root / "kmon" / "sources" / "clients" / "spool.py").is_file():
        raise UsageError(f"--baseline {root}: no kmon/sources/clients/spool.py in it")
    env = {**os.environ, "PYTHONSAFEPATH": "1", "PYTHONPATH": f"{root}{os.pathsep}{REPO}"}
    out = subprocess.run(command("spool_cost", "--role", "reader", "--processes",
                                 str(processes), "--polls", str(polls)),
                         cwd=REPO, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[-1])


def measure(args: argparse.Namespace) -> Result:
    result = Result()
    mine = read_times(args.processes, args.polls)
    result.figure("floor", mine["floor"], "ms a poll")
    for case in CASES:
        result.figure(f"kmon, {case}", mine[case], "ms a poll")
    if args.baseline is not None:
        theirs = baseline_times(args.baseline.resolve(), args.processes, args.polls)
        for case in CASES:
            result.figure(f"baseline, {case}", theirs[case], "ms a poll")
            result.ratio(f"kmon / baseline, {case}", f"kmon, {case}", f"baseline, {case}")
    for name in list(result.figures):
        if name != "floor":
            result.ratio(f"{name} / floor", name, "floor")
    return result


def helper(args: argparse.Namespace) -> int:
    print(json.dumps(read_times(args.processes, args.polls)))
    return 0


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--processes", type=int, default=500)
    parser.add_argument("--polls", type=int, default=5)
    parser.add_argument("--baseline", type=Path, default=None, metavar="DIR")


def run(args: argparse.Namespace) -> Result:
    if args.processes < 1 or args.polls < 1:
        raise UsageError("need --processes >= 1 and --polls >= 1")
    return measure(args)
