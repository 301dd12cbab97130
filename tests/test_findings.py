"""Findings against real confluent-kafka clients of the mock cluster and of the real Apache
Kafka cluster: ``fd_near_limit`` (a consumer whose soft RLIMIT_NOFILE is low, holding
descriptors up to near it) and ``duplicate_client_id`` (two consumers of one group with one
client.id), each in ``kmon attach --json`` and ``kmon ps -o json``, and each one's negative
twin raising nothing (a tenth of the limit; two client ids of their own)."""

from __future__ import annotations

import asyncio
import json
import sys
import time

import pyarrow.parquet as pq
import pytest
from helpers import (
    attach_app,
    attach_stream,
    cluster_id,
    get,
    kmon,
    read,
    start_serve,
    table_rows,
    unique,
    until,
    wait_for,
    watch_app,
)

from kmon.engine.facade import EngineSettings, HostTarget, SamplerSettings, open_session
from kmon.present.dashboard_settings import DashboardSettings
from kmon.widgets.app import KmonApp
from kmon.widgets.host_screen import HostScreen

pytestmark = pytest.mark.integration

FINDING_WITHIN_S = 25  # the acceptance: the finding appears within 25 s
FD_LIMIT = 256
# sets the soft limit on open files, opens /dev/null until the process holds TARGET
# descriptors, then runs the rest of its arguments in its place (the same pid)
FD_WRAPPER = """
import os, resource, sys
limit, target = int(sys.argv[1]), int(sys.argv[2])
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
while len(os.listdir("/proc/self/fd")) < target:
    os.set_inheritable(os.open("/dev/null", os.O_RDONLY), True)
os.execv(sys.argv[3], sys.argv[3:])
"""

