"""The findings' rules as pure functions of a poll's look (kmon.evidence.findings): when each
raises, what it says, and the look-alikes that raise nothing."""

from __future__ import annotations

from kmon.evidence.findings import Look, duplicate_client_id, fd_near_limit
from kmon.model import ClientInstance, Connection, ProcessView, Role


def view(pid: int, *clients: ClientInstance, remotes: tuple[str, ...] = (),
         sockets: int = 0) -> ProcessView:
    conns = [Connection(f"k{i}", Role.BROKER, i, i, None, "127.0.0.1:1", remote,
                        "ESTABLISHED", fd=10 + i if i < sockets else None)
             for i, remote in enumerate(remotes)]
    return ProcessView(pid, "python", f"python app{pid}.py", list(clients), conns)


def client(name: str, client_id: str, bootstrap: str = "", explicit: bool = True
           ) -> ClientInstance:
    config = {"bootstrap.servers": bootstrap} if bootstrap else {}
    if explicit:
        config["client.id"] = client_id
    return ClientInstance(name, client_id, "consumer", config)


def test_fd_near_limit_at_eighty_percent_not_below():
    views = [view(1, remotes=("b:1", "b:2"), sockets=2), view(2)]
    look = Look(10_000, views, {1: [(10_000, 205)], 2: [(10_000, 204)]}, {1: 256, 2: 256})
    (raised,) = fd_near_limit.find(look)
    assert raised.pid == 1 and raised.evidence == {
        "open_fds": 205, "limit": 256, "kafka_sockets": 2, "rising_by": 0,
        "rising_over_ms": None}
    assert "leak" not in raised.detail


def test_fd_near_limit_without_a_limit_or_a_count_raises_nothing():
    look = Look(0, [view(1), view(2)], {1: [(0, 10_000)]}, {1: None, 2: 10})
    assert fd_near_limit.find(look) == []


def test_a_count_rising_across_polls_is_named_a_leak():
    counts = [(0, 220), (5_000, 226), (10_000, 226), (15_000, 240)]
    (raised,) = fd_near_limit.find(Look(15_000, [view(1)], {1: counts}, {1: 256}))
    assert "rising, 20 more in 15 s: a descriptor leak" in raised.detail
    assert raised.evidence["rising_by"] == 20
    # a count that fell on the way is no leak
    fell = [(0, 220), (5_000, 210), (10_000, 240)]
    (steady,) = fd_near_limit.find(Look(10_000, [view(1)], {1: fell}, {1: 256}))
    assert "leak" not in steady.detail


def test_one_client_id_in_two_processes_of_one_cluster_names_both():
    views = [view(1, client("c1", "orders-app", "b:1")),
             view(2, client("c2", "orders-app"), remotes=("b:1",))]
    raised = duplicate_client_id.find(Look(0, views))
    assert {r.pid for r in raised} == {1, 2}
    assert all("PID 1" in r.detail and "PID 2" in r.detail for r in raised)


def test_one_client_id_in_two_instances_of_one_process():
    one = view(1, client("c1", "orders-app", "b:1"), client("c2", "orders-app", "b:1"))
    (raised,) = duplicate_client_id.find(Look(0, [one]))
    assert "2 client instances of one process" in raised.detail


def test_look_alikes_of_a_shared_client_id_raise_nothing():
    other_clusters = [view(1, client("c1", "orders-app", "a:1")),
                      view(2, client("c2", "orders-app", "b:1"))]
    made_up = [view(1, client("c1", "rdkafka", "b:1", explicit=False)),
               view(2, client("c2", "rdkafka", "b:1", explicit=False)),
               view(3, client("c3", "producer-1", "b:1", explicit=False)),
               view(4, client("c4", "producer-1", "b:1", explicit=False))]
    distinct = [view(1, client("c1", "orders-1", "b:1")),
                view(2, client("c2", "orders-2", "b:1"))]
    for views in (other_clusters, made_up, distinct):
        assert duplicate_client_id.find(Look(0, views)) == []


def test_a_finding_that_holds_keeps_the_time_it_was_first_raised():
    from kmon.engine.findings import FindingWatch

    watch = FindingWatch()

    def poll(ts_ms: int, client_id: str) -> list[ProcessView]:
        views = [view(1, client("c1", client_id, "b:1")), view(2, client("c2", "x", "b:1"))]
        watch.observe(ts_ms, views, {})
        return views

    assert poll(1_000, "x")[0].findings[0].since_ms == 1_000
    assert poll(2_000, "x")[0].findings[0].since_ms == 1_000
    assert poll(3_000, "y")[0].findings == []
    assert poll(4_000, "x")[0].findings[0].since_ms == 4_000  # gone and back: new again


def test_a_recorded_finding_replays_as_it_was_and_bad_evidence_is_refused():
    import pytest

    from kmon.engine.playback import snapshot_from_dict
    from kmon.engine.recording_schema import SNAPSHOT, SchemaError, check
    from kmon.model import Finding, Snapshot

    finding = Finding("fd_near_limit", 1_000, "230 of 256", {"open_fds": 230, "who": [1, 2]},
                      "raise LimitNOFILE")
    record = Snapshot(2_000, "h", [view(1)]).to_dict()
    record["processes"][0]["findings"] = [finding.to_dict()]
    check(record, SNAPSHOT, "line 1")
    assert snapshot_from_dict(record).processes[0].findings == [finding]
    record["processes"][0]["findings"][0]["evidence"] = {"open_fds": 2 ** 70}
    with pytest.raises(SchemaError, match="findings"):
        check(record, SNAPSHOT, "line 1")
