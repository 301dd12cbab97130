"""The host view (``kmon`` with no arguments), driven with Textual's pilot: the demo's
clients, an uninstrumented kafka-python consumer that maps no client library, and the
embedded cluster that serves them."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest
from helpers import (
    KAFKA_PYTHON_CONSUMER,
    Child,
    attach_to,
    cells,
    help_rows,
    kmon,
    table_rows,
    the_list_keys_work,
    until,
)

from kmon.devtools.demo_workload import Demo
from kmon.engine.facade import EngineSettings, HostTarget, SamplerSettings, open_session
from kmon.present.dashboard_settings import DashboardSettings
from kmon.widgets.app import KmonApp
from kmon.widgets.host_screen import HostScreen

pytestmark = pytest.mark.integration  # real processes, a cluster or Spark


def test_the_host_view_lists_every_kafka_client_by_cluster_and_attaches(spool_dir, tmp_path):
    pytest.importorskip("kafka", reason="kafka-python 2.0.x is in the test extra")
    with Demo() as demo:
        agentless = Child([sys.executable, "-c", KAFKA_PYTHON_CONSUMER, demo.bootstrap,
                           "host-view", "orders"])
        try:
            agentless.wait_line("READY")
            session = open_session(HostTarget(), EngineSettings(
                SamplerSettings(require_kafka=False, wire="off"), discover_every_s=0.5))
            screen = HostScreen(session, DashboardSettings(interval_s=0.5, record_dir=tmp_path))
            app = KmonApp(screen)
            served_by = demo.children[0].pid  # the embedded cluster: it serves, it is no client
            wanted = {*demo.clients, agentless.pid}

            def rows() -> dict[int, list[str]]:
                """Each process's row, its cluster's heading (the row above its cluster's
                rows, with no pid) first."""
                found, heading = {}, ""
                for row in cells(screen, "processes"):
                    if row[0]:
                        found[int(row[0])] = [heading, *row]
                    else:
                        heading = row[1]
                return found

            async def drive() -> None:
                async with app.run_test(size=(190, 50)) as pilot:
                    # the agentless consumer maps no Kafka library: it is found by its
                    # sockets to the brokers the demo's clients name; its cluster's heading
                    # counts the brokers as the clients come to know them all
                    every_broker = f"{demo.brokers} brokers: 127.0.0.1:"
                    await until(pilot, lambda: wanted <= rows().keys()
                                and {rows()[pid][0] for pid in wanted} == {
                                    rows()[agentless.pid][0]}
                                and rows()[agentless.pid][0].startswith(every_broker)
                                and served_by not in rows(), "every client in one cluster",
                                polls=600)
                    assert {rows()[pid][2] for pid in demo.clients} <= {"workload producer",
                                                                         "workload consumer"}
                    assert os.getpid() not in rows()
                    await the_list_keys_work(pilot, screen, demo.clients)
                    attached = await attach_to(pilot, screen, agentless.pid)
                    assert attached.cluster == screen.cluster_of(agentless.pid)
                    await until(pilot, lambda: table_rows(attached), "its connections")
                    await pilot.press("question_mark")  # back is one of its keys now
                    await until(pilot, lambda: app.screen is not attached, "its help")
                    assert [w for _, w in app.screen.rows] == help_rows(attached)
                    await pilot.press("escape")
                    await until(pilot, lambda: app.screen is attached, "attached again")
                    await pilot.press("q")  # back to the list, as escape
                    await until(pilot, lambda: app.screen is screen, "the host view again")

            asyncio.run(drive())
        finally:
            agentless.stop()


def test_kmon_with_no_arguments_is_the_host_view_and_needs_a_terminal():
    result = kmon()
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "needs a terminal" in result.stderr
