"""The real clients a scenario runs, each with its own debug log (librdkafka's, to a file):
confluent-kafka through kmon's workload (plain, or with kmon's agent) and kcat."""

from __future__ import annotations

import queue
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from kmon.devtools.children import stop_all

DEBUG = "broker,protocol,cgrp"


@dataclass
class Client:
    """One client process: its name in the table, its process and its log."""

    name: str
    proc: subprocess.Popen
    log: Path

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
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout],
                     daemon=True).start()
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if lines.get(timeout=0.5).startswith("READY"):
                return client
        except queue.Empty:
            if proc.poll() is not None:
                break
    client.stop()
    raise RuntimeError(f"{name} never got READY (see {log})")


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
