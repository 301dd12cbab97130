"""Render kmon's terminal views from a real run of the demo into screenshots/*.svg.

Run from the repository root: ``python screenshots/make.py``. It starts the
demo's embedded cluster and workload, watches them for a while so idle ages
and a reap show, and saves what the terminal shows as SVG.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from rich.console import Console

from kmon.demo import Demo
from kmon.monitor import Monitor
from kmon.render import process_table, snapshot_renderable
from kmon.sampler import ProcessSampler, SamplerSettings
from kmon.sources.sockets import open_socket_reader

OUT = Path(__file__).parent
WATCH_SECONDS = 12


def save(renderable, name: str, title: str) -> None:
    console = Console(record=True, width=190, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    console.save_svg(str(OUT / name), title=title)
    print(f"wrote {OUT / name}")


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
    return 0


if __name__ == "__main__":
    sys.exit(main())
