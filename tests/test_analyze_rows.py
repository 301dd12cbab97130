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
