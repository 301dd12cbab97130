"""Bad input: one clear line on stderr, a non-zero exit, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psutil
import pytest
from helpers import Child, assert_one_clear_line, kmon, unused_pid

pytestmark = pytest.mark.integration  # real processes, a cluster or Spark


def test_unknown_pid():
    pid = unused_pid()
    assert_one_clear_line(kmon("attach", str(pid), "--once", "--json"), 1, f"PID {pid}")


@pytest.mark.parametrize("pid", ["abc", "-5"])
def test_pid_that_is_not_a_number(pid):
    assert_one_clear_line(kmon("attach", pid, "--once"), 2, "kmon: error")


@pytest.mark.parametrize("interval", ["0", "-1", "0s", "abc", "1x"])
def test_bad_interval(interval):
    result = kmon("attach", str(os.getpid()), "--interval", interval, "--once")
    assert_one_clear_line(result, 2, "--interval")


def test_non_kafka_process():
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        result = kmon("attach", str(sleeper.pid), "--once", "--json")
        assert_one_clear_line(result, 1, "no sign of being a Kafka client")
    finally:
        sleeper.kill()
        sleeper.wait()


def test_process_that_exits_mid_run_ends_attach_json_with_exit_0(start_client):
    client = start_client("producer")
    stream = Child([sys.executable, "-m", "kmon", "attach", str(client.pid), "--json",
                    "--interval", "200ms"])
    try:
        json.loads(stream.wait_line("{"))
        client.send("exit")
        client.proc.wait(10)
        last = None
        while stream.proc.poll() is None or not stream.lines.empty():
            try:
                last = json.loads(stream.wait_line("{", timeout=10))
            except AssertionError:
                break
        assert stream.wait_exit(10) == 0  # the client ended normally: so does kmon
        assert len(stream.stderr) == 1 and "has exited" in stream.stderr[0], stream.stderr
        assert any(e["kind"] == "process_exit" for e in last["events"])
    finally:
        stream.stop()


@pytest.fixture(scope="module")
def looked_at(start_module_client):
    """A producer that tests only point kmon at, started once for the module."""
    return start_module_client("producer")


def test_unreachable_cluster(looked_at):
    client = looked_at
    # a port nothing listens on: the metadata request can never be answered
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = kmon("attach", str(client.pid), "--once", "--json",
                  "--bootstrap-servers", f"127.0.0.1:{port}", "--cluster-timeout", "2s")
    assert_one_clear_line(result, 1, "did not answer")


class TestSpoolFiles:
    """Spool files the agent did not write as it should (placed here by the test)."""

    @pytest.fixture(scope="class")
    def producer(self, start_module_client):
        """One producer for the class: each test plants its spool file, one kmon run reads it."""
        return start_module_client("producer", instrument=False)

    @pytest.fixture
    def client(self, producer, spool_dir):
        yield producer
        for path in spool_dir.glob(f"{producer.pid}-*"):
            path.unlink()

    def test_corrupt_spool_file(self, client, spool_dir):
        path = spool_dir / f"{client.pid}-rdkafka_producer-1.json"
        path.write_text('{"format": 1, "stats": {"brok')
        result = kmon("attach", str(client.pid), "--once", "--json")
        assert_one_clear_line(result, 1, "corrupt", str(path))

    def test_spool_file_of_another_shape(self, client, spool_dir):
        path = spool_dir / f"{client.pid}-rdkafka_producer-1.json"
        path.write_text(json.dumps({"hello": "world"}))
        assert_one_clear_line(kmon("attach", str(client.pid), "--once"), 1, "corrupt", str(path))

    def test_spool_file_that_is_a_link(self, client, spool_dir, tmp_path):
        target = tmp_path / "elsewhere.json"
        target.write_text("{}")
        (spool_dir / f"{client.pid}-rdkafka_producer-1.json").symlink_to(target)
        result = kmon("attach", str(client.pid), "--once", "--json")
        assert_one_clear_line(result, 1, "symbolic link")

    @pytest.mark.parametrize(("change", "word"), [
        ({"proc_start": "yesterday"}, "proc_start"),
        ({"written_ms": [1]}, "written_ms"),
        ({"config": ["a"]}, "config"),
        ({"stats": {"brokers": ["b1"]}}, "brokers"),
        ({"stats": {"brokers": {"b1": {"nodeid": "1"}}}}, "nodeid"),
        ({"stats": {"brokers": {"b1": {"nodename": 9092}}}}, "nodename"),
        ({"stats": {"brokers": {"b1": {"rtt": [1]}}}}, "rtt"),
        ({"sockets": [{"inode": "x"}]}, "socket counters"),
        ({"format": 2}, "format 2"),
    ])
    def test_spool_record_with_odd_fields(self, client, spool_dir, change, word):
        """Records with the right process start time, so kmon reads past the header."""
        record = {"format": 1, "pid": client.pid,
                  "proc_start": psutil.Process(client.pid).create_time(),
                  "written_ms": int(time.time() * 1000), "config": {},
                  "stats": {"name": "rdkafka#producer-1", "brokers": {}}, **change}
        path = spool_dir / f"{client.pid}-rdkafka_producer-1.json"
        path.write_text(json.dumps(record))
        result = kmon("attach", str(client.pid), "--once", "--json")
        assert_one_clear_line(result, 1, str(path), word)
        assert result.stdout == ""

    def test_unreadable_spool_file(self, client, spool_dir):
        path = spool_dir / f"{client.pid}-rdkafka_producer-1.json"
        os.mkfifo(path)  # root reads any mode bits; a FIFO is a file no reader may trust
        result = kmon("attach", str(client.pid), "--once", "--json")
        assert_one_clear_line(result, 1, "not a regular file")


def test_process_in_another_network_namespace_gets_a_notice():
    if subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode != 0:
        pytest.skip("cannot create a network namespace here")
    sleeper = subprocess.Popen(["unshare", "--net", "sleep", "30"])
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # unshare execs sleep once the namespace exists
            if os.readlink(f"/proc/{sleeper.pid}/exe").endswith("sleep"):
                break
            time.sleep(0.05)
        result = kmon("attach", str(sleeper.pid), "--once", "--json", "--any-process")
        assert result.returncode == 0, result.stderr
        (process,) = json.loads(result.stdout)["processes"]
        assert any("another network namespace" in n for n in process["notices"])
    finally:
        sleeper.kill()
        sleeper.wait()


def test_closed_output_pipe_is_not_an_error(looked_at):
    client = looked_at
    attach = subprocess.Popen([sys.executable, "-m", "kmon", "attach", str(client.pid), "--json",
                               "--interval", "100ms"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    assert attach.stdout.readline().startswith("{")
    attach.stdout.close()  # like `| head -1`
    assert attach.wait(10) == 0
    assert attach.stderr.read() == ""


def test_watch_unknown_cluster_name_lists_the_configured_ones(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[clusters.prod]\nbootstrap = "b1:9092"\n')
    result = kmon("watch", "staging", "--config", str(config))
    assert_one_clear_line(result, 1, "'staging'", "prod")


def test_unknown_theme_is_one_clear_line(looked_at):
    client = looked_at
    assert_one_clear_line(kmon("attach", str(client.pid), "--once", "--theme", "nope"), 1,
                          "unknown theme 'nope'")
    assert_one_clear_line(kmon("watch", "127.0.0.1:9092", "--theme", "nope"), 1,
                          "unknown theme 'nope'")


def test_watch_without_a_terminal_says_what_to_use_instead():
    assert_one_clear_line(kmon("watch", "127.0.0.1:9092"), 1, "needs a terminal", "--json")


def test_bad_config_file_is_one_clear_line(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("[thresholds]\nidle_warning = 3\n")
    assert_one_clear_line(kmon("watch", "127.0.0.1:9092", "--config", str(config)), 1,
                          str(config), "idle_warning")


def test_corrupt_replayed_recording_is_one_clear_line(tmp_path):
    from kmon.engine.playback import ReplayError, read_recording

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"ts_ms": 1, "host": "h", "processes": [{"pid": "x"}]}\n')
    with pytest.raises(ReplayError, match="bad.jsonl:1 is not a kmon snapshot"):
        read_recording(bad)
