"""What the wire source costs and what it buys: kmon's CPU with ``--wire auto`` vs ``off``
on a busy producer, and the time from attach to every role at confidence 1.0.

    sudo python -m benchmarks wire_cost [--mb-per-s 60] [--seconds 8] [--rounds 2]

1. A confluent-kafka producer pushes --mb-per-s over loopback to the embedded
   cluster (100 kB messages, paced). ``kmon attach PID --json`` runs beside it for
   --seconds with the wire off, then on, alternately (--rounds each), after a warm-up
   of WARM_UP_S (its CPU then is shown apart: the wire learns the brokers in its first
   polls); kmon's CPU is read from /proc/*/schedstat, and the packets the kernel
   dropped from its notices.
2. Uninstrumented consumers (confluent-kafka, kcat -G, kafka-python, KafkaJS where
   installed) are started under a shell that execs them once kmon is attached; the
   time until every socket shows its role at 1.0 is printed, next to the best
   confidence the same sockets reach with the wire off in the same time.
Needs root (CAP_NET_RAW) for the wire.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from benchmarks.api import BenchmarkError, Result
from benchmarks.helpers import REPO, cpu_seconds

WARM_UP_S = 5  # the wire's first polls learn the brokers: its steady state starts after
NODE_MODULES = REPO / "tests" / "node" / "node_modules"

PRODUCER = """
import sys, time
from confluent_kafka import Producer
producer = Producer({"bootstrap.servers": sys.argv[1], "linger.ms": 5,
                     "message.max.bytes": 2000000})
payload, per_second = b"x" * 100_000, float(sys.argv[2]) * 1e6 / 100_000
print("READY", flush=True)
started, sent = time.monotonic(), 0
while True:
    due = int((time.monotonic() - started) * per_second)
    while sent < due:
        try:
            producer.produce("kmon-wire-bench", payload)
            sent += 1
        except BufferError:
            producer.poll(0.005)
    producer.poll(0.002)
"""
KAFKA_PYTHON = """
import sys
from kafka import KafkaConsumer
for _ in KafkaConsumer(sys.argv[3], bootstrap_servers=sys.argv[1].split(","),
                       group_id=sys.argv[2], api_version=(2, 0, 0)):
    pass
"""
KAFKAJS = """
const { Kafka, logLevel } = require('kafkajs');
const kafka = new Kafka({ brokers: process.argv[2].split(','), logLevel: logLevel.NOTHING });
const consumer = kafka.consumer({ groupId: process.argv[3] });
(async () => { await consumer.connect();
  await consumer.subscribe({ topic: process.argv[4], fromBeginning: true });
  await consumer.run({ eachMessage: async () => {} }); })();
"""


class Lines:
    """A child's stdout lines, read in the background."""

    def __init__(self, argv: list[str], **kwargs) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, **kwargs)
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True).start()

    def wait_for(self, prefix: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not any(line.startswith(prefix) for line in self.lines):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"{self.proc.args[:3]} never printed {prefix!r}")
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def attach(pid: int, wire: str) -> Lines:
    return Lines([sys.executable, "-m", "kmon", "attach", str(pid), "--json", "--interval",
                  "1s", "--any-process", "--wire", wire])


def kmon_cpu(pid: int, wire: str, seconds: float) -> tuple[float, float, int]:
    """(kmon's share of a core for ``seconds`` after the warm-up, its CPU seconds in the
    warm-up, packets dropped)."""
    kmon = attach(pid, wire)
    try:
        kmon.wait_for("{")
        attached = cpu_seconds(kmon.proc.pid)
        time.sleep(WARM_UP_S)
        start, begun = cpu_seconds(kmon.proc.pid), time.monotonic()
        time.sleep(seconds)
        share = (cpu_seconds(kmon.proc.pid) - start) / (time.monotonic() - begun)
    finally:
        kmon.stop()
    drops = 0
    for line in kmon.lines:
        if line.startswith("{"):
            for notice in json.loads(line)["processes"][0]["notices"]:
                if notice.startswith("the wire missed"):
                    drops = int(notice.split()[3].replace(",", ""))
    return share, start - attached, drops


