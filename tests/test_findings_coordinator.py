"""``coordinator_flapping`` on a real Apache Kafka cluster: three nodes, the group offsets
in one partition replicated on all three, an instrumented consumer in a group. Its
coordinator's node is killed (and started again) three times: the coordinator moves each
time, as the consumer's own statistics say. ``kmon attach PID --json`` names none after the
first two moves and names the flapping within 25 s of the third, with the brokers it moved
between."""

from __future__ import annotations

import json
import queue
import sys
import time

import pytest
from confluent_kafka.admin import AdminClient
from helpers import KafkaClient, attach_stream, wait_for

pytestmark = pytest.mark.integration  # a real cluster, a real client, kmon as root

FINDING_WITHIN_S = 25  # the acceptance: the finding appears within 25 s
MOVES = 3
OFFSETS = "__consumer_offsets"
# the controller moves a killed node's partitions once it stops hearing from it: after 3 s
# of heartbeats half a second apart here, not Kafka's 9 s of heartbeats 2 s apart
FENCED_AFTER = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"}


def coordinator(consumer: KafkaClient) -> int | None:
    """The group coordinator's broker id, as the consumer's own statistics name it."""
    stats = consumer.own_stats()
    learned = {b["nodename"]: b["nodeid"] for b in stats["brokers"].values()
               if b["source"] == "learned"}
    entry = stats["brokers"].get("GroupCoordinator")
    return learned.get(entry["nodename"]) if entry else None


class Stream:
    """What a streamed ``kmon attach --json`` said so far: the coordinator its last record
    named, and the coordinator_flapping findings of every record."""

    def __init__(self, child) -> None:
        self.child, self.coordinator, self.findings = child, None, []

    def read(self) -> Stream:
        while True:
            try:
                line = self.child.lines.get_nowait()
            except queue.Empty:
                return self
            for view in json.loads(line)["processes"] if line.startswith("{") else ():
                self.coordinator = next((c["group_coordinator_id"] for c in view["clients"]
                                         if c["group_coordinator_id"] is not None),
                                        self.coordinator)
                self.findings += [f for f in view["findings"]
                                  if f["reason"] == "coordinator_flapping"]


def in_every_isr(admin: AdminClient, node_id: int) -> bool:
    """Whether the node is back in the ISR of the group offsets' partitions (it can lead
    them, and be the coordinator, again)."""
    topic = admin.list_topics(OFFSETS, timeout=5).topics[OFFSETS]
    return all(node_id in p.isrs for p in topic.partitions.values())


def test_a_coordinator_moved_three_times_is_named_with_its_brokers(start_kafka):
    cluster = start_kafka(brokers=3, **{"offsets.topic.replication.factor": "3",
                                        "offsets.topic.num.partitions": "1", **FENCED_AFTER})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap(), "log_level": 0})
    consumer = KafkaClient([sys.executable, "-m", "kmon.devtools.workload", "consumer",
                            cluster.bootstrap(), "--instrument"])
    consumer.wait_line("READY", timeout=90)
    child = attach_stream(consumer.pid, "-b", cluster.bootstrap(), interval="500ms")
    stream = Stream(child)
    try:
        path = [wait_for(lambda: coordinator(consumer), "the consumer's coordinator", 30)]
        wait_for(lambda: stream.read().coordinator == path[0], "kmon naming it", 60)
        for move in range(MOVES):
            victim = next(n for n in cluster.nodes if n.node_id == path[-1])
            cluster.kill(victim)
            path.append(wait_for(lambda: coordinator(consumer) not in (path[-1], None)
                                 and coordinator(consumer), "the coordinator moving", 60))
            moved = time.monotonic()
            if move < MOVES - 1:
                cluster.start_node(victim)
                cluster.wait_ready()
                wait_for(lambda node=victim.node_id: in_every_isr(admin, node),
                         "the restarted node in the ISR", 60, every=0.2)
                assert stream.read().findings == [], path  # one or two moves: none
        found = wait_for(lambda: stream.read().findings, "coordinator_flapping in attach",
                         FINDING_WITHIN_S, every=0.5)[-1]
        took = time.monotonic() - moved
    finally:
        child.stop()
        consumer.stop()
    evidence = found["evidence"]
    assert evidence["group_id"] == f"kmon-test-group-{consumer.pid}", evidence
    assert evidence["moves"] >= MOVES
    # every move kmon names is one the consumer's own statistics made (the oracle)
    truth = set(zip(path, path[1:], strict=False))
    named = list(zip(evidence["brokers"], evidence["brokers"][1:], strict=False))
    assert all((int(a), int(b)) in truth for a, b in named), (path, evidence)
    assert " → ".join(evidence["brokers"]) in found["detail"]
    print(f"coordinator_flapping: moves {path} by the consumer, named {took:.1f} s after "
          f"the third: {found['detail']}")
