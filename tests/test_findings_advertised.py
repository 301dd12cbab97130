"""``advertised_unreachable`` against a real Apache Kafka node: a kcat consumer
bootstraps through a TCP forwarder in the test (as through a Kubernetes service or a load
balancer) to a node whose ``advertised.listeners`` names a port nothing listens on; ``kmon
attach --json`` names the broker, its advertised address and the bootstrap that answered,
and calls the forwarder's socket a bootstrap connection, with and without ``-b FORWARDER``
(the client library kmon asks the cluster with waits for the advertised brokers; kmon's own
Metadata query to the bootstrap answers). Its negative twin, the same consumer through the
same kind of forwarder to the session's cluster, whose nodes advertise their real ports,
raises nothing."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from helpers import Child, attach_stream, free_port, require_java, unique

from kmon.devtools.forwarder import Forwarder
from kmon.devtools.kafka_cluster import KafkaCluster

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

FINDING_WITHIN_S = 25  # the acceptance: the finding appears within 25 s
TWIN_WATCHED_S = 12  # the negative twin is watched this long (past its first connects)
TOPIC = "advertised-topic"


@pytest.fixture(scope="module")
def unreachable():
    """A 1-node cluster advertising a port nothing listens on (the connects to it are
    refused), and that port; shared by the module's tests."""
    require_java()
    dead = free_port()
    with KafkaCluster(1, {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{dead}"}) as cluster:
        yield cluster, dead


def through_forwarder(cluster: KafkaCluster):
    """A forwarder to the cluster's first node's client port, and a kcat consumer
    bootstrapping through it."""
    forwarder = Forwarder(("127.0.0.1", cluster.nodes[0].ports["PLAINTEXT"]))
    topic = unique(TOPIC)
    # the topic is made by a consumer's Metadata request (through the forwarder too); its
    # message is delivered, or not, within a second
    subprocess.run(["kcat", "-P", "-b", forwarder.address, "-t", topic,
                    "-X", "message.timeout.ms=1000"], input=b"a message", timeout=30,
                   capture_output=True)
    consumer = Child(["kcat", "-C", "-b", forwarder.address, "-t", topic])
    return forwarder, consumer


def findings_until(pid: int, done, seconds: float, *extra: str
                   ) -> tuple[list[dict], dict, float]:
    """The findings of a streamed ``kmon attach PID --json [extra]`` until
    ``done(findings)`` or ``seconds``, its last record, and how long after the attach
    began."""
    stream = attach_stream(pid, *extra, interval="500ms")
    started = time.monotonic()
    try:
        while True:
            (process,) = json.loads(stream.wait_line("{", 60))["processes"]
            took = time.monotonic() - started
            if done(process["findings"]) or took > seconds:
                return process["findings"], process, took
    finally:
        stream.stop()


@pytest.mark.parametrize("given", [False, True], ids=["alone", "with -b FORWARDER"])
def test_an_unreachable_advertised_address_behind_a_forwarder_is_named(unreachable, given):
    cluster, dead = unreachable
    forwarder, consumer = through_forwarder(cluster)
    try:
        findings, process, took = findings_until(
            consumer.pid, lambda found: any(f["reason"] == "advertised_unreachable"
                                            for f in found), FINDING_WITHIN_S,
            *(["-b", forwarder.address] if given else []))
    finally:
        consumer.stop()
        forwarder.close()
    (found,) = [f for f in findings if f["reason"] == "advertised_unreachable"]
    assert found["evidence"]["advertised"] == f"127.0.0.1:{dead}"
    assert found["evidence"]["broker_id"] == 1
    assert found["evidence"]["bootstrap"] == [forwarder.address]
    assert found["evidence"]["failed_connects"] >= 1
    assert f"127.0.0.1:{dead}" in found["detail"] and "advertised.listeners" in found["fix"]
    roles = {c["remote"]: c["role"] for c in process["connections"]}
    assert roles[forwarder.address] == "bootstrap", process["connections"]
    assert took <= FINDING_WITHIN_S
    print(f"advertised_unreachable: {took:.1f} s after the attach began: {found['detail']}")


@pytest.mark.parametrize("given", [False, True], ids=["alone", "with -b FORWARDER"])
def test_a_reachable_advertised_address_behind_a_forwarder_raises_nothing(kafka, given):
    forwarder, consumer = through_forwarder(kafka)
    try:
        findings, process, _ = findings_until(consumer.pid, bool, TWIN_WATCHED_S,
                                              *(["-b", forwarder.address] if given else []))
    finally:
        consumer.stop()
        forwarder.close()
    assert findings == []
    roles = {c["remote"]: c["role"] for c in process["connections"]}
    assert roles[forwarder.address] == "bootstrap", process["connections"]
    assert "broker" in roles.values(), process["connections"]  # it reached the node itself
