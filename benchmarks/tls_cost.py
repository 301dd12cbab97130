"""What the TLS source costs: kmon's CPU with ``--tls auto`` vs ``off``, and the client's own
throughput unwatched, watched without and with the probes, side by side in one run.

    sudo python -m benchmarks tls_cost [--mb-per-s 60] [--seconds 8] [--rounds 2]
        [--clients confluent-kafka,kafkajs,franz-go]

Each client's producer pushes --mb-per-s over the real cluster's SSL listener (100 kB
messages, paced) and prints the bytes its broker acknowledged: confluent-kafka (OpenSSL
linked into its librdkafka, no kmon agent), KafkaJS (node's built-in OpenSSL; tests/node's
kafkajs), franz-go (Go's crypto/tls; tests/go's program, built here). Each round runs three
phases, each a producer started anew, of --seconds after a warm-up of WARM_UP_S: no kmon;
``kmon attach PID --json --tls off``; ``--tls auto``, kmon attached before the producer
connects. kmon's CPU is read from /proc/*/schedstat; the producer's throughput from its
delivery reports in the same window; the TLS source's drops from kmon's notices; the
sockets it named over TLS from kmon's last snapshot (none: the probes never opened, and
the phase measured nothing of them). Needs root and a JDK (and node, go for their clients).

This is the probes' worst case: they are on from the first connection's first TLS record
(kmon is watching before it) while one of the producer's sockets has carried no request that
decides its role (franz-go keeps one such socket open: 30 s at most, past the phase's end), a
trap per SSL_write and a tracepoint per write syscall. What kmon reads meanwhile
(``TlsTap.follow``): franz-go's ``Conn.Write`` names its own socket, so its write syscalls
are never recorded (~140 records a second left of ~640), and those to its sockets whose
role is known are not handed on (no header read, no flow updated); librdkafka (2.16)
closes its bootstrap connection before the source has read a request of it, which is not
taken for a failed login once another of its sockets carries a request past a login, so
the source closes once the producer's sockets are decided (it stayed on 30 s with every
thread read: ~2,300 records a second of its broker thread, and drops where a thread's ring
filled between two polls: the drops figure). Each round's phases are printed with the
host's load average: on a shared host the ratio of two fractions of a percent of a core
moves with it. A producer attached once at its steady state
may never be probed: its one busy socket's segments rarely start with a TLS record (loopback
sends 64 kB segments), so the wire may not see it speak TLS (0 sockets named over TLS, as
for confluent-kafka and KafkaJS in the first runs of this benchmark). No client compresses
(franz-go would snappy its batches by default, and these payloads shrink to nothing): every
byte counted goes through TLS. On a small host the brokers' TLS, not the client, may cap the
rate below --mb-per-s (2 cores: some 15-40 MB/s for either client): the figures say what
was reached.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.api import BenchmarkError, Result, UsageError
from benchmarks.helpers import REPO, cpu_seconds
from benchmarks.wire_cost import NODE_MODULES, Lines

WARM_UP_S = 4  # the producer connects, kmon's first polls open the probes: measured after
PHASES = ("unwatched", "tls off", "tls auto")
CLIENTS = ("confluent-kafka", "kafkajs", "franz-go")

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
            producer.produce(sys.argv[4], payload, on_delivery=delivered)
            sent += 1
        except BufferError:  # behind: the reports go on
            producer.poll(0.005)
            break
    producer.poll(0.002)
    if time.monotonic() - told >= 0.25:
        told = time.monotonic()
        print(f"ACKED {told:.3f} {acked[0]}", flush=True)
"""


