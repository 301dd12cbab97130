"""``kmon record`` and ``kmon analyze`` on a real Apache Kafka cluster: broker idle reaps and a
killed broker, as real confluent-kafka clients live them.

A two-node cluster of its own reaps idle connections after 4 s
(``connections.max.idle.ms``), while the clients' own limit is a minute: every close
of an idle connection is the broker's. Mid-recording one node is SIGKILLed under a
consumer fetching from it. The recording is then analysed by kmon analyze's jobs on the
run's Spark session (test_analyze runs the command line itself).
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers import KafkaClient, read, record_child

pytestmark = [pytest.mark.integration, pytest.mark.spark]  # real processes, a cluster, Spark

pytest.importorskip("pyspark")

from kmon.analysis import inputs, jobs  # noqa: E402

BROKER_IDLE_MS = 4000
REAPS_BEFORE_KILL = 3  # the producer's idle connections reaped, reopened, reaped
AFTER_KILL_S = 12  # the killed node's closes, and the producer's reaps go on (cycles)
CLIENT_IDLE_MS = 60_000
REAP_SHARE = 0.9  # kmon.engine.closes: idle this share of a limit when closed: reaped
KILLED_REASONS = ("broker_closed", "reset")


def workload(kind: str, bootstrap: str, *extra: str) -> KafkaClient:
    client = KafkaClient([sys.executable, "-m", "kmon.devtools.workload", kind, bootstrap,
                          "--instrument", "--idle-ms", str(CLIENT_IDLE_MS), *extra])
    client.wait_line("READY", timeout=60)
    return client


def analysed(recording: Path, session) -> dict[str, list[dict]]:
    """kmon analyze's analyses of the recording: {analysis name: its rows}."""
    found = inputs.discover(recording)
    assert not found.skipped, found.skipped
    tables = jobs.run_all(inputs.load(session, found), jobs.Params())
    return {name: tables[name].to_pylist()
            for name in ("why_closed", "idle_churn", "churn_and_leaks")}


