"""``kmon watch CLUSTER``: the dashboard of one cluster's brokers, groups and local clients;
with no CLUSTER (and ``kmon`` with no command), the host view: every Kafka client process
on this host, by cluster."""

from __future__ import annotations

import argparse

from kmon.cli import options
from kmon.errors import UserError
from kmon.units import duration_arg


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``watch`` arguments to ``parser``."""
    parser.add_argument("cluster", metavar="CLUSTER", nargs="?",
                        help="shorthand for -b CLUSTER (none: every Kafka client process on "
                             "this host, by cluster)")
    options.cluster(parser)
    options.interval(parser, "refreshes of the local clients")
    parser.add_argument("--metadata-every", type=duration_arg, default=30.0, metavar="DURATION",
                        help="time between refreshes of the cluster's metadata (default 30s)")
    options.wire(parser)
    options.dashboard(parser)


def run(args: argparse.Namespace) -> int:
    """The watch dashboard until the user quits."""
    from kmon.cli import wiring
    from kmon.cli.config import load_config
    from kmon.cli.dashboard import checked_theme, dashboard_settings

    config = load_config(args.config)
    theme = checked_theme(config, args.theme)
    cluster = wiring.named_cluster(args, config)
    if not options.interactive(args):
        raise UserError("kmon watch (and kmon with no command) is a dashboard and needs a "
                        "terminal; for text use kmon ps [--json] (the host's clients), "
                        "kmon attach PID --once [--json] or kmon record -b CLUSTER")
    # the engine and Textual once the arguments are known good: a mistake is told at once
    from kmon.engine.facade import HostTarget, open_session
    from kmon.widgets.launch import run_host, run_watch

    settings = dashboard_settings(config, args.interval, args.record_dir)
    engine = wiring.engine_settings(args, config, cluster, require_kafka=False,
                                    interval_ms=round(settings.interval_s * 1000))
    if cluster is None:
        return run_host(open_session(HostTarget(), engine), settings, theme)
    session = open_session(wiring.cluster_target(cluster, args, args.metadata_every), engine)
    shown = ", ".join(f"{k}={v}" for k, v in cluster.shown_properties().items())
    return run_watch(f"{cluster.name} ({shown})" if shown else cluster.name, session, settings,
                     theme)