# node KAFKAJS_PRODUCER BOOTSTRAP TOPIC CAFILE MB_PER_S: the same, batches of up to 16
# messages a send, 8 sends in flight at most
KAFKAJS_PRODUCER = """
const fs = require('fs');
const { Kafka, logLevel } = require('kafkajs');
const [bootstrap, topic, cafile, mbPerS] = process.argv.slice(2);
const kafka = new Kafka({ clientId: 'kmon-kafkajs-producer', brokers: bootstrap.split(','),
  ssl: { ca: [fs.readFileSync(cafile, 'utf-8')] }, logLevel: logLevel.NOTHING });
const producer = kafka.producer({ allowAutoTopicCreation: true });
const seconds = () => Number(process.hrtime.bigint()) / 1e9;  // CLOCK_MONOTONIC
const payload = Buffer.alloc(100000, 120);
const perSecond = Number(mbPerS) * 1e6 / payload.length;
let acked = 0, sent = 0, inFlight = 0;
(async () => {
  await producer.connect();
  console.log('READY');
  setInterval(() => console.log(`ACKED ${seconds().toFixed(3)} ${acked}`), 250);
  const started = seconds();
  setInterval(() => {
    const count = Math.min(Math.floor((seconds() - started) * perSecond) - sent, 16);
    if (count <= 0 || inFlight >= 8) return;  // behind: the acknowledgements go on
    sent += count;
    inFlight += 1;
    producer.send({ topic, messages: Array.from({ length: count }, () => ({ value: payload })) })
      .then(() => { acked += count * payload.length; }, () => {})
      .finally(() => { inFlight -= 1; });
  }, 2);
})();
"""


def producer_argv(client: str, bootstrap: str, mb_per_s: float, ca_file: str,
                  scratch: Path) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of ``client``'s producer (built in ``scratch``)."""
    topic = f"kmon-tls-bench-{client}"
    if client == "confluent-kafka":
        return [sys.executable, "-c", PRODUCER, bootstrap, str(mb_per_s), ca_file, topic], {}
    if client == "kafkajs":
        if not (NODE_MODULES / "kafkajs").is_dir() or shutil.which("node") is None:
            raise BenchmarkError("KafkaJS needs node and npm install --prefix tests/node")
        script = scratch / "producer.js"
        script.write_text(KAFKAJS_PRODUCER)
        return (["node", str(script), bootstrap, topic, ca_file, str(mb_per_s)],
                {"NODE_PATH": str(NODE_MODULES)})
    from kmon.devtools.client_programs import go_build

    if shutil.which("go") is None:
        raise BenchmarkError("franz-go needs go")
    binary = scratch / "kmon-go-consumer"
    built = go_build(REPO / "tests" / "go", binary)
    if built.returncode != 0:
        raise BenchmarkError(f"go build failed: {built.stderr[-500:]}")
    return [str(binary), "produce", bootstrap, topic, ca_file, str(mb_per_s)], {}


def acked(producer: Lines, since: float, until: float) -> float:
    """The producer's acknowledged MB/s between two monotonic instants (its own reports)."""
    points = [(float(t), int(b)) for _, t, b in
              (line.split() for line in list(producer.lines) if line.startswith("ACKED "))]
    inside = [p for p in points if since <= p[0] <= until]
    if len(inside) < 2:
        raise BenchmarkError("the producer reported too little: is the cluster up?")
    (t0, b0), (t1, b1) = inside[0], inside[-1]
    return (b1 - b0) / (t1 - t0) / 1e6


def phase(argv: list[str], env: dict[str, str], phase_name: str,
          seconds: float) -> dict[str, float]:
    """One phase, a producer of its own (``argv``), kmon attached before it connects: (kmon's
    share of a core, the producer's MB/s and share of a core, drops, sockets named over
    TLS, the host's load average at its end: other work on the host skews the figures)."""
    producer = Lines(["sh", "-c", 'read go; exec "$@"', "sh", *argv], env={**os.environ, **env})
    kmon = None
    try:
        if phase_name != "unwatched":
            kmon = Lines([sys.executable, "-m", "kmon", "attach", str(producer.proc.pid),
                          "--json", "--interval", "1s", "--any-process", "--tls",
                          phase_name.split()[1]])
            kmon.wait_for("{")
        producer.proc.stdin.write("go\n")
        producer.proc.stdin.flush()
        producer.wait_for("READY")
        time.sleep(WARM_UP_S)
        begun = time.monotonic()
        kmon_start = cpu_seconds(kmon.proc.pid) if kmon else 0.0
        client_start = cpu_seconds(producer.proc.pid)
        time.sleep(seconds)
        ended = time.monotonic()
        out = {"kmon": (cpu_seconds(kmon.proc.pid) - kmon_start) / (ended - begun)
               if kmon else 0.0,
               "client_cpu": (cpu_seconds(producer.proc.pid) - client_start) / (ended - begun),
               "mb_per_s": acked(producer, begun, ended), "drops": 0, "over_tls": 0,
               "load": os.getloadavg()[0]}
    finally:
        if kmon:
            kmon.stop()
        producer.stop()
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
    parser.add_argument("--clients", default=",".join(CLIENTS),
                        help=f"comma-separated, of {', '.join(CLIENTS)}")