def test_broker_reaps_and_a_killed_broker_recorded_and_analysed(start_kafka, spool_dir,
                                                                 spark_session, tmp_path):
    cluster = start_kafka(brokers=2, **{"connections.max.idle.ms": str(BROKER_IDLE_MS)})
    victim = cluster.nodes[1]
    clients: list[KafkaClient] = []
    recorder = None
    try:
        # the consumer's coordinator connection is never idle long enough to pass for reaped
        # when its broker dies (heartbeats every second, not every 3.6 s of the 4)
        consumer = workload("consumer", cluster.bootstrap(), "-X", "heartbeat.interval.ms=1000")
        clients.append(consumer)
        producer = workload("producer", cluster.bootstrap())
        clients.append(producer)
        recording = tmp_path / "rec"
        recorder = record_child("--pid", str(consumer.pid), "--pid", str(producer.pid),
                                "--out", str(recording), "--interval", "250ms",
                                "--broker-idle-ms", str(BROKER_IDLE_MS), "--duration",
                                f"{REAPS_BEFORE_KILL * BROKER_IDLE_MS // 1000 + AFTER_KILL_S}s")
        time.sleep(REAPS_BEFORE_KILL * BROKER_IDLE_MS / 1000)
        killed_ms = int(time.time() * 1000)
        cluster.kill(victim)
        assert recorder.proc.wait(40) == 0, recorder.stderr
    finally:
        for child in (recorder, *clients):
            if child is not None:
                child.stop()
        for node in cluster.nodes:  # a node left without its quorum would not stop for 20 s
            cluster.kill(node)

    closes = [e for e in read(recording, "events") if e["kind"] == "closed"]
    shown = [(e["pid"], e["role"], e["broker_id"], e["closed_by"], e["reason"],
              e["idle_before_ms"], e["ts_ms"] - killed_ms) for e in closes]
    reaps = [e for e in closes if e["reason"] == "broker_idle_reap"]
    assert any(e["pid"] == producer.pid for e in reaps), shown
    assert all(e["closed_by"] == "broker" and e["idle_before_ms"] >= REAP_SHARE * BROKER_IDLE_MS
               for e in reaps), shown
    # the consumer fetches from the killed node: its connections open there when it died
    # close as the broker's, busy: broker_closed, or reset where the dead JVM left a request
    # unread (the kernel then answers with a RST: 2 runs of 14)
    killed = [e for e in closes if e["pid"] == consumer.pid and e["broker_id"] == victim.node_id
              and e["ts_ms"] >= killed_ms > e["ts_ms"] - e["lifetime_ms"]]
    assert killed and all(e["closed_by"] == "broker" and e["reason"] in KILLED_REASONS
                          for e in killed), shown
    # no idle connection is taken for the client's reap: the client's limit is a minute
    assert not [e for e in closes if e["reason"] == "client_idle_reap"], shown

    tables = analysed(recording, spark_session)
    why = {(r["broker_id"], r["closed_by"], r["reason"]): r for r in tables["why_closed"]}
    expected = Counter((e["broker_id"], e["closed_by"] or "unknown", e["reason"] or "unknown")
                       for e in closes)
    assert {key: r["closes"] for key, r in why.items()} == dict(expected)
    reaped = [r for (_, _, reason), r in why.items() if reason == "broker_idle_reap"]
    assert reaped and all(r["median_idle_before_ms"] >= REAP_SHARE * BROKER_IDLE_MS
                          for r in reaped)
    assert sum(why[(victim.node_id, "broker", reason)]["closes"] for reason in KILLED_REASONS
               if (victim.node_id, "broker", reason) in why) >= len(killed)
    # the producer's reaped connections, reopened and reaped again: a reap cycle. librdkafka
    # reopens one of its bootstrap handles once it holds no connection (its own log says so:
    # the truth matrix's broker-idle-reap scenario), so the cycle is told on bootstrap
    # connections too: analyze's idle_churn counts those per cluster address
    mine = sorted((e for e in reaps if e["pid"] == producer.pid), key=lambda e: e["ts_ms"])
    reopened = [e for e in mine[1:] if e["ts_ms"] - e["lifetime_ms"] >= mine[0]["ts_ms"]]
    assert reopened and all(e["role"] in ("bootstrap", "broker") for e in reopened), shown
    cycling = [r for r in tables["idle_churn"] if r["pid"] == producer.pid and r["reap_cycles"]]
    rebootstraps = [e for e in reopened if e["role"] == "bootstrap"]
    assert [r for r in cycling if r["role"] == "bootstrap"] or not rebootstraps[1:], (
        tables["idle_churn"], shown)
    # each reap a cycle at most once: a broker reap and the bootstrap connection after it are
    # two connections, never one reap counted twice
    for role in ("bootstrap", "broker"):
        assert sum(r["reap_cycles"] for r in cycling if r["role"] == role) <= len(
            [e for e in mine if e["role"] == role]), (tables["idle_churn"], shown)
    assert all(r["address"] for r in cycling if r["role"] == "bootstrap")
    churn = {r["pid"]: r for r in tables["churn_and_leaks"]}
    # opens as the kernel counted them where its events ran (every connection, refused and
    # failed ones too), else as the polls saw them
    exact = Counter(life["pid"] for life in read(recording, "lives"))
    polled = Counter(e["pid"] for e in read(recording, "events") if e["kind"] == "opened")
    assert {pid: r["opened"] for pid, r in churn.items() if r["opened"]} == {
        pid: exact[pid] if pid in exact else polled[pid] for pid in {*exact, *polled}}
    assert all(r["counted"] == ("kernel" if pid in exact else "polls") for pid, r in churn.items())
    assert exact.keys() >= {producer.pid, consumer.pid}  # kmon record ran the kernel's events
    cycles = Counter(e["pid"] for e in read(recording, "events")
                     if e["kind"] == "churn" and e["pattern"] == "idle_reap_cycle")
    assert cycles and {pid: r["idle_reap_cycle"] for pid, r in churn.items()
                       if r["idle_reap_cycle"]} == dict(cycles)
