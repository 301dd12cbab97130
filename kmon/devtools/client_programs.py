"""Real Kafka client programs of other libraries than librdkafka, as kmon's tests and its
ground-truth harness (benchmarks/truth/) start them: kafka-python and KafkaJS group
consumers, the Apache Kafka Java client (kafka-clients from Maven Central) running a
program compiled once, and a Go program built with ``go build``.

The Java, Go and Node sources live in the repository's ``tests/`` (``java/``, ``go/``,
``node/``); the functions here take their paths.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from kmon.devtools import maven_jars

# kafka-clients from Maven Central with slf4j-simple for its log (slf4j-api declared first, so
# that the binding's own slf4j version wins)
JAVA_CLIENTS = {
    "4.4.0": ("org.slf4j:slf4j-api:2.0.17", "org.apache.kafka:kafka-clients:4.4.0",
              "org.slf4j:slf4j-simple:2.0.17"),
    "3.9.1": ("org.apache.kafka:kafka-clients:3.9.1", "org.slf4j:slf4j-simple:1.7.36"),
}

# python -c KAFKA_PYTHON_CONSUMER BOOTSTRAP GROUP TOPIC: prints READY, then consumes
KAFKA_PYTHON_CONSUMER = """
import sys
from kafka import KafkaConsumer
consumer = KafkaConsumer(sys.argv[3], bootstrap_servers=sys.argv[1].split(","),
                         group_id=sys.argv[2], client_id="kmon-kafka-python",
                         api_version=(2, 0, 0))
print("READY", flush=True)
for _ in consumer:
    pass
"""

# node SCRIPT BOOTSTRAP GROUP TOPIC [CAFILE] (NODE_PATH set to the node_modules holding
# kafkajs): over TLS, trusting CAFILE's CA, when it is given
KAFKAJS_CONSUMER = """
const { Kafka, logLevel } = require('kafkajs');
const ca = process.argv[5];
const kafka = new Kafka({ clientId: 'kmon-kafkajs', brokers: process.argv[2].split(','),
                          ssl: ca ? { ca: [require('fs').readFileSync(ca, 'utf-8')] } : undefined,
                          logLevel: logLevel.NOTHING });
const consumer = kafka.consumer({ groupId: process.argv[3] });
(async () => {
  await consumer.connect();
  await consumer.subscribe({ topic: process.argv[4], fromBeginning: true });
  await consumer.run({ eachMessage: async () => {} });
  console.log('READY');
})();
"""


def java_jars(version: str) -> str:
    """The classpath of a kafka-clients release (``JAVA_CLIENTS``), fetched with Maven once
    into kmon's cache and reused after; raises ``maven_jars.JarsUnavailable``."""
    return maven_jars.classpath(maven_jars.resolved_jars(f"clients-{version}",
                                                         JAVA_CLIENTS[version]))


def compile_java(program: Path, jars: str, into: Path) -> str:
    """``program`` compiled against ``jars`` into ``into``; the classpath that runs it (the
    source launcher would compile it again at every start)."""
    subprocess.run(["javac", "-nowarn", "-cp", jars, "-d", str(into), str(program)],
                   check=True, capture_output=True, timeout=120)
    return f"{into}:{jars}"


def go_build(source: Path, binary: Path) -> subprocess.CompletedProcess:
    """``go build`` of the Go program in ``source`` to ``binary`` (the module and build caches
    reused; the modules from the Go module proxy as go.sum pins them)."""
    return subprocess.run(["go", "build", "-o", str(binary), "."], cwd=source,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "GOFLAGS": "-mod=mod"})


def produce(bootstrap: str, topic: str, count: int = 20) -> None:
    """``count`` messages to ``topic`` (made by the broker's auto-creation if need be)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, f"m{i}".encode())
    producer.flush(10)