def cpu_figures(cluster: str, mb_per_s: float, seconds: float, rounds: int,
                result: Result) -> None:
    producer = Lines([sys.executable, "-c", PRODUCER, cluster, str(mb_per_s)])
    try:
        producer.wait_for("READY")
        time.sleep(2)
        load, loaded = cpu_seconds(producer.proc.pid), time.monotonic()
        results: dict[str, list[tuple[float, float, int]]] = {"off": [], "auto": []}
        for _ in range(rounds):
            for wire in ("off", "auto"):
                results[wire].append(kmon_cpu(producer.proc.pid, wire, seconds))
        producer_share = (cpu_seconds(producer.proc.pid) - load) / (time.monotonic() - loaded)
    finally:
        producer.stop()
    off, on = (sum(r[0] for r in results[w]) / rounds for w in ("off", "auto"))
    warm_off, warm_on = (sum(r[1] for r in results[w]) / rounds * 1000 for w in ("off", "auto"))
    drops = max(r[2] for r in results["auto"])
    print(f"producer at {mb_per_s:g} MB/s over loopback ({producer_share:.0%} of a core)")
    print(f"kmon --wire off : {off:7.3%} of a core (baseline)      "
          f"first {WARM_UP_S} s: {warm_off:5.1f} ms of CPU")
    print(f"kmon --wire auto: {on:7.3%} of a core  ratio {on / off:.2f}x  "
          f"first {WARM_UP_S} s: {warm_on:5.1f} ms of CPU")
    print(f"wire's extra: {on - off:+.3%} of a core; packets dropped {drops}")
    result.figure("kmon --wire off", off * 100, "% of a core")
    result.figure("kmon --wire auto", on * 100, "% of a core")
    result.figure("packets dropped", drops)
    result.ratio("wire auto / off", "kmon --wire auto", "kmon --wire off")


def consumers(cluster: str, topic: str) -> dict[str, list[str]]:
    out = {"confluent-kafka": [sys.executable, "-m", "kmon.devtools.workload", "consumer",
                               cluster, "--topic", topic]}
    if shutil.which("kcat"):
        out["kcat -G"] = ["kcat", "-b", cluster, "-G", f"g-{uuid.uuid4().hex[:6]}", "-q", topic]
    try:
        import kafka  # noqa: F401

        out["kafka-python"] = [sys.executable, "-c", KAFKA_PYTHON, cluster,
                               f"g-{uuid.uuid4().hex[:6]}", topic]
    except ImportError:
        pass
    if (NODE_MODULES / "kafkajs").is_dir() and shutil.which("node"):
        script = Path(f"/tmp/kmon-bench-{os.getpid()}.js")
        script.write_text(KAFKAJS)
        out["KafkaJS"] = ["node", str(script), cluster, f"g-{uuid.uuid4().hex[:6]}", topic]
    return out


def time_to_roles(argv: list[str], wire: str, limit_s: float = 30) -> tuple[float | None, float]:
    """(seconds from the client's start to every socket at 1.0, or None; the least confidence
    of its sockets when that happened or at the limit)."""
    client = Lines(["sh", "-c", 'read go; exec "$@"', "sh", *argv],
                   env={**os.environ, "NODE_PATH": str(NODE_MODULES)})
    kmon = Lines([sys.executable, "-m", "kmon", "attach", str(client.proc.pid), "--json",
                  "--interval", "250ms", "--any-process", "--wire", wire])
    try:
        kmon.wait_for("{")
        client.proc.stdin.write("go\n")
        client.proc.stdin.flush()
        started, seen, least = time.monotonic(), len(kmon.lines), 0.0
        while time.monotonic() - started < limit_s:
            time.sleep(0.05)
            for line in kmon.lines[seen:]:
                rows = json.loads(line)["processes"][0]["connections"]
                least = min((r["confidence"] for r in rows), default=0.0)
                if rows and least == 1.0 and any(r["role"] == "coordinator" for r in rows) \
                        and all(r["broker_id"] is not None for r in rows):
                    return time.monotonic() - started, least
            seen = len(kmon.lines)
        return None, least
    finally:
        kmon.stop()
        client.stop()


def role_figures(cluster: str) -> None:
    from confluent_kafka import Producer

    topic = f"kmon-wire-bench-{uuid.uuid4().hex[:6]}"
    producer = Producer({"bootstrap.servers": cluster})
    for i in range(10):
        producer.produce(topic, f"m{i}".encode())
    producer.flush(10)
    for name, argv in consumers(cluster, topic).items():
        with_wire, _ = time_to_roles(argv, "auto")
        without, least = time_to_roles(argv, "off", limit_s=with_wire + 5 if with_wire else 30)
        shown = f"{with_wire:.1f} s" if with_wire is not None else "not within 30 s"
        other = (f"{without:.1f} s" if without is not None
                 else f"never (least confidence {least:.2f})")
        print(f"{name:16} every role at 1.0: wire {shown:>8}   without the wire: {other}")


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mb-per-s", type=float, default=60.0)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)


def run(args: argparse.Namespace) -> Result:
    if os.geteuid() != 0:
        raise BenchmarkError("run as root (the wire needs CAP_NET_RAW)")
    result = Result()
    cluster = Lines([sys.executable, "-m", "kmon", "devcluster", "--brokers", "3"])
    try:
        cluster.wait_for("127.0.0.1:")
        bootstrap = next(line for line in cluster.lines if line.startswith("127.0.0.1:")).strip()
        cpu_figures(bootstrap, args.mb_per_s, args.seconds, args.rounds, result)
        role_figures(bootstrap)
    finally:
        cluster.stop()
    return result
