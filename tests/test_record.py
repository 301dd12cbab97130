"""``kmon record``: real clients recorded to Parquet by the real command line."""

from __future__ import annotations

import gc
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from helpers import (
    Child,
    assert_one_clear_line,
    data_files,
    kmon,
    packet_sockets_held,
    read,
    record_child,
    recorded_pids,
    unused_pid,
    wait_for,
)

from kmon.agent.client_hook import CONFIG_SUMMARY_KEYS
from kmon.record.schema import SCHEMA_VERSION, SCHEMAS

pytestmark = pytest.mark.integration  # real processes, a cluster or Spark

HOST = socket.gethostname()
SECRET = "hunter2"


def latest_session(rows: list[dict]) -> dict:
    """The row a reader takes for a session: the one with the latest stopped_ms."""
    return max(rows, key=lambda r: -1 if r["stopped_ms"] is None else r["stopped_ms"])


def test_record_pids(start_client, tmp_path):
    consumer = start_client("consumer", properties={"sasl.password": SECRET})
    producer = start_client("producer")
    out = tmp_path / "rec"
    result = kmon("record", "--pid", str(consumer.pid), "--pid", str(producer.pid),
                  "--out", str(out), "--interval", "250ms", "--duration", "3s")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    summary = result.stderr.strip().splitlines()[-1]
    assert "stopped (duration reached)" in summary and str(out) in summary, summary

    for table in SCHEMAS:
        for path in (out / table).rglob("*.parquet"):
            date, host = path.relative_to(out / table).parts[:2]
            assert date.startswith("date=") and len(date) == len("date=YYYY-MM-DD")
            assert host == f"host={HOST}"
    snapshots, sessions = read(out, "snapshots"), read(out, "sessions")
    assert {r["schema_version"] for r in snapshots + sessions} == {SCHEMA_VERSION}
    assert {r["pid"] for r in snapshots} == {consumer.pid, producer.pid}
    assert any(r["pid"] == consumer.pid and r["role"] == "coordinator"
               and r["client_type"] == "consumer" for r in snapshots)
    assert {r["session_id"] for r in snapshots} == {r["session_id"] for r in sessions}

    session = latest_session(sessions)
    assert session["stopped_ms"] > session["started_ms"] and session["interval_ms"] == 250
    clients = json.loads(session["clients_json"])
    assert {(c["pid"], c["type"]) for c in clients} == {(consumer.pid, "consumer"),
                                                        (producer.pid, "producer")}
    assert all(set(c["config"]) <= set(CONFIG_SUMMARY_KEYS) for c in clients)
    assert any(c["config"].get("group.id") for c in clients)

    for path in data_files(out):
        assert SECRET.encode() not in path.read_bytes()
    decoded = json.dumps([read(out, table) for table in SCHEMAS], default=str)
    assert SECRET not in decoded


def test_a_process_exit_is_an_event_and_the_last_one_ends_the_recording(start_client,
                                                                         tmp_path):
    stays, leaves = start_client("consumer"), start_client("producer")
    out = tmp_path / "rec"
    recorder = record_child("--pid", str(stays.pid), "--pid", str(leaves.pid),
                            "--out", str(out), "--interval", "250ms")
    try:
        wait_for(lambda: {stays.pid, leaves.pid} <= recorded_pids(out), "both recorded")
        leaves.send("exit")
        leaves.proc.wait(10)
        time.sleep(1)  # a second of polls without it: the recorder must not stop
        assert recorder.proc.poll() is None, recorder.stderr  # one process is left
        stays.send("exit")
        stays.proc.wait(10)  # reaped: kmon counts a zombie as running
        assert recorder.proc.wait(15) == 0, recorder.stderr
    finally:
        recorder.stop()
    exits = [e for e in read(out, "events") if e["kind"] == "process_exit"]
    assert [e["pid"] for e in exits] == [leaves.pid, stays.pid]
    snapshots = read(out, "snapshots")
    assert max(r["ts_ms"] for r in snapshots if r["pid"] == stays.pid) > exits[0]["ts_ms"]
    assert latest_session(read(out, "sessions"))["stopped_ms"] is not None


