"""The real clients a scenario runs: confluent-kafka through kmon's workload (plain, or with
kmon's agent) and kcat, each with librdkafka's debug log in a file; and group consumers of
other libraries (kmon.devtools.client_programs): kafka-python, KafkaJS and franz-go, whose
roles the packets tell, and the Java client (its JVM open to kmon's JMX helper, or closed to
it), whose NetworkClient DEBUG log names each connection's node (java_client_log)."""

from __future__ import annotations

import functools
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from kmon.devtools import client_programs
from kmon.devtools.children import stop_all

DEBUG = "broker,protocol,cgrp"


@dataclass
class Client:
    """One client process: its name in the table, its process and its log."""

    name: str
    proc: subprocess.Popen
    log: Path
    started_ms: float = 0.0  # when it was started (epoch ms): its first SYN is the next

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        stop_all([self.proc], 10)


def workload(name: str, kind: str, bootstrap: str, log: Path, *args: str,
             instrument: bool = False, ready: bool = True,
             wrapper: tuple[str, ...] = ()) -> Client:
    """``python -m kmon.devtools.workload KIND`` with librdkafka's debug log in ``log``;
    returns once it is READY (its connections settled), or with ``ready=False`` once it
    has logged its first connect (a client that cannot settle). ``wrapper``: a command that
    runs the workload's command line after it, in its place."""
    argv = [*wrapper, sys.executable, "-m", "kmon.devtools.workload", kind, bootstrap,
            "-X", f"debug={DEBUG}", *args, *(["--instrument"] if instrument else [])]
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=out, text=True)
    client = Client(name, proc, log)
    if not ready:
        wait_logged(client, r"Connecting to")
        return client
    return wait_ready(client)


def wait_ready(client: Client, seconds: float = 90) -> Client:
    """The client, once it printed a line starting READY (stopped if it never does)."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in client.proc.stdout],
                     daemon=True).start()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if lines.get(timeout=0.5).startswith("READY"):
                return client
        except queue.Empty:
            if client.proc.poll() is not None:
                break
    client.stop()
    raise RuntimeError(f"{client.name} never got READY (see {client.log})")


def program(name: str, argv: list[str], log: Path, env: dict[str, str] | None = None) -> Client:
    """A client program that prints READY once it has joined its group (stdin held open:
    the Java and Go programs leave when it closes), its stderr in ``log``."""
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=out, text=True, env=env)
    return wait_ready(Client(name, proc, log), 120)


def kafka_python(name: str, bootstrap: str, group: str, topic: str, log: Path) -> Client:
    return program(name, [sys.executable, "-c", client_programs.KAFKA_PYTHON_CONSUMER,
                          bootstrap, group, topic], log)


def kafkajs(name: str, bootstrap: str, group: str, topic: str, log: Path) -> Client:
    script = log.with_suffix(".js")
    script.write_text(client_programs.KAFKAJS_CONSUMER)
    return program(name, ["node", str(script), bootstrap, group, topic], log,
                   {**os.environ, "NODE_PATH": str(TESTS / "node" / "node_modules")})


# slf4j-simple: NetworkClient at DEBUG (each connection's node id), times to the millisecond
JAVA_LOG = [f"-Dorg.slf4j.simpleLogger.{key}" for key in (
    "log.org.apache.kafka.clients.NetworkClient=debug", "showDateTime=true",
    "dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSSXXX")]


def java(name: str, bootstrap: str, group: str, topic: str, log: Path, *settings: str,
         jmx: bool = True, version: str = "4.4.0") -> Client:
    """KafkaClientProgram's consumer, its NetworkClient DEBUG log in ``log`` (kmon is never
    given it); ``jmx=False``: its JVM refuses the attach API (kmon's JMX helper cannot read
    it). ``settings``: ``key=value`` client properties."""
    jvm = [] if jmx else ["-XX:+DisableAttachMechanism"]
    properties = [arg for setting in settings for arg in ("-X", setting)]
    return program(name, ["java", "-XX:TieredStopAtLevel=1", *jvm, *JAVA_LOG,
                          "-cp", java_classpath(version),
                          JAVA_PROGRAM.stem, "consumer", bootstrap, "--group", group,
                          "--topic", topic, *properties], log)


def franz_go(name: str, bootstrap: str, group: str, topic: str, log: Path,
             *settings: str) -> Client:
    """tests/go's franz-go consumer; ``settings``: ``group.protocol=consumer`` alone (a
    KIP-848 group: kgo.ServerSideBalancer)."""
    protocol = [f"-group-protocol={value}" for key, _, value in map(
        lambda setting: setting.partition("="), settings) if key == "group.protocol"]
    if len(protocol) != len(settings):
        raise ValueError(f"franz-go takes group.protocol only, not {settings}")
    return program(name, [go_binary(), *protocol, "franz-go", bootstrap, group, topic], log)


TESTS = Path(__file__).resolve().parents[2] / "tests"
JAVA_PROGRAM = TESTS / "java" / "KafkaClientProgram.java"


@functools.cache
def java_classpath(version: str) -> str:
    """KafkaClientProgram compiled against ``version``'s jars, once a run."""
    jars = client_programs.java_jars(version)
    return client_programs.compile_java(JAVA_PROGRAM, jars,
                                        Path(tempfile.mkdtemp(prefix="kmon-truth-java-")))


