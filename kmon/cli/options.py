"""What several commands share: the parser class, exit codes and option groups, declared once."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kmon.classify import BROKER_IDLE_MS
from kmon.units import duration_arg, interval_arg, positive_int_arg, property_arg

__all__ = ["duration_arg", "interval_arg"]

EXIT_ERROR = 1
EXIT_USAGE = 2


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one clear line."""

    def error(self, message: str) -> None:
        self.exit(EXIT_USAGE, f"kmon: error: {message} (see '{self.prog} --help')\n")


def client_properties(parser: argparse.ArgumentParser, what: str) -> None:
    """``-X key=value``: client properties for the cluster connection (as kcat takes them)."""
    parser.add_argument("-X", dest="properties", type=property_arg, action="append", default=[],
                        metavar="KEY=VALUE", help=f"client property {what}")


def cluster_timeout(parser: argparse.ArgumentParser, default_s: float) -> None:
    """``--cluster-timeout``: how long to wait for the cluster's answers."""
    parser.add_argument("--cluster-timeout", type=duration_arg, default=default_s,
                        metavar="DURATION", help="how long to wait for the cluster's answers "
                        f"(default {default_s:g}s)")


def broker_idle(parser: argparse.ArgumentParser) -> None:
    """``--broker-idle-ms``: the brokers' own idle limit."""
    parser.add_argument("--broker-idle-ms", type=positive_int_arg, default=None,
                        help="the brokers' connections.max.idle.ms (default: as the cluster "
                             f"describes it where kmon asks it, else {BROKER_IDLE_MS})")


def broker_idle_ms(args: argparse.Namespace, cluster_said: int | None) -> int:
    """--broker-idle-ms if given, else the cluster's own limit, else Kafka's default."""
    return args.broker_idle_ms or cluster_said or BROKER_IDLE_MS


def wire(parser: argparse.ArgumentParser) -> None:
    """``--wire``: read the Kafka request headers on the client's own sockets (needs root)."""
    parser.add_argument("--wire", choices=("auto", "off"), default="auto",
                        help="roles from the Kafka headers on the client's sockets where kmon "
                             "may capture packets (CAP_NET_RAW): auto (default) or off")


def interval(parser: argparse.ArgumentParser, what: str = "snapshots",
             default: float | None = None) -> None:
    """``--interval``: time between refreshes."""
    shown = f"{default:g}s" if default else "1s"
    parser.add_argument("--interval", type=interval_arg, default=default, metavar="DURATION",
                        help=f"time between {what}, 10ms to 1h, e.g. 500ms, 2s (default {shown})")


def config_file(parser: argparse.ArgumentParser) -> None:
    """``--config``: the config file (thresholds, named clusters and their properties)."""
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help="config file (default $KMON_CONFIG, ~/.config/kmon/config.toml)")


def dashboard(parser: argparse.ArgumentParser) -> None:
    """Options every dashboard command takes."""
    parser.add_argument("--theme", metavar="NAME", help="Textual theme, e.g. nord, dracula")
    config_file(parser)
    parser.add_argument("--record-dir", type=Path, default=Path("kmon-sessions"), metavar="DIR",
                        help="where the r key records sessions (default ./kmon-sessions)")


def interactive(args: argparse.Namespace) -> bool:
    """True when the dashboard should open: a terminal, and no text output asked for."""
    return (not getattr(args, "json", False) and not getattr(args, "once", False)
            and not getattr(args, "headless", False) and sys.stdout.isatty()
            and sys.stdin.isatty())


def rotation(parser: argparse.ArgumentParser, rotate_every_s: float | None) -> None:
    """``--rotate-every``, ``--rotate-size``, ``--retain``, ``--max-disk``: a recording cut
    into sessions, and how much of it to keep (kmon.record.rotation)."""
    from kmon.units import size_arg

    shown = f"{rotate_every_s:g}s" if rotate_every_s else "never"
    parser.add_argument("--rotate-every", type=duration_arg, default=rotate_every_s,
                        metavar="DURATION", help=f"start a new session this often (default "
                        f"{shown})")
    parser.add_argument("--rotate-size", type=size_arg, default=None, metavar="SIZE",
                        help="start a new session once one has written this much, e.g. 100MB")
    parser.add_argument("--retain", type=duration_arg, default=None, metavar="DURATION",
                        help="remove this host's sessions older than this, e.g. 7d, oldest "
                             "first (never the one being written)")
    parser.add_argument("--max-disk", type=size_arg, default=None, metavar="SIZE",
                        help="remove this host's oldest finished sessions while its recording "
                             "takes more than this, e.g. 2GB")
