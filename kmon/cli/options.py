"""What several commands share: the parser class, exit codes and option groups, declared once."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

from kmon.classify import BROKER_IDLE_MS
from kmon.units import duration_arg, duration_ms_arg, interval_arg, positive_int_arg, property_arg

__all__ = ["duration_arg", "interval_arg"]

EXIT_ERROR = 1
EXIT_USAGE = 2
CLUSTER_TIMEOUT_S = 10.0  # every command waits this long for a cluster's answers by default


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one clear line."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"kmon: error: {message} (see '{self.prog} --help')\n")


def client_properties(parser: argparse.ArgumentParser) -> None:
    """``-X key=value``: client properties for the cluster connection (as kcat takes them)."""
    parser.add_argument("-X", dest="properties", type=property_arg, action="append", default=[],
                        metavar="KEY=VALUE", help="client property for the cluster, e.g. "
                        "security.protocol=SSL (KEY=@FILE reads the value from FILE)")


def cluster(parser: argparse.ArgumentParser, name_group=None) -> None:
    """How every command names a cluster: ``-b/--bootstrap-server(s)`` (a config name or
    bootstrap servers; in ``name_group`` when given), ``-X``, ``-F/--command-config``,
    ``--cluster-timeout`` and ``--broker-idle``. kmon.cli.wiring.named_cluster reads them."""
    (name_group or parser).add_argument(
        "-b", "--bootstrap-server", "--bootstrap-servers", dest="bootstrap",
        metavar="CLUSTER",
        help="the cluster: a name from the config file, or bootstrap servers host:port,...")
    client_properties(parser)
    parser.add_argument("-F", "--command-config", type=Path, metavar="FILE",
                        help="the cluster's client properties from a Java .properties file "
                             "(as kafka-console-consumer takes it); -X overrides them")
    cluster_timeout(parser)
    broker_idle(parser)


def cluster_timeout(parser: argparse.ArgumentParser) -> None:
    """``--cluster-timeout``: how long to wait for the cluster's answers."""
    parser.add_argument("--cluster-timeout", type=duration_arg, default=CLUSTER_TIMEOUT_S,
                        metavar="DURATION", help="how long to wait for the cluster's answers "
                        f"(default {CLUSTER_TIMEOUT_S:g}s)")


def broker_idle(parser: argparse.ArgumentParser) -> None:
    """``--broker-idle DURATION`` (``--broker-idle-ms`` kept as an alias): the brokers' own
    idle limit."""
    parser.add_argument("--broker-idle", dest="broker_idle_ms", type=duration_ms_arg,
                        default=None, metavar="DURATION",
                        help="the brokers' connections.max.idle.ms, e.g. 10m (default: the "
                             "config's broker_idle for the cluster, else as the cluster "
                             f"describes it where kmon asks it, else {BROKER_IDLE_MS // 60000}m)")
    parser.add_argument("--broker-idle-ms", dest="broker_idle_ms", type=positive_int_arg,
                        help=argparse.SUPPRESS)


def wire(parser: argparse.ArgumentParser) -> None:
    """``--wire``, ``--tls``: read the Kafka request headers on the client's own sockets, and
    inside their TLS (needs root)."""
    parser.add_argument("--wire", choices=("auto", "off"), default="auto",
                        help="roles from the Kafka headers on the client's sockets where kmon "
                             "may capture packets (CAP_NET_RAW): auto (default) or off")
    parser.add_argument("--tls", choices=("auto", "off"), default="auto",
                        help="the same inside TLS: uprobes on the client's OpenSSL writes, "
                             "reading each request's first 16 bytes (root): auto (default) or "
                             "off")


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


OUTPUTS = ("table", "wide", "tsv", "json")


def output(parser: argparse.ArgumentParser, rows: str = "one row per connection") -> None:
    """``-o/--output table|wide|tsv|json`` (and ``--json``, its json): text for pipes."""
    parser.add_argument("-o", "--output", choices=OUTPUTS, metavar="|".join(OUTPUTS),
                        help=f"text, {rows}: table (fits the terminal; whole when piped), "
                             "wide (more columns, never cut), tsv (for awk: JSON's keys and "
                             "values) or json")
    parser.add_argument("--json", action="store_true", help="the same as -o json")


def output_format(args: argparse.Namespace) -> str | None:
    """The -o format asked for (``--json`` is json); None when neither was given."""
    return "json" if args.json else args.output


def interactive(args: argparse.Namespace) -> bool:
    """True when the dashboard should open: a terminal, and no text output asked for."""
    return (not getattr(args, "json", False) and not getattr(args, "output", None)
            and not getattr(args, "once", False)
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
