"""Render kmon's views from real runs into screenshots/.

Run from the repository root: ``python screenshots/make.py``. It starts the
demo's embedded cluster and workload, watches them for a while so idle ages
and a reap show, and saves what the terminal shows as SVG; then it simulates
a small fleet, runs ``kmon analyze`` on it and keeps its charts (PNG).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

from kmon.demo import Demo
from kmon.monitor import Monitor
from kmon.sampler import ProcessSampler, SamplerSettings
from kmon.sources.sockets import open_socket_reader
from widgets.tables import process_table, snapshot_renderable

OUT = Path(__file__).parent
WATCH_SECONDS = 12
CHARTS = ("connections_over_time", "churn_per_broker", "idle_age")


def save(renderable, name: str, title: str) -> None:
    console = Console(record=True, width=190, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    console.save_svg(str(OUT / name), title=title)
    print(f"wrote {OUT / name}")


def analysis_charts() -> None:
    """Simulate a fleet, analyse it on Spark, keep the charts."""
    with tempfile.TemporaryDirectory() as tmp:
        fleet, out = Path(tmp) / "fleet", Path(tmp) / "out"
        kmon = [sys.executable, "-m", "kmon"]
        subprocess.run([*kmon, "simulate-fleet", "--out", str(fleet), "--hosts", "3",
                        "--clients", "8", "--brokers", "6", "--hours", "1", "--interval", "5s",
                        "--seed", "7"], check=True)
        subprocess.run([*kmon, "analyze", str(fleet), "--out", str(out)], check=True,
                       stdout=subprocess.DEVNULL)
        for chart in CHARTS:
            shutil.copy(out / f"{chart}.png", OUT / f"analyze-{chart}.png")
            print(f"wrote {OUT / f'analyze-{chart}.png'}")


def main() -> int:
    with Demo() as demo:
        reader, settings = open_socket_reader(), SamplerSettings()
        monitor = Monitor(ProcessSampler(pid, reader, settings) for pid in demo.clients)
        labels = {pid: c.label for pid, c in demo.clients.items()}
        for _ in range(WATCH_SECONDS):
            snapshot, _ = monitor.poll()
            time.sleep(1)
        save(snapshot_renderable(snapshot, monitor.events, f"kmon demo — {demo.bootstrap}",
                                 labels), "demo.svg", "kmon demo")
        consumer = next(v for v in snapshot.processes if labels[v.pid].startswith("consumer"))
        save(process_table(consumer, labels[consumer.pid]), "attach-consumer.svg",
             f"kmon attach {consumer.pid}")
    analysis_charts()
    return 0


if __name__ == "__main__":
    sys.exit(main())
