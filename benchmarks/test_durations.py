"""What a selection of the suite's tests costs now, against the same tests of another commit,
in one run on this machine.

The selection runs twice, one run after the other and against the same installed kmon:
with the ``tests/`` (and ``pyproject.toml``) of BASE exported to a temporary directory,
then with this checkout's. Each test's seconds (set-up, call and tear-down, from pytest's
JUnit XML) are printed side by side with the totals, their ratio, and the load average
before each run (a busy machine makes both slower: compare runs of similar load).

    python -m benchmarks test_durations [--base REF] -- tests/test_monitor.py -k bounded
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from benchmarks.api import Result
from benchmarks.helpers import REPO


def export(ref: str, target: Path) -> None:
    """``tests/`` and ``pyproject.toml`` as they are at ``ref``, into ``target``."""
    archive = target / "base.tar"
    subprocess.run(["git", "-C", str(REPO), "archive", "-o", str(archive), ref, "tests",
                    "pyproject.toml"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(target, filter="data")
    node_modules = REPO / "tests" / "node" / "node_modules"  # KafkaJS, installed once
    if node_modules.is_dir():
        (target / "tests" / "node" / "node_modules").symlink_to(node_modules)


def durations(root: Path, selection: list[str], report: Path) -> tuple[dict[str, float], str]:
    """{test id: seconds} of the selection run in ``root``, and pytest's last line."""
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly",
                             "-p", "no:cacheprovider", f"--junitxml={report}", *selection],
                            cwd=root, capture_output=True, text=True)
    times, failed = {}, []
    for case in ET.parse(report).iter("testcase"):
        test = f"{case.get('classname')}::{case.get('name')}"
        times[test] = float(case.get("time", 0))
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(test)
    lines = result.stdout.strip().splitlines()
    summary = lines[-1] if lines else result.stderr.strip()[-300:]
    return times, " ".join([summary, *(f"FAILED {test}" for test in failed)])


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base", default="HEAD~", help="the commit to compare with")
    parser.add_argument("selection", nargs="+", help="pytest arguments (after --)")


def run(args: argparse.Namespace) -> Result:
    with tempfile.TemporaryDirectory(prefix="kmon-test-durations-") as tmp:
        base = Path(tmp) / "base"
        base.mkdir()
        export(args.base, base)
        runs = {}
        for name, root in (("base", base), ("now", REPO)):
            load = os.getloadavg()[0]
            runs[name] = (*durations(root, args.selection, Path(tmp) / f"{name}.xml"), load)
    (before, before_line, before_load), (after, after_line, after_load) = runs["base"], runs["now"]
    width = max(map(len, before | after), default=20)
    print(f"{'test':<{width}}  {args.base:>8}  {'now':>8}")
    for test in sorted(before | after):
        old, new = before.get(test), after.get(test)
        print(f"{test:<{width}}  {'-' if old is None else f'{old:.2f}':>8}  "
              f"{'-' if new is None else f'{new:.2f}':>8}")
    total_before, total_after = sum(before.values()), sum(after.values())
    print(f"{'total':<{width}}  {total_before:8.2f}  {total_after:8.2f}")
    ratio = f"{total_after / total_before:.2f}" if total_before else "-"
    print(f"now / {args.base}: {ratio} "
          f"(load before each run: {before_load:.2f}, {after_load:.2f})")
    print(f"{args.base}: {before_line}\nnow: {after_line}")
    result = Result()
    result.figure(f"{args.base} total", total_before, "s")
    result.figure("now total", total_after, "s")
    if total_before:
        result.ratio(f"now / {args.base}", "now total", f"{args.base} total")
    return result
