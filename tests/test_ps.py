"""``kmon ps``: the host's Kafka client processes as text and JSON, with no terminal, against
real client processes of the mock cluster (and of a real one); and text for pipes
(``-o tsv|wide``) parsed back to what ``--json`` says."""

from __future__ import annotations

import csv
import getpass
import io
import json
import os
import re
import subprocess
import sys

import pytest
from helpers import (
    KAFKA_PYTHON_CONSUMER,
    Child,
    cluster_id,
    kmon,
    produce,
    python_as,
    unique,
    wait_for,
)

from kmon.present.columns import CONNECTION_COLUMNS, PROCESS_COLUMNS

pytestmark = pytest.mark.integration


def piped(*args: str, columns: str | None = None) -> subprocess.CompletedProcess:
    """kmon's stdout into a pipe, as `kmon ps | cat`, with no $COLUMNS unless given (the
    test run's own environment may carry one below Python's os.environ)."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run([sys.executable, "-m", "kmon", *args], capture_output=True,
                          text=True, env=env, timeout=60)


def ps_json(*args: str) -> list[dict]:
    result = kmon("ps", "--json", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["processes"]


def tsv_rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE))


def wide_rows(text: str, columns) -> list[list[str]]:
    """Wide text split back into cells: columns are two blanks apart and never truncated."""
    header, *lines = text.splitlines()
    assert re.split(r"\s{2,}", header.strip()) == [c.header for c in columns]
    return [re.split(r"\s{2,}", line.strip()) for line in lines]


@pytest.fixture(scope="module")
def two_clients(start_module_client):
    return start_module_client("producer"), start_module_client("consumer")


@pytest.fixture(scope="module")
def two_clients_json(two_clients) -> dict[int, dict]:
    """``kmon ps --json``'s rows of the two clients, by pid: one run for the tests that read
    them (each then runs the other forms it checks)."""
    wanted = {client.pid for client in two_clients}
    return {row["pid"]: row for row in ps_json() if row["pid"] in wanted}


def test_ps_lists_the_clients_by_cluster_with_who_runs_what(two_clients, two_clients_json,
                                                            cluster):
    wanted = {client.pid for client in two_clients}
    rows = two_clients_json
    assert rows.keys() == wanted
    producer, consumer = (rows[client.pid] for client in two_clients)
    assert producer["cluster"] == consumer["cluster"] != "(brokers not known yet)"
    assert producer["cluster"] == cluster_id(cluster)  # as kmon's own query to a broker answered
    assert producer["user"] == consumer["user"] == getpass.getuser()
    assert (producer["command"], consumer["command"]) == ("workload producer",
                                                          "workload consumer")
    assert producer["client_ids"] == ["kmon-workload-producer"]
    assert consumer["client_ids"] == ["kmon-workload-consumer"]
    assert consumer["coordinator"] == 1 and consumer["broker"] >= 1
    assert producer["max_idle_ms"] is not None

    # -b names the cluster: its clients only, under that name; as text, with no terminal
    text = kmon("ps", "-b", cluster, "-o", "wide")
    assert text.returncode == 0, text.stderr
    by_pid = {int(cells[1]): cells for cells in wide_rows(text.stdout, PROCESS_COLUMNS)
              if cells[1].isdigit()}  # (another process's odd command line splits oddly)
    assert wanted <= by_pid.keys() and {by_pid[pid][0] for pid in wanted} == {cluster}
    # the table: grouped under one line per cluster, its name whole however narrow
    # (its own run: another client of the cluster may come or go between the two, and the
    # wide parse above leaves out one whose command line splits oddly)
    table = piped("ps", "-b", cluster).stdout.splitlines()
    listed = {int(line.split()[0]) for line in table[2:]}
    assert table[1] == f"{cluster} · {len(listed)} process{'es' * (len(listed) != 1)}", table
    assert not any("…" in line for line in table), table  # piped: nothing cut
    assert wanted <= listed and len(listed) == len(table) - 2, table


def test_ps_tsv_and_wide_parse_back_to_its_json(two_clients, two_clients_json):
    wanted = {client.pid for client in two_clients}
    by_json = two_clients_json
    tsv = kmon("ps", "-o", "tsv")
    assert tsv.returncode == 0 and "│" not in tsv.stdout  # no box drawing; nothing cut: below
    rows = tsv_rows(tsv.stdout)
    assert list(rows[0]) == [c.key for c in PROCESS_COLUMNS]  # the JSON keys, in order
    for row in (r for r in rows if int(r["pid"]) in wanted):
        expected = by_json[int(row["pid"])]
        for key in ("cluster", "user", "command", "cmdline", "coordinator", "bootstrap"):
            assert row[key] == str(expected[key]), key
        assert row["client_ids"].split(",") == expected["client_ids"]
    wide = kmon("ps", "-o", "wide")
    cells = {int(c[1]): c for c in wide_rows(wide.stdout, PROCESS_COLUMNS) if c[1].isdigit()}
    for pid in wanted:  # wide never truncates: the whole command line is there
        assert cells[pid][-1] == by_json[pid]["cmdline"]
        assert cells[pid][3] == by_json[pid]["command"]


def test_attach_tsv_and_wide_parse_back_to_its_json(start_client):
    client = start_client("consumer")
    snapshot = json.loads(kmon("attach", str(client.pid), "--once", "--json").stdout)
    connections = snapshot["processes"][0]["connections"]
    keys = {c["key"] for c in connections}
    tsv = kmon("attach", str(client.pid), "--once", "-o", "tsv")
    assert tsv.returncode == 0, tsv.stderr
    rows = tsv_rows(tsv.stdout)
    assert list(rows[0]) == [c.key for c in CONNECTION_COLUMNS]
    assert {r["role"] for r in rows} >= {"coordinator", "broker"}
    assert len(rows) == len(keys) and {r["pid"] for r in rows} == {str(client.pid)}
    assert all(r["idle_limit_ms"].isdigit() for r in rows)  # awk sums milliseconds
    wide = kmon("attach", str(client.pid), "--once", "-o", "wide")
    cells = wide_rows(wide.stdout, CONNECTION_COLUMNS)
    assert len(cells) == len(keys) and all(len(c) == len(CONNECTION_COLUMNS) for c in cells)
    assert {c[4] for c in cells} == {c["client"] for c in connections}  # never cut
    # one rule for every table: piped, as here, nothing is cut (and no -o is the table);
    # with $COLUMNS, it fits
    table = piped("attach", str(client.pid), "--once", "-o", "table", "--interval", "1s")
    default = piped("attach", str(client.pid), "--once", "--interval", "1s")
    # the same columns (their widths follow the values, which change between the two runs)
    assert table.stdout.splitlines()[0].split() == default.stdout.splitlines()[0].split()
    assert "…" not in table.stdout + default.stdout
    assert any(len(line) > 80 for line in table.stdout.splitlines())
    fitted = piped("attach", str(client.pid), "--once", "-o", "table", "--interval", "1s",
                   columns="80")
    assert all(len(line) <= 80 for line in fitted.stdout.splitlines())


def test_ps_of_a_cluster_with_no_clients_is_an_empty_list(spool_dir):
    lonely = Child([sys.executable, "-m", "kmon", "devcluster", "--brokers", "1"])
    try:
        bootstrap = lonely.wait_line("127.0.0.1:", timeout=30)
        assert ps_json("-b", bootstrap) == []
        text = kmon("ps", "-b", bootstrap)
        assert text.returncode == 0, text.stderr
        assert text.stdout == f"no Kafka clients of {bootstrap} on this host\n"  # no lone header
        (header,) = kmon("ps", "-b", bootstrap, "-o", "tsv").stdout.splitlines()
        assert header.split()[:3] == ["cluster", "pid", "user"]  # for awk: a header still
    finally:
        lonely.stop()


def test_ps_as_a_user_with_no_clients_is_an_empty_list(throwaway_user, two_clients):
    """Root's clients run beside it; a user who has none of their own sees an empty list."""
    prefix, env = python_as(throwaway_user.pw_name)
    result = subprocess.run([*prefix, "-m", "kmon", "ps", "--json"], capture_output=True,
                            text=True, env=env, cwd="/")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["processes"] == []


def test_ps_of_a_named_cluster_finds_a_client_with_no_library_to_map(kafka):
    """kafka-python maps no Kafka library, and no other client names the cluster's brokers:
    ``ps -b`` finds it by the named cluster's own brokers, with its coordinator."""
    pytest.importorskip("kafka", reason="kafka-python 2.0.x is in the test extra")
    bootstrap, topic = kafka.bootstrap(), unique("kmon-ps-kafka-python")
    produce(bootstrap, topic)
    client = Child([sys.executable, "-c", KAFKA_PYTHON_CONSUMER, bootstrap, f"g-{topic}", topic])
    try:
        client.wait_line("READY")

        def listed() -> list[dict]:
            return [p for p in ps_json("-b", bootstrap)
                    if p["pid"] == client.pid and p["coordinator"] == 1 and p["broker"]]

        assert wait_for(listed, "kmon ps -b listing the kafka-python consumer", 40, 1)
    finally:
        client.stop()