def test_cluster_mode_finds_the_clients_and_sigterm_stops_it_cleanly(spool_dir, tmp_path):
    # a cluster of its own: the session's cluster may still hold other tests' clients
    cluster = Child([sys.executable, "-m", "kmon", "devcluster", "--brokers", "3"])
    clients, recorder = [], None
    try:
        bootstrap = cluster.wait_line("127.0.0.1:", timeout=30)
        for kind in ("consumer", "producer"):
            clients.append(Child([sys.executable, "-m", "kmon.devtools.workload", kind,
                                  bootstrap, "--instrument"]))
            clients[-1].wait_line("READY")
        consumer, producer = clients
        out = tmp_path / "rec"
        recorder = record_child("--cluster", bootstrap, "--out", str(out), "--interval",
                                "500ms")
        wait_for(lambda: {consumer.pid, producer.pid} <= recorded_pids(out),
                 "both clients recorded")
        if os.geteuid() == 0:  # the wire of both read through the host's one capture
            assert packet_sockets_held(recorder.pid) == 1
        recorder.proc.terminate()
        assert recorder.wait_exit(15) == 0, recorder.stderr
    finally:
        for child in (recorder, *clients, cluster):
            if child is not None:
                child.stop()
    assert "stopped (SIGTERM)" in recorder.stderr[-1], recorder.stderr
    # the devcluster process (brokers, and its own client to them) is not a client; a client
    # of another test may reach a port this cluster took over from a cluster now gone
    recorded = {r["pid"] for r in read(out, "snapshots")}
    assert {consumer.pid, producer.pid} <= recorded and cluster.pid not in recorded
    clients = json.loads(latest_session(read(out, "sessions"))["clients_json"])
    assert {consumer.pid, producer.pid} <= {c["pid"] for c in clients}


def test_a_cluster_named_in_the_config_with_a_property_read_from_a_file(cluster, start_client,
                                                                        tmp_path):
    """Nothing secret needs to stand on kmon's command line: the cluster comes from --config,
    a property's value from a file (-X KEY=@FILE); neither value is printed."""
    consumer = start_client("consumer")
    config, value = tmp_path / "kmon.toml", tmp_path / "password"
    config.write_text(f"[clusters.local]\nbootstrap = '{cluster}'\n")
    value.write_text(SECRET + "\n")
    out = tmp_path / "rec"
    result = kmon("record", "--cluster", "local", "--config", str(config),
                  "-X", f"sasl.password=@{value}", "--out", str(out), "--interval", "250ms",
                  "--duration", "2s")
    assert result.returncode == 0, result.stderr
    assert SECRET not in result.stderr + result.stdout
    assert consumer.pid in {r["pid"] for r in read(out, "snapshots")}


def test_sighup_stops_it_cleanly_as_sigterm_does(start_client, tmp_path):
    producer = start_client("producer")
    out = tmp_path / "rec"
    recorder = record_child("--pid", str(producer.pid), "--out", str(out), "--interval", "200ms")
    try:
        wait_for(lambda: producer.pid in recorded_pids(out), "the producer recorded")
        recorder.proc.send_signal(signal.SIGHUP)  # a closed terminal, su/ssh going away
        assert recorder.wait_exit(15) == 0, recorder.stderr
    finally:
        recorder.stop()
    assert "stopped (SIGHUP)" in recorder.stderr[-1], recorder.stderr
    assert latest_session(read(out, "sessions"))["stopped_ms"] is not None


