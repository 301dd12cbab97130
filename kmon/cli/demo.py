"""``kmon demo``: an embedded cluster and a small workload, watched by kmon."""

from __future__ import annotations

import argparse
import sys

from kmon.cli import options
from kmon.errors import UserError


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``demo`` arguments to ``parser``."""
    parser.add_argument("--headless", action="store_true",
                        help="no live screen: print snapshots (as -o chooses)")
    options.output(parser)
    parser.add_argument("--kafka", action="store_true",
                        help="on a real 3-node Apache Kafka cluster (Java 17+; its jars are "
                             "fetched with Maven once) instead of the embedded mock")
    parser.add_argument("--duration", type=options.duration_arg, default=None,
                        metavar="DURATION", help="stop after this long (default: until Ctrl-C)")
    options.interval(parser)
    options.dashboard(parser)


def run(args: argparse.Namespace) -> int:
    """Start the cluster and the clients, watch them, and stop every child at the end."""
    from kmon.cli import wiring
    from kmon.cli.config import load_config
    from kmon.cli.dashboard import checked_theme
    from kmon.cli.text_view import print_snapshots
    from kmon.devtools.demo_workload import Demo, DemoError
    from kmon.engine.facade import AttachFailed, ProcessTarget, open_session

    config = load_config(args.config)
    interactive = options.interactive(args)
    theme = checked_theme(config, args.theme) if interactive else None
    cluster = "a real 3-node Apache Kafka cluster" if args.kafka else "an embedded 3-broker cluster"
    print(f"kmon demo: starting {cluster} and 5 client processes...", file=sys.stderr, flush=True)
    interval_s = args.interval or config.dashboard.interval_s or 1.0
    try:
        with Demo(kafka=args.kafka) as demo:
            labels = {pid: client.label for pid, client in demo.clients.items()}
            if interactive:
                return _dashboard(demo, labels, config, args, theme)
            session = open_session(ProcessTarget(tuple(demo.clients)), wiring.engine_settings(
                args, config, interval_ms=round(interval_s * 1000)))
            try:
                return print_snapshots(
                    session, interval_s, options.output_format(args), duration=args.duration,
                    labels=labels, live_screen=not args.headless,
                    title=f"kmon demo — cluster {demo.bootstrap} (Ctrl-C to stop)")
            finally:
                session.close()
    except BrokenPipeError:
        raise
    except (DemoError, AttachFailed, OSError) as err:
        raise UserError(str(err)) from err


def _dashboard(demo, labels: dict[int, str], config, args: argparse.Namespace,
               theme: str | None) -> int:
    """``kmon watch`` on the demo's cluster, its clients listed from the start."""
    from kmon.cli import wiring
    from kmon.cli.dashboard import dashboard_settings
    from kmon.engine.facade import ClusterTarget, open_session
    from kmon.widgets.launch import run_watch

    settings = dashboard_settings(config, args.interval, args.record_dir)
    session = open_session(ClusterTarget(demo.bootstrap, refresh_s=10.0, pids=tuple(demo.clients)),
                           wiring.engine_settings(args, config, require_kafka=False,
                                                  interval_ms=round(settings.interval_s * 1000)))
    return run_watch("demo", session, settings, theme, labels=labels,
                     exit_after_s=args.duration)
