"""The cluster behind `kmon watch`: refresh, backoff, and groups merged with local clients."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections import Counter

import pytest
from confluent_kafka.admin import AdminClient
from helpers import Child, wait_for

from kmon.engine.cluster_watch import (
    SOURCE_CLUSTER,
    SOURCE_LOCAL,
    ClusterView,
    ClusterWatcher,
    broker_connection_counts,
    groups_coordinated,
    groups_view,
)
from kmon.engine.monitor import Monitor
from kmon.engine.sampler import ProcessSampler, SamplerSettings
from kmon.model import Role
from kmon.sources.brokers.admin import GROUPS_UNSUPPORTED, GroupInfo, GroupMember
from kmon.sources.brokers.dns import Resolver
from kmon.sources.clients.librdkafka_stats import parse_record
from kmon.sources.clients.spool import SpoolError
from kmon.sources.kernel.host_sockets import client_pids
from kmon.sources.kernel.socket_readers import open_socket_reader


class FakeClock:
    """Stands in for time.monotonic: the test moves time, so backoff is checked exactly."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.integration
def test_refresh_reads_brokers_and_groups_unavailable_is_no_error(cluster):
    clock = FakeClock()
    watcher = ClusterWatcher(cluster, {}, clock=clock)
    assert watcher.due()
    view = watcher.refresh()

    assert view is watcher.view
    own = AdminClient({"bootstrap.servers": cluster}).list_topics(timeout=10)
    assert {b.address for b in view.brokers} == set(cluster.split(","))
    assert [b.broker_id for b in view.brokers] == sorted(own.brokers)
    assert view.error is None
    assert view.groups is None and view.groups_error == GROUPS_UNSUPPORTED
    assert view.fetched_at is not None
    assert (view.attempts, view.failures) == (1, 0)
    assert not watcher.due() and watcher.next_retry_in_s is None
    clock.now += watcher.refresh_s
    assert watcher.due()


def test_unreachable_cluster_backs_off_doubling_up_to_the_cap():
    clock = FakeClock()
    watcher = ClusterWatcher("127.0.0.1:1", {}, timeout_s=0.2, max_backoff_s=5.0, clock=clock)
    delays = []
    for _ in range(5):
        assert watcher.due()
        view = watcher.refresh()
        delays.append(watcher.next_retry_in_s)
        assert not watcher.due()
        clock.now += delays[-1]
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert "127.0.0.1:1" in view.error and "\n" not in view.error
    assert "Traceback" not in view.error
    assert view.brokers == () and view.fetched_at is None
    assert (view.attempts, view.failures) == (5, 5)


def stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is stopped (state T in its /proc stat)."""
    tasks = os.listdir(f"/proc/{pid}/task")
    states = []
    for tid in tasks:
        with open(f"/proc/{pid}/task/{tid}/stat", encoding="ascii") as handle:
            states.append(handle.read().rsplit(")", 1)[1].split()[0])
    return bool(states) and all(state == "T" for state in states)


@pytest.mark.integration
def test_a_failed_refresh_keeps_the_last_good_view_and_success_resets_backoff():
    cluster = Child([sys.executable, "-m", "kmon", "devcluster", "--brokers", "2"])
    try:
        bootstrap = cluster.wait_line("127.0.0.1:")
        clock = FakeClock()
        watcher = ClusterWatcher(bootstrap, {}, timeout_s=1.0, clock=clock)
        good = watcher.refresh()
        assert len(good.brokers) == 2 and good.error is None

        os.kill(cluster.pid, signal.SIGSTOP)  # a hung cluster: connections open, no answers
        try:
            wait_for(lambda: stopped(cluster.pid), "every thread of the cluster stopped", 10)
            # librdkafka may still answer one metadata request it had under way or cached
            last_good = good
            for _ in range(8):
                clock.now += watcher.refresh_s
                failed = watcher.refresh()
                if failed.error:
                    break
                last_good = failed
        finally:
            os.kill(cluster.pid, signal.SIGCONT)
        assert failed.error and bootstrap in failed.error
        assert failed.brokers == good.brokers and failed.fetched_at == last_good.fetched_at
        assert failed.groups_error == good.groups_error
        assert watcher.next_retry_in_s == 1.0

        clock.now += 1.0
        again = watcher.refresh()
        assert again.error is None and again.brokers == good.brokers
        assert (again.attempts - failed.attempts, again.failures) == (1, 1)
        assert watcher.next_retry_in_s is None
        clock.now += watcher.refresh_s - 0.5
        assert not watcher.due()
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def consumer_snapshot(start_module_client):
    """A real instrumented consumer in its group, its own statistics, and kmon's snapshot
    (the module's tests only read them)."""
    consumer = start_module_client("consumer")
    stats = consumer.own_stats()
    sampler = ProcessSampler(consumer.pid, open_socket_reader(), SamplerSettings())
    snapshot, _ = Monitor([sampler]).poll()
    return consumer, stats, snapshot


def coordinator_of(stats: dict) -> int:
    """The group coordinator's broker id, as the consumer's own statistics name it."""
    learned = {b["nodename"]: b["nodeid"] for b in stats["brokers"].values()
               if b["source"] == "learned"}
    return learned[stats["brokers"]["GroupCoordinator"]["nodename"]]


@pytest.mark.integration
def test_groups_from_local_clients_when_the_cluster_cannot_list_them(cluster, consumer_snapshot):
    consumer, stats, snapshot = consumer_snapshot
    coordinator = coordinator_of(stats)
    view = ClusterWatcher(cluster, {}).refresh()
    assert view.groups is None

    (client,) = snapshot.processes[0].clients
    group_id = f"kmon-test-group-{consumer.pid}"
    assert client.group_id == group_id
    assert client.group_coordinator_id == coordinator
    assert client.group_assignment_size == stats["cgrp"]["assignment_size"] > 0
    assert json.loads(json.dumps(snapshot.to_dict()))["processes"][0]["clients"][0][
        "group_coordinator_id"] == coordinator

    (row,) = groups_view(view, snapshot)
    assert (row.group_id, row.source) == (group_id, SOURCE_LOCAL)
    assert row.coordinator_id == coordinator
    assert (row.state, row.join_state) == (stats["cgrp"]["state"], stats["cgrp"]["join_state"])
    assert (row.members, row.local_members) == (None, 1)
    assert groups_coordinated([row]) == Counter({coordinator: 1})

    (conn,) = [c for c in snapshot.processes[0].connections if c.role is Role.COORDINATOR]
    assert conn.broker_id == coordinator
    counts = broker_connection_counts(snapshot)
    assert counts[coordinator][Role.COORDINATOR] == 1
    assert sum(sum(c.values()) for c in counts.values()) == sum(
        c.broker_id is not None for c in snapshot.processes[0].connections)

    assert consumer.pid in client_pids(view.metadata.endpoints(Resolver()))


@pytest.mark.integration
def test_cluster_groups_are_merged_with_local_clients(consumer_snapshot):
    consumer, stats, snapshot = consumer_snapshot
    group_id = f"kmon-test-group-{consumer.pid}"
    members = tuple(GroupMember(f"c{i}", "10.0.0.1") for i in range(3))
    view = ClusterView("b:9092", groups=(GroupInfo(group_id, "stable", 3, members),
                                         GroupInfo("idle-group", "empty", 1, ())))
    rows = {r.group_id: r for r in groups_view(view, snapshot)}
    assert set(rows) == {group_id, "idle-group"}
    ours = rows[group_id]
    assert (ours.source, ours.state, ours.coordinator_id) == (SOURCE_CLUSTER, "stable", 3)
    assert (ours.members, ours.local_members) == (3, 1)
    assert ours.join_state == stats["cgrp"]["join_state"]
    assert (rows["idle-group"].members, rows["idle-group"].local_members) == (0, 0)
    assert groups_coordinated(rows.values()) == Counter({3: 1, 1: 1})


def spool_record(cgrp: object) -> dict:
    return {"proc_start": 1.0, "written_ms": 1, "config": {},
            "stats": {"name": "rdkafka#consumer-1", "brokers": {}, "cgrp": cgrp}}


def test_cgrp_statistics_are_parsed(tmp_path):
    path = tmp_path / "1-rdkafka_consumer-1.json"
    cgrp = {"state": "up", "stateage": 5503, "join_state": "steady", "rebalance_age": 2451,
            "rebalance_cnt": 1, "rebalance_reason": "", "assignment_size": 4}
    group = parse_record(path, spool_record(cgrp)).group
    assert (group.state, group.join_state, group.state_age_ms) == ("up", "steady", 5503)
    assert (group.rebalance_age_ms, group.rebalance_count, group.assignment_size) == (2451, 1, 4)
    assert parse_record(path, spool_record(None)).group is None


@pytest.mark.parametrize(("cgrp", "word"), [
    (["up"], "cgrp is not an object"),
    ({"state": 3}, "cgrp state"),
    ({"join_state": None}, "cgrp join_state"),
    ({"assignment_size": "4"}, "cgrp assignment_size"),
    ({"rebalance_cnt": True}, "cgrp rebalance_cnt"),
])
def test_wrongly_typed_cgrp_is_a_spool_error_naming_file_and_field(tmp_path, cgrp, word):
    path = tmp_path / "1-rdkafka_consumer-1.json"
    with pytest.raises(SpoolError) as err:
        parse_record(path, spool_record(cgrp))
    message = str(err.value)
    assert str(path) in message and word in message and "\n" not in message
