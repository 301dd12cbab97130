"""The verdicts an operator reads at the worst moment, each checked on a real Apache Kafka
cluster against a truth kmon does not use (the client's own log, its statistics).

Issue reproductions: a stopped cluster is refused connects, never a per-IP limit; a process
with no group has no coordinator whatever another process's client id is.
"""

from __future__ import annotations

import sys
import time

import pytest
from helpers import KafkaClient, attach_stream, read_until

pytestmark = pytest.mark.integration  # a real cluster, real clients, kmon as root

WORKLOAD = [sys.executable, "-m", "kmon.devtools.workload"]


def started(*argv: str) -> KafkaClient:
    client = KafkaClient([*WORKLOAD, *argv])
    client.wait_line("READY", timeout=90)
    return client


@pytest.mark.skipif(sys.platform != "linux", reason="the kernel's TCP events are Linux's")
def test_a_stopped_cluster_is_refused_connects_never_a_per_ip_limit(start_kafka):
    """Every node stopped under a plain consumer: its reconnects are answered by a RST (the
    client's own log says "Connection refused"): connect_failed, refused, never
    per_ip_rejected (a per-IP limit accepts, then closes)."""
    import os
    if os.geteuid() != 0:
        pytest.skip("the kernel's TCP events need root")
    cluster = start_kafka(brokers=1)
    consumer = started("consumer", cluster.bootstrap(), "-X", "debug=broker",
                       "-X", "reconnect.backoff.max.ms=200")
    stream = attach_stream(consumer.pid, "-b", cluster.bootstrap())
    try:
        read_until(stream, lambda events, record: True, 5)  # attached, following the port
        stopped_ms = time.time() * 1000
        for node in cluster.nodes:
            cluster.kill(node)
        consumer.wait_stderr("Connection refused", timeout=30)  # the client's own word

        def enough(events, record):
            return sum(e["kind"] == "closed" and e["ts_ms"] >= stopped_ms
                       and e["reason"] == "connect_failed" for e in events) >= 3

        events, _ = read_until(stream, enough, 20)
    finally:
        stream.stop()
        consumer.stop()
    closed = [e for e in events if e["kind"] == "closed" and e["ts_ms"] >= stopped_ms]
    shown = [(e["reason"], e["closed_by"], e.get("detail")) for e in closed]
    assert not [e for e in closed if e["reason"] == "per_ip_rejected"], shown
    refused = [e for e in closed if e["reason"] == "connect_failed"]
    assert len(refused) >= 3 and all("refused" in e["detail"] for e in refused), shown
    churn = [e for e in events if e["kind"] == "churn" and e["ts_ms"] >= stopped_ms]
    assert not [e for e in churn if e.get("pattern") == "per_ip_rejected"], churn
