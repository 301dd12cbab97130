"""``kmon simulate-fleet``: write a modelled fleet's sessions, with their known truth."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from kmon.errors import UserError
from kmon.units import MAX_DURATION_S, duration_arg
from kmon.units import positive_int_arg as count


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a rate between 0 and 1")
    return value


def _hours(text: str) -> float:
    """``--hours``, the old spelling of ``--duration``: seconds in a number of hours."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= MAX_DURATION_S / 3600:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of hours above zero")
    return value * 3600


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``kmon simulate-fleet``."""
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="where to write the recording (an empty or new directory)")
    parser.add_argument("--hosts", type=count, default=3, help="hosts (one session each)")
    parser.add_argument("--clients", type=count, default=6, help="client processes per host")
    parser.add_argument("--brokers", type=count, default=6, help="brokers in the cluster")
    parser.add_argument("--duration", dest="duration_s", type=duration_arg, default=3600.0,
                        metavar="DURATION", help="recorded time, e.g. 90m (default 1h)")
    parser.add_argument("--hours", dest="duration_s", type=_hours, help=argparse.SUPPRESS)
    parser.add_argument("--interval", type=duration_arg, default=1.0, metavar="DURATION",
                        help="time between polls (default 1s)")
    parser.add_argument("--close-wait-rate", type=_rate, default=0.1, metavar="RATE",
                        help="share of connections closed by their broker into CLOSE_WAIT")
    parser.add_argument("--churn-rate", type=_rate, default=0.3, metavar="RATE",
                        help="share of idle connections re-opened by metadata refreshes")
    parser.add_argument("--per-message-rate", type=_rate, default=0.5, metavar="RATE",
                        help="share of hosts running a process that makes a client per message")
    parser.add_argument("--seed", type=int, default=1, help="same seed, same fleet")
    parser.add_argument("--truth", type=Path, metavar="FILE",
                        help="write the simulated ground truth here as JSON")


def run(args: argparse.Namespace) -> int:
    """``kmon simulate-fleet``: write the recording (and the truth); print a summary."""
    from kmon.devtools.fleet_model import FleetSpec
    from kmon.devtools.fleet_writer import simulate
    from kmon.record.schema import TABLES

    spec = FleetSpec(hosts=args.hosts, clients=args.clients, brokers=args.brokers,
                     hours=args.duration_s / 3600, interval_ms=round(args.interval * 1000),
                     close_wait_rate=args.close_wait_rate, churn_rate=args.churn_rate,
                     per_message_rate=args.per_message_rate, seed=args.seed)
    if spec.interval_ms < 1 or spec.interval_ms * 2 > spec.end_ms - spec.start_ms:
        raise UserError(f"--interval {args.interval:g}s does not fit {spec.hours:g} h")
    for table in TABLES:
        if (args.out / table).is_dir() and any((args.out / table).iterdir()):
            raise UserError(f"{args.out} already holds a recording; choose an empty directory")
    started = time.monotonic()
    try:
        truth = simulate(spec, args.out)
        if args.truth:
            args.truth.write_text(json.dumps(truth, indent=1) + "\n")
    except OSError as err:
        raise UserError(f"cannot write the fleet: {err}") from err
    rows = truth["rows"]
    print(f"simulated {spec.hosts} hosts x {spec.clients} clients x {spec.brokers} brokers "
          f"over {spec.hours:g} h: {rows['snapshots']:,} snapshot rows, "
          f"{rows['events']:,} events in {time.monotonic() - started:.1f} s -> {args.out}",
          file=sys.stderr)
    return 0
