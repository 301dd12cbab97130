"""A real Kafka client process for kmon's tests, driven through stdin.

Usage: python clientproc.py KIND BOOTSTRAP [options]; KIND is producer,
consumer or admin. It prints ``READY`` once its connections are up, then
obeys one command per line: ``produce N``, ``stats`` (prints ``STATS <json>``,
its own latest librdkafka statistics, seen through its own stats_cb),
``exit``. It keeps serving the client (poll) in between.
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import threading
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("kind", choices=("producer", "consumer", "admin"))
    p.add_argument("bootstrap")
    p.add_argument("--instrument", action="store_true", help="use kmon.agent.instrument")
    p.add_argument("--topic", default="kmon-test")
    p.add_argument("--group", default="kmon-test-group")
    p.add_argument("--idle-ms", type=int, default=None, help="connections.max.idle.ms")
    p.add_argument("-X", dest="extra", action="append", default=[], help="key=value")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    latest: dict = {}

    def own_stats_cb(stats_json: str) -> None:
        latest["stats"] = json.loads(stats_json)

    conf: dict = {"bootstrap.servers": args.bootstrap, "statistics.interval.ms": 500,
                  "stats_cb": own_stats_cb, "client.id": f"kmon-test-{args.kind}"}
    if args.idle_ms is not None:
        conf["connections.max.idle.ms"] = args.idle_ms
    for item in args.extra:
        key, _, value = item.partition("=")
        conf[key] = value
    if args.kind == "consumer":
        conf.update({"group.id": args.group, "auto.offset.reset": "earliest"})
    if args.instrument:
        from kmon.agent import instrument

        conf = instrument(conf, client_type=args.kind)

    commands: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [commands.put(line.strip()) for line in sys.stdin],
                     daemon=True).start()

    producer = consumer = admin = None
    if args.kind == "producer":
        producer = Producer(conf)
        producer.produce(args.topic, b"hello")
        producer.flush(10)
    elif args.kind == "consumer":
        seed = Producer({"bootstrap.servers": args.bootstrap})
        seed.produce(args.topic, b"seed")  # the mock cluster creates topics on first produce
        seed.flush(10)
        del seed
        consumer = Consumer(conf)
        consumer.subscribe([args.topic])
    else:
        admin = AdminClient(conf)
        admin.list_topics(timeout=10)

    def serve(seconds: float) -> None:
        if consumer is not None:
            consumer.poll(seconds)
        elif producer is not None:
            producer.poll(seconds)
        else:
            admin.poll(seconds)

    def ready() -> bool:
        """Settled: connections up, none half-open, a consumer on every broker it needs."""
        stats = latest.get("stats")
        if not stats:
            return False
        brokers = list(stats["brokers"].values())
        if any(b["state"] not in ("UP", "INIT", "DOWN") for b in brokers):
            return False
        if consumer is not None:
            assigned = consumer.assignment()
            partitions = stats.get("topics", {}).get(args.topic, {}).get("partitions", {})
            leaders = {partitions.get(str(tp.partition), {}).get("leader", -1) for tp in assigned}
            up = {b["nodeid"] for b in brokers if b["source"] == "learned" and b["state"] == "UP"}
            coordinator = stats["brokers"].get("GroupCoordinator", {})
            return (coordinator.get("state") == "UP" and bool(assigned)
                    and -1 not in leaders and leaders <= up)
        return any(b["state"] == "UP" for b in brokers)

    deadline = time.monotonic() + 30
    while not ready():
        if time.monotonic() > deadline:
            sys.exit("client never became ready")
        serve(0.1)
    print("READY", flush=True)
    while True:
        serve(0.1)
        try:
            command = commands.get_nowait()
        except queue.Empty:
            continue
        if command == "exit" or command == "":
            break
        if command.startswith("produce") and producer is not None:
            for _ in range(int(command.split()[1])):
                producer.produce(args.topic, b"x" * 100)
            producer.flush(10)
            print("PRODUCED", flush=True)
        elif command == "stats":
            print("STATS " + json.dumps(latest.get("stats")), flush=True)
    if consumer is not None:
        consumer.close()


if __name__ == "__main__":
    main()