def test_any_error_in_the_loop_closes_the_recording(start_client, tmp_path, monkeypatch,
                                                    capsys):
    """Whatever breaks a poll (an OverflowError once killed it with no file written), the
    session is closed and said in one line. The failing poll is injected: no real part
    fails on demand."""
    from kmon.cli import main
    from kmon.engine.monitor import Monitor

    producer = start_client("producer")
    polls, real_poll = [], Monitor.poll

    def failing_poll(monitor):
        polls.append(1)
        if len(polls) == 3:
            raise OverflowError("int too large to convert")
        return real_poll(monitor)

    monkeypatch.setattr(Monitor, "poll", failing_poll)
    out, thresholds = tmp_path / "rec", gc.get_threshold()
    try:
        code = main(["record", "--pid", str(producer.pid), "--out", str(out), "--interval",
                     "100ms"])
    finally:  # the record command settles this process's heap: give pytest its own back
        gc.unfreeze()
        gc.set_threshold(*thresholds)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and "int too large to convert; recording stopped" in err[-1], err
    assert latest_session(read(out, "sessions"))["stopped_ms"] is not None
    assert {r["pid"] for r in read(out, "snapshots")} == {producer.pid}


def test_a_killed_recorder_leaves_readable_parts(start_client, tmp_path):
    producer = start_client("producer", idle_ms=3000)
    out = tmp_path / "rec"
    recorder = record_child("--pid", str(producer.pid), "--out", str(out),
                            "--interval", "250ms", "--flush-every", "1s")
    try:
        # the idle reaper (3 s) closes the producer's connection and it opens another
        wait_for(lambda: len(list(out.rglob("snapshots/**/*.parquet"))) >= 2
                 and any(out.rglob("events/**/*.parquet")), "snapshots and events written")
        killed_ms = int(time.time() * 1000)
        os.kill(recorder.pid, signal.SIGKILL)
        recorder.proc.wait(10)
    finally:
        recorder.stop()

    for path in data_files(out):
        assert path.suffix == ".parquet" or path.name.startswith("."), path
    snapshots = read(out, "snapshots")
    assert len({r["ts_ms"] for r in snapshots}) >= 2
    assert max(r["ts_ms"] for r in snapshots) >= killed_ms - 2500  # lost: the last second or so
    (session,) = read(out, "sessions")
    assert session["stopped_ms"] is None
    # a hidden leftover, as a kill mid-write leaves it, does not break a later read
    partition = next((out / "snapshots").rglob("*.parquet")).parent
    (partition / ".half-written.parquet.tmp").write_bytes(b"PAR1\x00garbage")
    assert len(read(out, "snapshots")) == len(snapshots)
    for event in read(out, "events"):
        if event["kind"] in ("opened", "closed"):
            assert event["pid"] == producer.pid and event["role"] == "broker"


@pytest.mark.parametrize("case", ["no source", "no such pid", "not kafka", "unwritable out",
                                  "out is a file", "unreachable cluster"])
def test_bad_input(case, tmp_path):
    sleeper = subprocess.Popen(["sleep", "30"])
    blocker = tmp_path / "file"
    blocker.write_text("")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead_port = probe.getsockname()[1]
    out = ["--out", str(tmp_path / "rec")]
    args, code, word = {
        "no source": (out, 2, "--pid"),
        "no such pid": (["--pid", str(unused_pid()), *out], 1, "PID"),
        "not kafka": (["--pid", str(sleeper.pid), *out], 1, "no sign of being a Kafka client"),
        "unwritable out": (["--pid", str(sleeper.pid), "--out", str(blocker / "rec")], 1,
                           "cannot write"),
        "out is a file": (["--pid", str(sleeper.pid), "--out", str(blocker)], 1,
                          "not a directory"),
        "unreachable cluster": (["--cluster", f"127.0.0.1:{dead_port}",
                                 "--cluster-timeout", "2s", *out], 1, "did not answer"),
    }[case]
    try:
        assert_one_clear_line(kmon("record", *args), code, "kmon: error", word)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not (tmp_path / "rec").exists() or not data_files(tmp_path / "rec")
