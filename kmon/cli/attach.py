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
    from kmon.engine.host_churn import HostTimeWaits
    from kmon.engine.sampler import ProcessSampler, SampleError
    from kmon.sources.brokers.dns import SETUP_WAIT_S
    from kmon.sources.clients.spool import SpoolError
    from kmon.sources.kernel.socket_readers import open_socket_reader

    if args.client_log is not None and args.client_log.exists() and not (
            args.client_log.is_file()):
        raise UserError(f"--client-log {args.client_log}: not a regular file; kmon follows "
                        "log files only")
    try:
        config = load_config(args.config)
        # the theme is the dashboard's: headless output loads Textual to check one only when
        # the command line names it
        theme = (checked_theme(config, args.theme) if options.interactive(args) or args.theme
                 else None)
        named = wiring.named_cluster(args, config)
        wiring.require_processes([args.pid])
        cluster, groups = None, None
        if named is not None:
            state = wiring.cluster_state(named, args.cluster_timeout, groups=True)
            cluster, groups = state.metadata, state.groups
        settings = wiring.sampler_settings(
            args, config, named, cluster, groups, require_kafka=not args.any_process,
            not_kafka_hint="name its cluster with -b, or pass --any-process")
        if cluster is not None:  # its brokers' names looked up before the first poll
            settings.resolver.look_up(b.address for b in cluster.brokers)
        if args.once:  # one snapshot: worth waiting a little for the names it meets
            settings.resolver.patience_s = SETUP_WAIT_S
        sampler = ProcessSampler(args.pid, open_socket_reader(args.socket_reader), settings,
                                 client_log=args.client_log)
        interactive = options.interactive(args)
        kernel = None if args.no_kernel_events else _kernel_watch(cluster, sampler)
        monitor = wiring.monitor([sampler], config, kernel=kernel,
                                 host_closes=None if kernel or args.no_kernel_events
                                 else HostTimeWaits())
        try:
            if interactive:
                return _dashboard(args, monitor, config, theme)
            interval = args.interval or config.dashboard.interval_s or 1.0
            return print_snapshots(monitor, interval, options.output_format(args),
                                   once=args.settle if args.once else None)
        finally:
            monitor.close()
    except BrokenPipeError:
        raise
    except (SampleError, SpoolError, OSError) as err:
        raise UserError(str(err)) from err


def _kernel_watch(cluster, sampler):
    """The kernel's TCP events filtered by the brokers' ports, or None with a notice on
    ``sampler`` saying what kmon cannot see without them."""
    from kmon.engine.kernel_watch import open_kernel_watch

    watch, notice = open_kernel_watch(b.port for b in cluster.brokers) if cluster else (
        open_kernel_watch())
    if notice is not None:
        sampler.standing_notices.append(notice)
    return watch


def _dashboard(args: argparse.Namespace, monitor, config, theme: str | None) -> int:
    from kmon.cli.dashboard import dashboard_settings
    from kmon.engine.facade import ProcessSession
    from kmon.widgets.launch import run_attach

    settings = dashboard_settings(config, args.interval, args.record_dir)
    session = ProcessSession(monitor, round(settings.interval_s * 1000))
    return run_attach(args.pid, session, settings, theme, cluster=args.bootstrap or "")
