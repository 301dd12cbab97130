"""``kmon devcluster``: the embedded mock Kafka cluster, or a real Apache Kafka one, in the
foreground."""

from __future__ import annotations

import argparse

from kmon.errors import UserError
from kmon.units import positive_int_arg, property_arg


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``devcluster`` arguments to ``parser``."""
    parser.add_argument("--brokers", type=positive_int_arg, default=None,
                        help="how many brokers (default: 3 mock brokers, 1 real node)")
    parser.add_argument("--kafka", action="store_true",
                        help="a real Apache Kafka cluster (KRaft, Java 17+; its jars are "
                             "fetched with Maven once) instead of librdkafka's mock")
    parser.add_argument("--broker-config", type=property_arg, action="append", default=[],
                        metavar="KEY=VALUE",
                        help="a broker property, e.g. connections.max.idle.ms=8000 (with --kafka)")


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted; prints the bootstrap string first."""
    if not args.kafka:
        if args.broker_config:
            raise UserError("--broker-config needs --kafka: the mock cluster has no broker "
                            "properties")
        from kmon.devtools.mock_cluster import serve

        return serve(args.brokers or 3)
    from kmon.devtools.kafka_cluster import ClusterError
    from kmon.devtools.kafka_cluster import serve as serve_kafka
    from kmon.devtools.maven_jars import JarsUnavailable

    try:
        return serve_kafka(args.brokers or 1, dict(args.broker_config))
    except (ClusterError, JarsUnavailable, OSError) as err:
        raise UserError(str(err)) from err
