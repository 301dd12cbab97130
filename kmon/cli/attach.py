"""``kmon attach PID``: the dashboard of one client process, or its snapshots as text."""

from __future__ import annotations

import argparse
from pathlib import Path

from kmon.cli import options, settle
from kmon.errors import UserError
from kmon.units import pid_arg


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``attach`` arguments to ``parser``."""
    parser.add_argument("pid", type=pid_arg, help="process id of the Kafka client")
    parser.add_argument("--once", action="store_true", help="print one snapshot and exit")
    settle.option(parser)
    options.output(parser)
    options.interval(parser)
    options.cluster(parser)
    options.wire(parser)
    parser.add_argument("--socket-reader", choices=("auto", "sock_diag", "psutil"),
                        default="auto", help="how sockets are read (default: fastest)")
    parser.add_argument("--any-process", action="store_true",
                        help="attach even to a process that shows no sign of Kafka")
    parser.add_argument("--no-kernel-events", action="store_true",
                        help="do not read the kernel's TCP events (root: every open, close, "
                        "failed connect and refused connection, however short-lived)")
    parser.add_argument("--client-log", type=Path, metavar="FILE",
                        help="a Java client's log to follow (NetworkClient lines: node ids, "
                        "addresses, open order)")
    options.dashboard(parser)


def run(args: argparse.Namespace) -> int:
    """Attach to ``args.pid`` until the user quits, once, or the process exits."""
    from kmon.cli import wiring
    from kmon.cli.config import load_config
    from kmon.cli.dashboard import checked_theme
    from kmon.cli.text_view import print_snapshots
    from kmon.engine.facade import AttachFailed, ProcessTarget, open_session

    if args.client_log is not None and args.client_log.exists() and not (
            args.client_log.is_file()):
        raise UserError(f"--client-log {args.client_log}: not a regular file; kmon follows "
                        "log files only")
    try:
        config = load_config(args.config)
        # the theme is the dashboard's: headless output loads Textual to check one only when
        # the command line names it
        interactive = options.interactive(args)
        theme = checked_theme(config, args.theme) if interactive or args.theme else None
        named = wiring.named_cluster(args, config)
        wiring.require_processes([args.pid])
        cluster = wiring.cluster_state(named, args, groups=True) if named else None
        interval_s = args.interval or config.dashboard.interval_s or 1.0
        settings = wiring.engine_settings(
            args, config, named, cluster, require_kafka=not args.any_process,
            not_kafka_hint="name its cluster with -b, or pass --any-process",
            interval_ms=round(interval_s * 1000), kernel_events=not args.no_kernel_events,
            socket_reader=args.socket_reader, one_look=args.once)
        session = open_session(ProcessTarget((args.pid,), args.client_log, cluster), settings)
        try:
            if interactive:
                return _dashboard(args, session, config, theme)
            return print_snapshots(session, interval_s, options.output_format(args),
                                   once=args.settle if args.once else None)
        finally:
            session.close()
    except BrokenPipeError:
        raise
    except (AttachFailed, OSError) as err:
        raise UserError(str(err)) from err


def _dashboard(args: argparse.Namespace, session, config, theme: str | None) -> int:
    from kmon.cli.dashboard import dashboard_settings
    from kmon.widgets.launch import run_attach

    settings = dashboard_settings(config, args.interval, args.record_dir)
    return run_attach(args.pid, session, settings, theme, cluster=args.bootstrap or "")
