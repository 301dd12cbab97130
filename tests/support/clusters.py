"""Kafka clusters and clients: Java, client programs, a real client's own view of a cluster."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kmon.devtools.client_programs import JAVA_CLIENTS, KAFKA_PYTHON_CONSUMER, produce
from kmon.evidence.java_log_nodes import NodeTable
from kmon.sources.jvm.java_log import LogFollower

__all__ = ["JAVA_VERSIONS", "require_java", "debug_log_options", "KAFKA_PYTHON_CONSUMER",
           "PER_MESSAGE", "produce", "cluster_id", "log_table"]

JAVA_VERSIONS = tuple(JAVA_CLIENTS)  # the kafka-clients releases tested


def require_java() -> None:
    if shutil.which("java") is None:
        pytest.skip("java (a JDK 17+) is not installed: a real Kafka cluster needs it")


def debug_log_options(log: Path) -> list[str]:
    """slf4j-simple's system properties for a DEBUG log with ISO times in ``log``."""
    prefix = "-Dorg.slf4j.simpleLogger."
    return [f"{prefix}logFile={log}", f"{prefix}defaultLogLevel=debug",
            f"{prefix}showDateTime=true", f"{prefix}dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSSXXX"]


PER_MESSAGE = """
import sys, time
from confluent_kafka import Producer
while True:
    producer = Producer({"bootstrap.servers": sys.argv[1]})
    producer.produce("kmon-churn", b"one message, one client")
    producer.flush(5)
    del producer
    print("SENT", flush=True)
    time.sleep(0.2)
"""


def cluster_id(bootstrap: str) -> str:
    """The cluster's id, as a real client's Metadata answer gives it (not kmon's query)."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).cluster_id


def log_table(log: Path) -> NodeTable:
    """A Java client's log file, read from its start and folded into its node table."""
    table = NodeTable()
    for event in LogFollower(log, from_start=True).poll():
        table.apply(event)
    return table
