"""The agent: statistics in a private spool, secrets never written, kmon run."""

from __future__ import annotations

import json
import stat
import sys

import pytest
from helpers import attach_once, connections_of, kmon

pytestmark = pytest.mark.integration  # real processes, a cluster or Spark

SECRETS = {"sasl.username": "kmon-user", "sasl.password": "hunter2-sasl",
           "ssl.key.password": "hunter2-key"}


def spool_files(spool_dir, pid):
    return sorted(spool_dir.glob(f"{pid}-*.json"))


def test_spool_is_private_and_never_holds_secrets(start_client, spool_dir):
    client = start_client("producer", properties=SECRETS)
    count, path = spool_files(spool_dir, client.pid)  # the client count, the statistics
    assert count.name == f"{client.pid}-clients.json"
    assert json.loads(count.read_text())["clients_created"] == 1
    assert stat.S_IMODE(spool_dir.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in (count, path))
    text = path.read_text()
    record = json.loads(text)
    assert record["pid"] == client.pid and record["client_type"] == "producer"
    assert record["config"]["client.id"] == "kmon-workload-producer"
    assert record["stats"]["name"].startswith("kmon-workload-producer#producer")
    for output in (text, kmon("attach", str(client.pid), "--once", "--json").stdout,
                   kmon("attach", str(client.pid), "--once").stdout):
        assert "hunter2" not in output


def test_existing_stats_callback_still_called(start_client):
    client = start_client("consumer")  # the workload chains its own stats_cb through the agent
    assert client.own_stats()["type"] == "consumer"


def test_spool_file_removed_when_client_exits(start_client, spool_dir):
    client = start_client("producer")
    assert spool_files(spool_dir, client.pid)
    client.send("exit")
    assert client.proc.wait(10) == 0
    assert not spool_files(spool_dir, client.pid)


def test_kmon_run_instruments_an_unmodified_program(start_client, spool_dir):
    client = start_client("producer", instrument=False,
                          wrapper=[sys.executable, "-m", "kmon", "run", "--"])
    assert spool_files(spool_dir, client.pid)
    snapshot = attach_once(client.pid)
    (process,) = snapshot["processes"]
    assert [c["type"] for c in process["clients"]] == ["producer"]
    rows = connections_of(snapshot)
    assert rows and all(r["role"] == "broker" and r["evidence"]["role"] == "stats" for r in rows)
    assert client.own_stats()["name"] == process["clients"][0]["name"]  # own stats_cb kept


def test_kmon_run_without_a_program_is_a_usage_error():
    result = kmon("run")
    assert result.returncode == 2 and "needs a program" in result.stderr


def test_kmon_run_exits_as_env_does_for_a_program_it_cannot_run(tmp_path):
    result = kmon("run", "--", "/nonexistent/kmon-test-program")
    assert result.returncode == 127 and "cannot run" in result.stderr
    unrunnable = tmp_path / "data.txt"
    unrunnable.write_text("not a program\n")
    result = kmon("run", "--", str(unrunnable))
    assert result.returncode == 126 and "Permission denied" in result.stderr
