"""The embedded Kafka-protocol cluster: librdkafka's mock brokers on loopback TCP."""

from __future__ import annotations

import signal
import sys
import threading


def start_mock_cluster(brokers: int):
    """Start ``brokers`` mock brokers; returns (owner handle, bootstrap string).

    The brokers live as long as the returned handle does.
    """
    from confluent_kafka import Producer

    owner = Producer({"test.mock.num.brokers": brokers, "log_level": 3})
    metadata = owner.list_topics(timeout=10)
    addresses = [f"{b.host}:{b.port}" for _, b in sorted(metadata.brokers.items())]
    return owner, ",".join(addresses)


def serve(brokers: int) -> int:
    """Run a mock cluster in the foreground until SIGINT/SIGTERM; print its bootstrap string."""
    owner, bootstrap = start_mock_cluster(brokers)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(bootstrap, flush=True)
    print(f"kmon devcluster: {brokers} mock brokers at {bootstrap} (Ctrl-C to stop)",
          file=sys.stderr, flush=True)
    while not stop.wait(1.0):
        owner.poll(0)
    return 0