def run(args: argparse.Namespace) -> Result:
    clients = [c for c in args.clients.split(",") if c]
    if not clients or set(clients) - set(CLIENTS):
        raise UsageError(f"--clients: a comma-separated list of {', '.join(CLIENTS)}")
    if os.geteuid() != 0:
        raise BenchmarkError("run as root (uprobes and the wire need it)")
    from kmon.devtools.kafka_cluster import ClusterError, KafkaCluster

    result = Result()
    try:
        cluster = KafkaCluster(brokers=1).start()
    except ClusterError as err:
        raise BenchmarkError(f"no real cluster: {err}") from err
    try:
        with tempfile.TemporaryDirectory(prefix="kmon-tls-cost-") as scratch:
            for client in clients:
                measure(client, cluster, args, Path(scratch), result)
    finally:
        cluster.stop()
    return result


def measure(client: str, cluster, args: argparse.Namespace, scratch: Path,
            result: Result) -> None:
    """One client's three phases, ``args.rounds`` times, into ``result`` (each figure named
    with the client)."""
    argv, env = producer_argv(client, cluster.bootstrap("SSL"), args.mb_per_s,
                              str(cluster.ca_file), scratch)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in PHASES}
    for round_ in range(args.rounds):
        for name in PHASES:
            runs[name].append(phase(argv, env, name, args.seconds))
            r = runs[name][-1]
            print(f"{client} round {round_ + 1} {name:10}  producer {r['mb_per_s']:6.1f} MB/s"
                  f"   kmon {r['kmon']:6.2%}   drops {r['drops']:.0f}   load {r['load']:.1f}",
                  flush=True)
    mean = {name: {key: sum(r[key] for r in rs) / len(rs) for key in rs[0]}
            for name, rs in runs.items()}
    print(f"{client} producer over TLS, paced at {args.mb_per_s:g} MB/s, {args.rounds} "
          f"round(s) of {args.seconds:g} s per phase")
    for name in PHASES:
        m = mean[name]
        print(f"{name:10}  producer {m['mb_per_s']:6.1f} MB/s ({m['client_cpu']:5.1%} of a core)"
              f"   kmon {m['kmon']:6.2%} of a core   TLS claims {m['over_tls']:.0f}"
              f"   drops {m['drops']:.0f}")
        result.figure(f"{client} producer MB/s, {name}", m["mb_per_s"], "MB/s")
        result.figure(f"{client} producer CPU, {name}", m["client_cpu"] * 100, "% of a core")
    for name in PHASES[1:]:
        result.figure(f"{client} kmon CPU, {name}", mean[name]["kmon"] * 100, "% of a core")
    result.figure(f"{client} TLS source drops", max(r["drops"] for r in runs["tls auto"]))
    result.figure(f"{client} sockets named over TLS", mean["tls auto"]["over_tls"])
    result.figure(f"{client} host load average (1 min)",
                  sum(mean[name]["load"] for name in PHASES) / len(PHASES))
    result.ratio(f"{client} kmon CPU tls auto / off", f"{client} kmon CPU, tls auto",
                 f"{client} kmon CPU, tls off")
    result.ratio(f"{client} producer MB/s probed / unwatched",
                 f"{client} producer MB/s, tls auto", f"{client} producer MB/s, unwatched")
