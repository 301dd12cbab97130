"""Render kmon's screens from real runs into screenshots/.

Run from the repository root: ``python screenshots/make.py [--no-charts]``. It
starts the demo's embedded cluster and workload, runs the real dashboard on a
virtual terminal (Textual's pilot) — ``kmon watch`` on the cluster, then the
attach screen of a consumer and of the producer whose idle connections are
reaped, then the host view (``kmon``) — and saves each screen as SVG, and as
PNG where ``rsvg-convert`` is installed. Then it simulates a small fleet, runs
``kmon analyze`` on it and keeps its charts (PNG).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from kmon.devtools.demo_workload import Demo
from kmon.engine.facade import (
    ClusterTarget,
    EngineSettings,
    HostTarget,
    SamplerSettings,
    open_session,
)
from kmon.present.dashboard_settings import DashboardSettings
from kmon.widgets.app import KmonApp
from kmon.widgets.host_screen import HostScreen
from kmon.widgets.watch_screen import WatchScreen

OUT = Path(__file__).parent
SIZE = (170, 48)
SETTLE_SECONDS = 20
CHARTS = ("connections_over_time", "churn_per_broker", "idle_age")
ENGINE = EngineSettings(SamplerSettings(require_kafka=False))  # the demo's clients, all of them


def save(app: KmonApp, name: str) -> None:
    """The app's screen as SVG, and PNG when a converter is at hand."""
    svg = OUT / f"{name}.svg"
    app.save_screenshot(str(svg))
    print(f"wrote {svg}")
    converter = shutil.which("rsvg-convert")
    if converter:
        subprocess.run([converter, str(svg), "-o", str(svg.with_suffix(".png"))], check=True)
        print(f"wrote {svg.with_suffix('.png')}")


async def attach_to(app: KmonApp, pilot, screen: WatchScreen, label: str) -> None:
    """Select the process whose label starts with ``label`` and open its attach screen."""
    table = screen.query_one("#processes")
    row = next(i for i in range(table.row_count) if table.row_text(i)[1].startswith(label))
    table.move_to(row)
    await pilot.press("enter")
    await pilot.pause(SETTLE_SECONDS)


async def dashboard_screens(demo: Demo) -> None:
    labels = {pid: c.label for pid, c in demo.clients.items()}
    session = open_session(ClusterTarget(demo.bootstrap, refresh_s=10.0,
                                         pids=tuple(demo.clients)), ENGINE)
    screen = WatchScreen("demo", session, DashboardSettings(), labels)
    app = KmonApp(screen)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(SETTLE_SECONDS)
        save(app, "watch")
        await attach_to(app, pilot, screen, "consumer A")
        save(app, "attach-consumer")
        await pilot.press("enter")
        await pilot.pause(1)
        save(app, "attach-detail")
        await pilot.press("escape", "escape")
        await attach_to(app, pilot, screen, "idle producer")
        save(app, "attach-reaping")


async def host_view() -> None:
    """``kmon`` with no arguments: every Kafka client on this host, by cluster."""
    app = KmonApp(HostScreen(open_session(HostTarget(), ENGINE), DashboardSettings()))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(SETTLE_SECONDS)
        save(app, "host")


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-charts", action="store_true", help="skip the Spark charts")
    args = parser.parse_args()
    with Demo() as demo:
        asyncio.run(dashboard_screens(demo))
        asyncio.run(host_view())
    if not args.no_charts:
        analysis_charts()
    return 0


if __name__ == "__main__":
    sys.exit(main())
