"""``rebootstrap`` on a real Apache Kafka cluster: one node reaping idle connections after
4 s, an instrumented librdkafka producer that loses its only broker and goes back to its
bootstrap server (KIP-899, librdkafka 2.10 and later; its own debug log says
``re-bootstrap``). ``kmon attach PID --json`` names it, with the time to recover, within
25 s of the client's recovery by its own log. The bootstrap connection lives about a
second: kmon knows it from the kernel's connect and close, whether or not a poll saw it."""

from __future__ import annotations

import json
import re
import sys
import time

import pytest
from helpers import KafkaClient, attach_stream

pytestmark = pytest.mark.integration  # a real cluster, a real client, kmon as root

FINDING_WITHIN_S = 25  # the acceptance: the finding appears within 25 s
LOGGED = re.compile(r"^%\d\|(\d+\.\d+)\|")  # librdkafka's log: %LEVEL|EPOCH.MS|FAC|...
BROKER_UP = re.compile(r"\[thrd:[^\]]+/\d+\]: .*Connected \(#\d+\)")  # a broker, by its id


def logged_ms(line: str) -> int:
    return int(float(LOGGED.match(line).group(1)) * 1000)


def client_recovery(stderr: list[str], lost_ms: int) -> tuple[int, int]:
    """The client's own word: when it said it re-bootstraps last before kmon saw its broker
    go (and a margin), and when a broker (by its id, not a bootstrap)
    connected next."""
    logged = [line for line in stderr if LOGGED.match(line)]
    rebootstrap = max(logged_ms(line) for line in logged if "re-bootstrap" in line
                      and logged_ms(line) <= lost_ms + 1_000)
    back = next(logged_ms(line) for line in logged
                if BROKER_UP.search(line) and logged_ms(line) >= rebootstrap)
    return rebootstrap, back


def test_a_producer_that_lost_its_only_broker_and_rebootstrapped_is_named(start_kafka):
    cluster = start_kafka(brokers=1, **{"connections.max.idle.ms": "4000"})
    producer = KafkaClient([sys.executable, "-m", "kmon.devtools.workload", "producer",
                            cluster.bootstrap(), "--instrument", "-X", "debug=broker"])
    producer.wait_line("READY", timeout=90)
    # polled once a second, kmon's default: a poll sees the bootstrap connection once at most
    stream = attach_stream(producer.pid, "-b", cluster.bootstrap(), interval="1s")
    found, seen_ms = None, 0
    try:
        deadline = time.monotonic() + 90  # the reap cycles go on until one re-bootstraps
        while found is None and time.monotonic() < deadline:
            record = json.loads(stream.wait_line("{", timeout=30))
            (process,) = record["processes"]
            found = next((f for f in process["findings"] if f["reason"] == "rebootstrap"
                          and f["evidence"]["recovery_ms"] is not None), None)
            seen_ms = record["ts_ms"]
    finally:
        stream.stop()
        producer.stop()
    assert found is not None, [line for line in producer.stderr if "bootstrap" in line][-5:]
    evidence = found["evidence"]
    rebootstrap_ms, back_ms = client_recovery(producer.stderr, evidence["lost_ms"])  # oracle
    assert evidence["brokers_lost"] == ["1"] and evidence["brokers_after"] == ["1"]
    assert evidence["bootstraps"] == [cluster.bootstrap()]
    # kmon's loss and recovery bracket the client's own, to a poll (1 s) and a margin
    assert rebootstrap_ms - 1_000 <= evidence["lost_ms"], (evidence, rebootstrap_ms)
    assert abs(evidence["recovered_ms"] - back_ms) <= 1_500, (evidence, back_ms)
    assert seen_ms - back_ms <= FINDING_WITHIN_S * 1000
    assert f"recovered in {evidence['recovery_ms'] / 1000:.1f} s" in found["detail"]
    assert "bootstrap.servers" in found["fix"]
    print(f"rebootstrap: recovered in {evidence['recovery_ms']} ms by kmon, "
          f"{back_ms - rebootstrap_ms} ms from the client's re-bootstrap to its broker; "
          f"named {seen_ms - back_ms} ms after the client's recovery")
