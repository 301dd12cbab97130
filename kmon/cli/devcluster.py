"""``kmon devcluster``: the embedded mock Kafka cluster in the foreground."""

from __future__ import annotations

import argparse

from kmon.units import positive_int_arg


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``devcluster`` arguments to ``parser``."""
    parser.add_argument("--brokers", type=positive_int_arg, default=3)


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted; prints the bootstrap string first."""
    from kmon.devtools.devcluster import serve

    return serve(args.brokers)