@functools.cache
def go_binary() -> str:
    """tests/go's program, built once a run."""
    binary = Path(tempfile.mkdtemp(prefix="kmon-truth-go-")) / "kmon-go-consumer"
    result = client_programs.go_build(TESTS / "go", binary)
    if result.returncode != 0:
        raise RuntimeError(f"go build failed: {result.stderr.strip()[-300:]}")
    return str(binary)


PER_MESSAGE = """
import sys, time
from confluent_kafka import Producer
while True:
    producer = Producer({"bootstrap.servers": sys.argv[1], "debug": "broker",
                         "client.id": "kmon-truth-per-message"})
    producer.produce("kmon-workload", b"one message, one client")
    producer.flush(5)
    del producer
    time.sleep(0.5)
"""


def per_message(name: str, bootstrap: str, log: Path) -> Client:
    """A client made, used for one message and dropped, over and over (its connections with
    it): the "client per message" anti-pattern."""
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-c", PER_MESSAGE, bootstrap],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=out)
    client = Client(name, proc, log)
    wait_logged(client, r"Connecting to")
    return client


BURSTS = """
import sys
from confluent_kafka import Producer

def one():
    producer = Producer({"bootstrap.servers": sys.argv[1], "debug": "broker",
                         "client.id": "kmon-truth-burst"})
    producer.produce("kmon-workload", b"one message, one client")
    producer.flush(10)

one()
print("READY", flush=True)
for line in sys.stdin:
    count = int(line.split()[1])
    for n in range(1, count + 1):
        one()
        print(f"DONE {n}", file=sys.stderr, flush=True)
"""


def bursts(name: str, bootstrap: str, log: Path) -> Client:
    """A client per message on demand: ``burst N`` on its stdin makes N producers one after
    another, each dropped after its message (its log says ``DONE n`` after the n-th)."""
    return program(name, [sys.executable, "-c", BURSTS, bootstrap], log)


def kcat_producer(name: str, bootstrap: str, topic: str, log: Path) -> Client:
    """An idle ``kcat -P`` (its stdin held open): it connects and waits for messages."""
    with open(log, "w") as out:
        proc = subprocess.Popen(["kcat", "-P", "-b", bootstrap, "-t", topic, "-d", "broker"],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=out)
    client = Client(name, proc, log)
    wait_logged(client, r"Broker changed state \S+ -> UP")
    time.sleep(2)  # its metadata answered, its broker connections opened
    return client


def wait_logged(client: Client, pattern: str, seconds: float = 30) -> None:
    """Until the client's log has a line matching ``pattern``."""
    deadline = time.monotonic() + seconds
    while not re.search(pattern, client.log.read_text(errors="replace")):
        if time.monotonic() > deadline or client.proc.poll() is not None:
            client.stop()
            raise RuntimeError(f"{client.name} never logged {pattern!r} (see {client.log})")
        time.sleep(0.2)
