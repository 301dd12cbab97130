"""Group consumers of every library the harness runs, each in a group of its own, and the
acts that move groups and nodes under them: a member joining then leaving, a rolling
restart. ``scenarios.py`` registers the scenarios made of them."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from benchmarks.truth import clients as start
from kmon.devtools.children import stop_all
from kmon.devtools.client_programs import produce

if TYPE_CHECKING:
    from benchmarks.truth.scenarios import Run

TOPIC = "kmon-truth"
JOINED_S = 10.0  # how long a joining member stays


def librdkafka(name, bootstrap, group, topic, log, *settings):
    return start.workload(name, "consumer", bootstrap, log, "--group", group, "--topic", topic,
                          *[arg for setting in settings for arg in ("-X", setting)])


# slug: (name in the table, starter(name, bootstrap, group, topic, log, *settings))
KINDS = {
    "librdkafka": ("confluent-kafka consumer, plain", librdkafka),
    "kafka-python": ("kafka-python consumer", start.kafka_python),
    "kafkajs": ("KafkaJS consumer", start.kafkajs),
    "franz-go": ("franz-go consumer", start.franz_go),
    "java-jmx": ("Java 4.4 consumer, JMX on", start.java),
    "java-no-jmx": ("Java 4.4 consumer, JMX off", partial(start.java, jmx=False)),
    "java39-jmx": ("Java 3.9 consumer, JMX on", partial(start.java, version="3.9.1")),
    "java39-no-jmx": ("Java 3.9 consumer, JMX off",
                      partial(start.java, jmx=False, version="3.9.1")),
}
SETS = {"rdkafka": ("librdkafka",), "others": ("kafka-python", "kafkajs", "franz-go"),
        "java": ("java-jmx", "java-no-jmx", "java39-jmx", "java39-no-jmx")}
# the kinds that join KIP-848 groups (group.protocol=consumer), by set: librdkafka ≥ 2.4, the
# Java client ≥ 3.7, franz-go ≥ 1.19 (kgo.ServerSideBalancer); kafka-python and KafkaJS have no
# KIP-848 consumer
KIP848 = {"rdkafka": SETS["rdkafka"], "java": SETS["java"], "franz-go": ("franz-go",)}


def names(kinds: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(KINDS[kind][0] for kind in kinds)


def consumers(kinds: tuple[str, ...], *settings: str) -> Callable[[Run], list]:
    """Starters of one consumer of each kind, each in its own group of ``TOPIC``; a joiner
    of each (the same kind, group and settings) left in ``run.joiners`` for an act."""

    def clients(run: Run) -> list:
        found = []
        for kind in kinds:
            name, make = KINDS[kind]
            group = f"kmon-truth-{kind}"
            found.append(partial(make, name, run.cluster.bootstrap(), group, TOPIC,
                                 run.log(kind), *settings))
            run.joiners.append(partial(make, f"{name}, joining", run.cluster.bootstrap(),
                                       group, TOPIC, run.log(f"{kind}-joiner"), *settings))
        return found
    return clients


def topic(run: Run) -> None:
    """``TOPIC`` made (the broker's auto-creation) with messages in it."""
    produce(run.cluster.bootstrap(), TOPIC)


def join_and_leave(run: Run) -> None:
    """A second member joins each client's group, stays ``JOINED_S``, and leaves (stopped
    as its program ends: a LeaveGroup, or its session's end)."""
    joined = [joiner() for joiner in run.joiners]
    time.sleep(JOINED_S)
    stop_all([client.proc for client in joined], 15)


def rolling_restart(run: Run) -> None:
    """Each node stopped (SIGTERM, as an operator's restart does) and started again in turn,
    the next once the cluster names every node again."""
    for node in run.cluster.nodes:
        node.process.terminate()
        node.process.wait(60)
        run.cluster.start_node(node)
        run.cluster.wait_ready(120)
        time.sleep(2)
