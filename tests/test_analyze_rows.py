"""``kmon analyze``'s tables as a person reads them: one row per client, and headers whole
when piped."""

from __future__ import annotations

import io

import pyarrow as pa
import pytest

from kmon.analysis import jobs, report

pytestmark = pytest.mark.integration  # a local Spark session


def _poll(ts: int, client: str | None, key: str = "k1") -> dict:
    return {"session_id": "s", "host": "h", "pid": 7, "key": key, "ts_ms": ts,
            "client": client, "client_id": "orders" if client else None,
            "client_type": "producer" if client else None, "role": "broker", "node_id": 1,
            "broker_id": 1, "remote": "b1:9092", "state": "ESTABLISHED",
            "requests_sent": ts, "bytes_sent": ts * 100, "idle_limit_ms": 540_000}


def test_a_client_s_first_polls_before_its_metrics_are_not_another_row(spark_session):
    """A producer's sockets are seen a poll or two before its first statistics name them:
    once, the process came out as two rows, client `-` and its name."""
    polls = [_poll(1000, None), _poll(1000, None, "k2"), _poll(2000, "rdkafka#producer-1"),
             _poll(2000, "rdkafka#producer-1", "k2"), _poll(3000, "rdkafka#producer-1"),
             _poll(4000, None)]  # its metrics gone before its last socket
    snapshots = spark_session.createDataFrame(polls)
    lifetimes = jobs.connection_lifetimes(jobs.connection_stretches(snapshots))
    rows = jobs.peak_connections(snapshots, lifetimes).collect()
    assert [(r["pid"], r["client"], r["client_id"], r["peak_connections"]) for r in rows] == [
        (7, "rdkafka#producer-1", "orders", 2)]
    owners = {r["key"]: r["client"] for r in lifetimes.collect()}
    assert owners == {"k1": "rdkafka#producer-1", "k2": "rdkafka#producer-1"}


def test_piped_every_header_is_whole():
    """Piped, `opened_per_minute` once came out as `opened_per_…`."""
    (analysis,) = [a for a in jobs.ANALYSES if a.name == "churn_and_leaks"]
    row = {"host": "a-rather-long-host-name.example.internal", "pid": 4242, "counted": "kernel",
           "opened": 1200, "opened_per_minute": 40.0, "short_lived": 3,
           **dict.fromkeys(jobs.CHURN_PATTERNS, 0), "failed_connects": 0, "refused": 0,
           "max_churn_rate": 2.5}
    out = io.StringIO()
    console = report.text_console(out)
    report.show(console, [analysis], {analysis.name: pa.Table.from_pylist([row])}, 10)
    text = out.getvalue()
    assert all(column in text for column in analysis.show), text
    assert "…" not in text


BOOTSTRAP = "127.0.0.1:9092"


def _lived(key: str, role: str, opened: int, closed: int, broker_id: int | None = 1) -> list:
    """A producer's idle connection's polls, a second apart, from ``opened`` to ``closed``."""
    return [{"session_id": "s", "host": "h", "pid": 7, "key": key, "ts_ms": ts,
             "client": "rdkafka#producer-1", "client_id": "orders", "client_type": "producer",
             "role": role, "node_id": -1 if role == "bootstrap" else 1, "broker_id": broker_id,
             "remote": BOOTSTRAP, "state": "ESTABLISHED", "requests_sent": 2,
             "bytes_sent": 300, "idle_limit_ms": 4000}
            for ts in range(opened, closed + 1, 1000)]


def test_a_re_bootstrap_after_each_reap_is_a_cycle_of_its_own_once(spark_session):
    """librdkafka under a broker that reaps at 4 s: each broker connection reaped, a
    ``/bootstrap`` connection to the cluster address opened after it, reaped in turn, or
    dropped by the client once it had the metadata. The bootstrap cycles were left out of
    idle_churn (its broker and coordinator rows only); the dropped one, which follows a reap
    and precedes the next, is no reap of its own (counted, it would count that reap twice):
    its close told ``unknown`` (a plain client's, its limit unknown), its lifetime within the
    tolerance of the limit is no evidence of a reap."""
    polls = [*_lived("old", "broker", 0, 0),  # open before the recording: not churn
             *_lived("b1", "broker", 1000, 5000), *_lived("k1", "bootstrap", 6000, 10_000),
             *_lived("b2", "broker", 11_000, 15_000),
             *_lived("k2", "bootstrap", 16_000, 17_000, None),  # dropped after its metadata
             *_lived("b3", "broker", 18_000, 22_000),
             *_lived("k3", "bootstrap", 23_000, 27_000, None),  # reaped, not reopened (yet)
             *_lived("b4", "broker", 28_000, 30_000)]  # open at the end
    reasons = {"old": "client_closed", "b1": "broker_idle_reap", "k1": "broker_idle_reap",
               # a plain client's drop ~1 s after its connect: kmon cannot tell why
               "b2": "broker_idle_reap", "k2": "unknown", "b3": "broker_idle_reap",
               "k3": "broker_idle_reap"}
    last = {}
    for poll in polls:
        last[poll["key"]] = poll["ts_ms"]
    events = spark_session.createDataFrame([
        {"session_id": "s", "host": "h", "pid": 7, "key": key, "kind": "closed",
         "ts_ms": last[key] + 1000, "reason": why} for key, why in reasons.items()])
    lifetimes = jobs.connection_lifetimes(jobs.connection_stretches(
        spark_session.createDataFrame(polls)))
    configs = spark_session.createDataFrame(
        [], "session_id string, pid int, client string, metadata_max_age_ms bigint")
    table = jobs.idle_churn(lifetimes, events, configs, jobs.Params()).toArrow()
    rows = {(r["role"], r["broker_id"], r["address"]): (r["lifetimes"], r["idle_churned"],
                                                        r["reap_cycles"])
            for r in table.to_pylist()}
    assert rows == {("broker", 1, None): (5, 3, 3), ("bootstrap", None, BOOTSTRAP): (3, 3, 1)}
    chart = report.churn_per_broker_chart(table)
    assert [t.get_text() for t in chart.axes[0].get_xticklabels()] == [
        "1", f"bootstrap {BOOTSTRAP}"]
