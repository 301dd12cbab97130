"""A small real Kafka client workload, for ``kmon demo`` and kmon's tests.

``python -m kmon.devtools.workload KIND BOOTSTRAP [options]``; KIND is producer,
consumer, admin, or both (a consumer and a producer in one process, so that
several sockets lead to each broker). It prints ``READY`` once its
connections are settled, produces every ``--produce-every`` seconds if
asked, and obeys one command per line on stdin: ``produce N``, ``stats``
(prints ``STATS <json>``: ``{instance name: latest statistics}`` as its own
stats_cb saw them), ``exit``.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

SETTLED_STATES = ("UP", "INIT", "DOWN")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m kmon.devtools.workload")
    p.add_argument("kind", choices=("producer", "consumer", "admin", "both"))
    p.add_argument("bootstrap")
    p.add_argument("--instrument", action="store_true", help="use kmon.agent.instrument")
    p.add_argument("--topic", default="kmon-workload")
    p.add_argument("--client-id", default=None, help="default: kmon-workload-KIND")
    p.add_argument("--group", default=f"kmon-test-group-{os.getpid()}")
    p.add_argument("--idle-ms", type=int, default=None, help="connections.max.idle.ms")
    p.add_argument("--produce-every", type=float, default=0.0, metavar="SECONDS",
                   help="produce one message this often (0: only on command)")
    p.add_argument("-X", dest="extra", action="append", default=[], help="key=value")
    p.add_argument("--config", type=Path, default=None, metavar="FILE",
                   help="a properties file of more client settings (credentials stay off "
                        "the command line)")
    return p.parse_args()


class Clients:
    """The process's clients and the latest statistics each one reported."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.latest: dict[str, dict] = {}
        self.producer = self.consumer = self.admin = None
        if args.kind in ("consumer", "both"):
            seed = Producer({"bootstrap.servers": args.bootstrap, **self.extra()})
            seed.produce(args.topic, b"seed")  # the mock cluster creates topics on first produce
            seed.flush(10)
            del seed
            self.consumer = Consumer(self.conf("consumer", {"group.id": args.group,
                                                           "auto.offset.reset": "earliest"}))
            self.consumer.subscribe([args.topic])
        if args.kind in ("producer", "both"):
            self.producer = Producer(self.conf("producer"))
            self.producer.produce(args.topic, b"hello", partition=0)
            self.producer.flush(10)
        if args.kind == "admin":
            self.admin = AdminClient(self.conf("admin"))
            self.admin.list_topics(timeout=10)

    def conf(self, kind: str, more: dict | None = None) -> dict:
        def own_stats_cb(stats_json: str) -> None:
            stats = json.loads(stats_json)
            self.latest[stats["name"]] = stats

        conf = {"bootstrap.servers": self.args.bootstrap, "statistics.interval.ms": 500,
                "stats_cb": own_stats_cb,
                "client.id": self.args.client_id or f"kmon-workload-{kind}", **(more or {})}
        if self.args.idle_ms is not None:
            conf["connections.max.idle.ms"] = self.args.idle_ms
        conf.update(self.extra())
        if self.args.instrument:
            from kmon.agent import instrument

            conf = instrument(conf, client_type=kind)
        return conf

    def extra(self) -> dict[str, str]:
        """The --config file's and -X properties (security settings reach the seeding
        producer too)."""
        lines = self.args.config.read_text().splitlines() if self.args.config else []
        return dict(item.partition("=")[::2] for item in lines + self.args.extra
                    if item.strip() and not item.startswith("#"))

    def serve(self, seconds: float) -> None:
        if self.consumer is not None:
            self.consumer.poll(seconds)
        for client in (self.producer, self.admin):
            if client is not None:
                client.poll(0 if self.consumer is not None else seconds)

    def ready(self) -> bool:
        """Settled: connections up, none half-open, a consumer on every leader it needs."""
        expected = sum(c is not None for c in (self.producer, self.consumer, self.admin))
        if len(self.latest) < expected:
            return False
        for stats in self.latest.values():
            brokers = list(stats["brokers"].values())
            if any(b["state"] not in SETTLED_STATES for b in brokers):
                return False
            if not any(b["state"] == "UP" for b in brokers):
                return False
            if stats["type"] == "consumer" and not self.consumer_settled(stats):
                return False
        return True

    def consumer_settled(self, stats: dict) -> bool:
        if self.consumer is None:  # a consumer's statistics, but no consumer yet
            return False
        assigned = self.consumer.assignment()
        partitions = stats.get("topics", {}).get(self.args.topic, {}).get("partitions", {})
        leaders = {partitions.get(str(tp.partition), {}).get("leader", -1) for tp in assigned}
        up = {b["nodeid"] for b in stats["brokers"].values()
              if b["source"] == "learned" and b["state"] == "UP"}
        coordinator = stats["brokers"].get("GroupCoordinator", {})
        # a member the group left without partitions is settled once its group is steady
        joined = bool(assigned) or stats.get("cgrp", {}).get("join_state") == "steady"
        return (coordinator.get("state") == "UP" and joined
                and -1 not in leaders and leaders <= up)


def main() -> None:
    args = parse_args()
    clients = Clients(args)
    commands: queue.Queue[str] = queue.Queue()

    def read_commands() -> None:
        for line in sys.stdin:
            commands.put(line.strip())

    threading.Thread(target=read_commands, daemon=True).start()

    deadline = time.monotonic() + 60
    while not clients.ready():
        if time.monotonic() > deadline:
            sys.exit(f"kmon workload: {args.kind} never settled on {args.bootstrap}")
        clients.serve(0.1)
    print("READY", flush=True)
    next_produce = time.monotonic() + args.produce_every
    while True:
        clients.serve(0.1)
        if args.produce_every and clients.producer and time.monotonic() >= next_produce:
            clients.producer.produce(args.topic, b"tick")
            next_produce += args.produce_every
        try:
            command = commands.get_nowait()
        except queue.Empty:
            continue
        if command in ("exit", ""):
            break
        if command.startswith("produce") and clients.producer is not None:
            for _ in range(int(command.split()[1])):
                clients.producer.produce(args.topic, b"x" * 100, partition=0)
            clients.producer.flush(10)
            print("PRODUCED", flush=True)
        elif command == "stats":
            print("STATS " + json.dumps(clients.latest), flush=True)
    if clients.consumer is not None:
        clients.consumer.close()


if __name__ == "__main__":
    main()
