"""``kmon replay FILE``: the attach dashboard over a recording made with ``attach --json``.

It reads JSON lines of snapshots (``kmon attach PID --json > FILE``); a
``kmon record`` session (Parquet) is for ``kmon analyze``, and it says so."""

from __future__ import annotations

import argparse
from pathlib import Path

from kmon.cli import options
from kmon.errors import UserError
from kmon.units import pid_arg


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``replay`` arguments to ``parser``."""
    parser.add_argument("file", type=Path, metavar="FILE",
                        help="JSON lines of kmon snapshots (kmon attach PID --json > FILE)")
    parser.add_argument("--pid", type=pid_arg, default=None,
                        help="the process to show (default: the first one recorded)")
    parser.add_argument("--interval", type=options.interval_arg, default=None,
                        metavar="DURATION", help="time between frames, e.g. 500ms "
                        "(default: as recorded)")
    options.dashboard(parser)


def run(args: argparse.Namespace) -> int:
    """Play the recording until the user quits."""
    from kmon.cli.config import load_config
    from kmon.cli.dashboard import checked_theme, dashboard_settings
    from kmon.engine.facade import (
        EngineSettings,
        ReplayError,
        ReplayTarget,
        open_session,
        read_recording,
        recorded_interval_s,
    )
    from kmon.widgets.launch import run_attach

    config = load_config(args.config)
    theme = checked_theme(config, args.theme)
    if args.file.is_dir() or args.file.suffix == ".parquet":
        raise UserError(f"{args.file} is a kmon record session (Parquet); replay reads JSON "
                        "lines (kmon attach PID --json > FILE): look at a session with "
                        f"kmon analyze {args.file}")
    try:
        recording = read_recording(args.file)
    except ReplayError as err:
        raise UserError(f"{err}; replay reads JSON lines (kmon attach PID --json > FILE)") from err
    pids = list(recording.pids)
    if not pids:
        raise UserError(f"{args.file} holds snapshots of no process: nothing to replay")
    pid = args.pid if args.pid is not None else pids[0]
    if pid not in pids:
        raise UserError(f"{args.file} holds no snapshot of PID {pid}; it holds PID "
                        f"{', '.join(map(str, pids))}")
    if not options.interactive(args):
        raise UserError("kmon replay is a dashboard and needs a terminal")
    settings = dashboard_settings(config, args.interval or recorded_interval_s(recording),
                                  args.record_dir)
    session = open_session(ReplayTarget(recording),
                           EngineSettings(interval_ms=round(settings.interval_s * 1000)))
    return run_attach(pid, session, settings, theme, cluster=f"replay of {args.file}")
