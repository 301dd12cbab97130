"""What the TLS source costs: kmon's CPU with ``--tls auto`` vs ``off``, and the client's own
throughput unwatched, watched without and with the probes, side by side in one run.

    sudo python -m benchmarks tls_cost [--mb-per-s 60] [--seconds 8] [--rounds 2]

A confluent-kafka producer (OpenSSL linked into its librdkafka, no kmon agent) pushes
--mb-per-s over the real cluster's SSL listener (100 kB messages, paced) and prints the
bytes its broker acknowledged. Each round runs three phases of --seconds after a warm-up
of WARM_UP_S: no kmon; ``kmon attach PID --json --tls off``; ``--tls auto``. kmon's CPU is
read from /proc/*/schedstat; the producer's throughput from its delivery reports in the
same window; the TLS source's drops from kmon's notices. Needs root and a JDK.

This is the steady state: the probes close once every TLS socket carried a request that
decides its role (the producer's first Produce, within the warm-up). While they are on, the
client pays a trap per SSL_write: with the probes kept on for a whole run (before they
closed), this producer used 9.2% -> 14.6% of a core and sent 0.91x its unwatched MB/s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from benchmarks.api import BenchmarkError, Result
from benchmarks.helpers import cpu_seconds
from benchmarks.wire_cost import Lines

WARM_UP_S = 3  # kmon's first polls open the wire and the probes: the steady state after
PHASES = ("unwatched", "tls off", "tls auto")

PRODUCER = """
import sys, time
from confluent_kafka import Producer
acked = [0]
def delivered(err, msg):
    if err is None:
        acked[0] += len(msg.value())
producer = Producer({"bootstrap.servers": sys.argv[1], "security.protocol": "SSL",
                     "ssl.ca.location": sys.argv[3], "linger.ms": 5,
                     "message.max.bytes": 2000000})
payload, per_second = b"x" * 100_000, float(sys.argv[2]) * 1e6 / 100_000
print("READY", flush=True)
started, sent, told = time.monotonic(), 0, 0.0
while True:
    due = int((time.monotonic() - started) * per_second)
    while sent < due:
        try:
            producer.produce("kmon-tls-bench", payload, on_delivery=delivered)
            sent += 1
        except BufferError:  # behind: the reports go on
            producer.poll(0.005)
            break
    producer.poll(0.002)
    if time.monotonic() - told >= 0.25:
        told = time.monotonic()
        print(f"ACKED {told:.3f} {acked[0]}", flush=True)
"""


def acked(producer: Lines, since: float, until: float) -> float:
    """The producer's acknowledged MB/s between two monotonic instants (its own reports)."""
    points = [(float(t), int(b)) for _, t, b in
              (line.split() for line in list(producer.lines) if line.startswith("ACKED "))]
    inside = [p for p in points if since <= p[0] <= until]
    if len(inside) < 2:
        raise BenchmarkError("the producer reported too little: is the cluster up?")
    (t0, b0), (t1, b1) = inside[0], inside[-1]
    return (b1 - b0) / (t1 - t0) / 1e6


def phase(producer: Lines, phase_name: str, seconds: float) -> dict[str, float]:
    """One phase: (kmon's share of a core, the producer's MB/s and share of a core, drops,
    sockets named over TLS)."""
    kmon = None
    if phase_name != "unwatched":
        kmon = Lines([sys.executable, "-m", "kmon", "attach", str(producer.proc.pid), "--json",
                      "--interval", "1s", "--any-process", "--tls",
                      phase_name.split()[1]])
        kmon.wait_for("{")
    try:
        time.sleep(WARM_UP_S)
        begun = time.monotonic()
        kmon_start = cpu_seconds(kmon.proc.pid) if kmon else 0.0
        client_start = cpu_seconds(producer.proc.pid)
        time.sleep(seconds)
        ended = time.monotonic()
        out = {"kmon": (cpu_seconds(kmon.proc.pid) - kmon_start) / (ended - begun)
               if kmon else 0.0,
               "client_cpu": (cpu_seconds(producer.proc.pid) - client_start) / (ended - begun),
               "mb_per_s": acked(producer, begun, ended), "drops": 0, "over_tls": 0}
    finally:
        if kmon:
            kmon.stop()
    for line in kmon.lines if kmon else []:
        if line.startswith("{"):
            (process,) = json.loads(line)["processes"]
            out["over_tls"] = sum("over TLS" in (row.get("detail") or "") for claims in
                                  [c["claims"] for c in process["connections"]] for row in claims)
            for notice in process["notices"]:
                if notice.startswith("the TLS source missed"):
                    out["drops"] = int(notice.split()[4].replace(",", ""))
    return out


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mb-per-s", type=float, default=60.0)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)


def run(args: argparse.Namespace) -> Result:
    if os.geteuid() != 0:
        raise BenchmarkError("run as root (uprobes and the wire need it)")
    from kmon.devtools.kafka_cluster import ClusterError, KafkaCluster

    result = Result()
    try:
        cluster = KafkaCluster(brokers=1).start()
    except ClusterError as err:
        raise BenchmarkError(f"no real cluster: {err}") from err
    try:
        producer = Lines([sys.executable, "-c", PRODUCER, cluster.bootstrap("SSL"),
                          str(args.mb_per_s), str(cluster.ca_file)])
        try:
            producer.wait_for("READY")
            time.sleep(3)
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in PHASES}
            for _ in range(args.rounds):
                for name in PHASES:
                    runs[name].append(phase(producer, name, args.seconds))
        finally:
            producer.stop()
    finally:
        cluster.stop()
    mean = {name: {key: sum(r[key] for r in rs) / len(rs) for key in rs[0]}
            for name, rs in runs.items()}
    print(f"producer over TLS, paced at {args.mb_per_s:g} MB/s, {args.rounds} round(s) of "
          f"{args.seconds:g} s per phase")
    for name in PHASES:
        m = mean[name]
        print(f"{name:10}  producer {m['mb_per_s']:6.1f} MB/s ({m['client_cpu']:5.1%} of a core)"
              f"   kmon {m['kmon']:6.2%} of a core   TLS claims {m['over_tls']:.0f}"
              f"   drops {m['drops']:.0f}")
        result.figure(f"producer MB/s, {name}", m["mb_per_s"], "MB/s")
        result.figure(f"producer CPU, {name}", m["client_cpu"] * 100, "% of a core")
    result.figure("kmon CPU, tls off", mean["tls off"]["kmon"] * 100, "% of a core")
    result.figure("kmon CPU, tls auto", mean["tls auto"]["kmon"] * 100, "% of a core")
    result.figure("TLS source drops", max(r["drops"] for r in runs["tls auto"]))
    result.ratio("kmon CPU tls auto / off", "kmon CPU, tls auto", "kmon CPU, tls off")
    result.ratio("producer MB/s probed / unwatched", "producer MB/s, tls auto",
                 "producer MB/s, unwatched")
    return result