# as FD_WRAPPER, and then opens one more every second for as long as the workload runs
LEAK_WRAPPER = """
import os, resource, runpy, sys, threading, time
limit, target = int(sys.argv[1]), int(sys.argv[2])
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
while len(os.listdir("/proc/self/fd")) < target:
    os.open("/dev/null", os.O_RDONLY)

def leak():
    while True:
        time.sleep(1)
        os.open("/dev/null", os.O_RDONLY)

threading.Thread(target=leak, daemon=True).start()
module, sys.argv = sys.argv[5], [sys.argv[5], *sys.argv[6:]]  # after: python -m MODULE
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def fd_holder(start_client, held: int):
    """A consumer (its own client.id) under a soft limit of FD_LIMIT files, holding ``held``
    descriptors before its client starts."""
    wrapper = [sys.executable, "-c", FD_WRAPPER, str(FD_LIMIT), str(held)]
    return start_client("consumer", wrapper=wrapper,
                        extra_args=("--client-id", unique("fd-holder")))


def attach_findings(pid: int) -> list[dict]:
    result = kmon("attach", str(pid), "--once", "--json", "--settle", "0")
    assert result.returncode == 0, result.stderr
    (process,) = json.loads(result.stdout)["processes"]
    return process["findings"]


def ps_findings(*pids: int) -> dict[int, list[dict]]:
    """``kmon ps -o json``'s findings of ``pids`` (the host runs other tests' clients too)."""
    result = kmon("ps", "-o", "json", "--settle", "0")
    assert result.returncode == 0, result.stderr
    return {row["pid"]: row["findings"] for row in json.loads(result.stdout)["processes"]
            if row["pid"] in pids}


def of(findings: list[dict], reason: str) -> list[dict]:
    return [f for f in findings if f["reason"] == reason]


def test_a_consumer_near_its_fd_limit_is_named_with_its_figures(start_on):
    started = time.monotonic()
    client = fd_holder(start_on, held=210)
    (found,) = wait_for(lambda: of(attach_findings(client.pid), "fd_near_limit"),
                        "fd_near_limit in kmon attach --json", FINDING_WITHIN_S, every=0.5)
    took = time.monotonic() - started
    evidence = found["evidence"]
    assert evidence["limit"] == FD_LIMIT
    assert 0.8 * FD_LIMIT <= evidence["open_fds"] < FD_LIMIT
    assert 1 <= evidence["kafka_sockets"] <= 10  # its connections to the three brokers
    assert f"{evidence['open_fds']} of {FD_LIMIT} file descriptors" in found["detail"]
    assert "LimitNOFILE" in found["fix"] and found["since_ms"] > 0
    (in_ps,) = of(ps_findings(client.pid)[client.pid], "fd_near_limit")
    assert in_ps["evidence"]["limit"] == FD_LIMIT
    print(f"fd_near_limit: {took:.1f} s from the client's start to the finding in attach")


def test_a_count_rising_across_polls_is_named_a_leak(start_client):
    wrapper = [sys.executable, "-c", LEAK_WRAPPER, str(FD_LIMIT), "200"]
    client = start_client("consumer", wrapper=wrapper,
                          extra_args=("--client-id", unique("fd-leaker")))
    stream = attach_stream(client.pid, interval="500ms")
    try:
        started = time.monotonic()
        while True:
            (process,) = json.loads(stream.wait_line("{", FINDING_WITHIN_S))["processes"]
            found = of(process["findings"], "fd_near_limit")
            if found and "descriptor leak" in found[0]["detail"]:
                break
            assert time.monotonic() - started < FINDING_WITHIN_S, process["findings"]
    finally:
        stream.stop()
    assert found[0]["evidence"]["rising_by"] >= 5, found
    print(f"leak: named {time.monotonic() - started:.1f} s after attach began: "
          f"{found[0]['detail']}")


def test_a_consumer_at_a_tenth_of_its_fd_limit_raises_nothing(start_on):
    client = fd_holder(start_on, held=0)
    assert attach_findings(client.pid) == []
    assert ps_findings(client.pid) == {client.pid: []}


def test_two_consumers_with_one_client_id_are_named_together(start_on):
    shared, group = unique("orders-app"), unique("orders")
    # a short session: the mock cluster holds a late joiner's rebalance for the session
    # timeout less 1 s (44 s at the default)
    clients = [start_on("consumer", extra_args=("--client-id", shared, "--group", group,
                                                "-X", "session.timeout.ms=10000"),
                        ready=False) for _ in range(2)]
    for client in clients:  # joined together: one's join is the other's rebalance
        client.wait_line("READY", timeout=90)
    started = time.monotonic()
    pids = {c.pid for c in clients}
    rows = wait_for(lambda: (r := ps_findings(*pids)).keys() == pids
                    and all(of(f, "duplicate_client_id") for f in r.values()) and r,
                    "duplicate_client_id of both in kmon ps -o json", FINDING_WITHIN_S,
                    every=0.5)
    took = time.monotonic() - started
    for pid in pids:
        (found,) = of(rows[pid], "duplicate_client_id")
        assert found["evidence"]["client_id"] == shared
        assert set(found["evidence"]["pids"]) == pids
        assert all(f"PID {other}" in found["detail"] for other in pids)
    # attached alone, a process knows of no other: nothing to name
    assert of(attach_findings(clients[0].pid), "duplicate_client_id") == []
    print(f"duplicate_client_id: {took:.1f} s from both READY to both named in ps")


def test_two_consumers_with_their_own_client_ids_raise_nothing(start_on):
    clients = [start_on("consumer", extra_args=("--client-id", unique("orders-app")))
               for _ in range(2)]
    rows = ps_findings(*(c.pid for c in clients))
    assert rows == {c.pid: [] for c in clients}


def bar_lines(screen) -> tuple[str, ...]:
    """The findings bar's lines, where it is shown."""
    bar = screen.query_one("#findings")
    return bar.lines if bar.display else ()


@pytest.fixture(scope="module")
def near_limit(start_module_client):
    """A consumer of the mock cluster holding 210 of its 256 descriptors from its start, for
    the tests that look at its held finding in one view each."""
    return fd_holder(start_module_client, held=210)


def test_the_attach_screen_at_80x24_shows_the_finding_and_keeps_its_rows(near_limit,
                                                                        start_client):
    near, far = near_limit, fd_holder(start_client, held=0)

    async def drive(pid: int, wanted: bool) -> tuple[str, ...]:
        app, screen = attach_app(pid)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: table_rows(screen) and screen.view is not None,
                        "its connections")
            if wanted:
                await until(pilot, lambda: bar_lines(screen), "the findings bar")
            assert table_rows(screen)  # the table keeps rows beside the bar
            assert screen.query_one("#connections").size.height >= 6
            return bar_lines(screen)

    (line,) = asyncio.run(drive(near.pid, True))
    assert "fd near limit:" in line and f"of {FD_LIMIT} file descriptors" in line
    assert "LimitNOFILE" in line  # the fix, in words
    assert asyncio.run(drive(far.pid, False)) == ()  # none: the bar folds away


def test_the_watch_and_host_screens_name_a_shared_client_id(start_client, cluster):
    shared = unique("orders-app")
    pids = [start_client("consumer", extra_args=("--client-id", shared)).pid
            for _ in range(2)]

    def ours(screen) -> list[str]:
        return [line for line in bar_lines(screen) if shared in line]

    async def drive(app, screen) -> list[str]:
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: len(ours(screen)) == 2, "both in the findings bar",
                        polls=500)
            return ours(screen)

    app, screen = watch_app(cluster, pids)
    lines = asyncio.run(drive(app, screen))
    assert all(f"pid {pid} " in "".join(lines) for pid in pids)
    assert all("duplicate client id:" in line and "client.id of its own" in line
               for line in lines)
    session = open_session(HostTarget(), EngineSettings(
        SamplerSettings(require_kafka=False, wire="off"), discover_every_s=0.5))
    host = HostScreen(session, DashboardSettings(interval_s=0.5))
    assert len(asyncio.run(drive(KmonApp(host), host))) == 2


def test_kmon_serve_exposes_the_finding(near_limit, cluster):
    client = near_limit
    serve, address = start_serve("--interval", "250ms")
    try:
        labels = (f'cluster="{cluster_id(cluster)}"', 'process="workload consumer"',
                  'reason="fd_near_limit"')

        def scraped() -> str | None:
            return next((line for line in get(f"http://{address}/metrics")[2].splitlines()
                         if line.startswith("kmon_findings{")
                         and all(label in line for label in labels)), None)

        line = wait_for(scraped, "kmon_findings of the consumer", FINDING_WITHIN_S, every=0.5)
        assert float(line.split()[-1]) >= 1
    finally:
        serve.stop()
    assert client.proc.poll() is None


def test_kmon_record_keeps_the_finding_and_analyze_tells_it_once(near_limit, tmp_path):
    client = near_limit
    result = kmon("record", "--pid", str(client.pid), "--out", str(tmp_path / "rec"),
                  "--interval", "250ms", "--duration", "3s")
    assert result.returncode == 0, result.stderr
    rows = read(tmp_path / "rec", "findings")
    assert rows and {(r["pid"], r["reason"]) for r in rows} == {(client.pid, "fd_near_limit")}
    assert len({r["since_ms"] for r in rows}) == 1  # held: one finding over every poll
    assert json.loads(rows[0]["evidence_json"])["limit"] == FD_LIMIT
    out = tmp_path / "analysis"
    analyzed = kmon("analyze", str(tmp_path / "rec"), "--out", str(out), "--master",
                    "local[1]", timeout=240)
    assert analyzed.returncode == 0, analyzed.stderr
    assert "Findings" in analyzed.stdout
    (found,) = pq.read_table(out / "findings.parquet").to_pylist()
    assert (found["pid"], found["reason"], found["polls"]) == (client.pid, "fd_near_limit",
                                                               len(rows))
