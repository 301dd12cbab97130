"""The findings that read a process's past polls (kmon.evidence.findings.marks), as pure
functions of the marks FindingWatch keeps: ``rebootstrap`` and ``coordinator_flapping``,
each with the look-alikes that raise nothing."""

from __future__ import annotations

from kmon.engine.findings import FindingWatch
from kmon.evidence.findings import Look, coordinator_flapping, rebootstrap
from kmon.model import ClientInstance, Connection, ConnectionLife, ProcessView, Role


def conn(key: str, role: Role, broker: int | None, remote: str,
         state: str = "ESTABLISHED") -> Connection:
    node = {Role.BOOTSTRAP: -1, Role.COORDINATOR: 2147483647 - (broker or 0)}.get(role, broker)
    return Connection(key, role, node, broker, "c1", "127.0.0.1:5", remote, state)


def view(*conns: Connection, coordinator: int | None = None) -> ProcessView:
    member = ClientInstance("c1", "orders-app", "consumer", group_id="orders",
                            group_coordinator_id=coordinator,
                            config={"bootstrap.servers": "10.0.0.1:9092"})
    return ProcessView(7, "python", "python app.py", [member], list(conns))


B1, B2, B3 = (conn(f"b{i}", Role.BROKER, i, f"10.0.0.{i}:9092") for i in (1, 2, 3))
BOOT = conn("boot", Role.BOOTSTRAP, None, "lb:9092")


def run(polls: list[tuple]) -> ProcessView:
    """Each (UTC epoch ms, view[, the kernel's lives closed since the last]) observed in
    turn; the last view, with its findings."""
    watch = FindingWatch()
    for ts_ms, polled, *lives in polls:
        watch.observe(ts_ms, [polled], {}, *lives)
    return polls[-1][1]


def closed(opened_ms: int, closed_ms: int, remote: str = "10.0.0.1:9092",
           by: str = "client") -> list[ConnectionLife]:
    return [ConnectionLife(7, "127.0.0.1:6", remote, opened_ms, closed_ms, by, None)]


def reasons(polled: ProcessView) -> list[str]:
    return [f.reason for f in polled.findings]


def test_every_broker_lost_then_a_bootstrap_is_a_rebootstrap_named_while_it_recovers():
    recovering = run([(0, view(B1, B2)), (1_000, view(B1, B2)), (2_000, view()),
                      (3_000, view(BOOT)), (4_500, view(BOOT))])
    (found,) = recovering.findings
    assert found.reason == "rebootstrap" and found.since_ms == 3_000
    assert found.evidence["brokers_lost"] == ["1", "2"]
    assert found.evidence["bootstraps"] == ["lb:9092"]
    assert found.evidence["recovery_ms"] is None
    assert "no broker connection for 2.5 s yet" in found.detail


def test_the_recovery_time_runs_from_the_last_broker_gone_to_the_first_back():
    polls = [(0, view(B1)), (2_000, view()), (3_000, view(BOOT)), (6_200, view(BOOT, B1))]
    (found,) = run(polls).findings
    assert found.evidence["lost_ms"] == 2_000 and found.evidence["recovered_ms"] == 6_200
    assert found.evidence["recovery_ms"] == 4_200
    assert "recovered in 4.2 s (brokers 1)" in found.detail
    held = run([*polls, (6_200 + rebootstrap.HOLD_MS, view(B1))])
    assert reasons(held) == ["rebootstrap"]  # held for HOLD_MS after the recovery ...
    assert reasons(run([*polls, (6_201 + rebootstrap.HOLD_MS, view(B1))])) == []  # ... no more


def test_a_later_loss_without_a_bootstrap_leaves_the_rebootstrap_named():
    polls = [(0, view(B1)), (1_000, view()), (2_000, view(BOOT)), (3_000, view(B1)),
             (9_000, view()), (10_000, view(B1))]  # then its idle broker reaped, reconnected
    (found,) = run(polls).findings
    assert found.evidence["recovery_ms"] == 2_000 and found.since_ms == 2_000


def test_a_bootstrap_seen_only_beside_the_first_broker_back_still_counts():
    marks = run([(0, view(B1)), (1_000, view()), (2_000, view(BOOT, B1))])
    assert reasons(marks) == ["rebootstrap"]


# librdkafka's bootstrap connection to its only broker's address, up for a second: the one
# poll that caught it took it for broker 1, the kernel saw the client close it
MISREAD = conn("boot", Role.BROKER, 1, "10.0.0.1:9092")


def test_a_bootstrap_visit_only_the_kernel_saw_whole_is_a_rebootstrap():
    polls = [(0, view(B1)), (1_000, view()), (1_500, view(MISREAD)),
             (2_500, view(), closed(1_300, 2_300)), (3_500, view(B1))]
    (found,) = run(polls).findings
    assert found.reason == "rebootstrap", found
    assert found.evidence["bootstraps"] == ["10.0.0.1:9092"]
    assert found.evidence["lost_ms"] == 1_000 and found.evidence["recovered_ms"] == 3_500
    between = [(0, view(B1)), (1_000, view()), (2_000, view(), closed(1_100, 1_900)),
               (3_000, view(B1))]  # no poll caught it at all
    assert reasons(run(between)) == ["rebootstrap"]


def test_closes_that_are_no_bootstrap_visit_raise_nothing():
    for lives in (closed(1_300, 3_300),  # held longer than librdkafka's bootstrap broker
                  closed(1_300, 2_300, by="broker"),  # the broker closed it
                  closed(1_300, 2_300, remote="10.0.0.9:9092")):  # no bootstrap server
        polls = [(0, view(B1)), (1_000, view()), (1_500, view(MISREAD)),
                 (2_500, view(), lives), (3_500, view(B1))]
        assert reasons(run(polls)) == [], lives


def test_look_alikes_of_a_rebootstrap_raise_nothing():
    # an ordinary reconnect to one broker while the others stay
    reconnect = [(0, view(B1, B2, B3)), (1_000, view(B2, B3)), (2_000, view(B1, B2, B3))]
    # its only broker reaped when idle and connected again, with no bootstrap
    idle = [(0, view(B1)), (1_000, view()), (9_000, view(B1))]
    # a client starting: its bootstrap first, then its brokers
    starting = [(0, view(BOOT)), (1_000, view(BOOT, B1)), (2_000, view(B1, B2))]
    # a broker connection only being made (SYN_SENT) is not one held
    connecting = [(0, view(conn("b1", Role.BROKER, 1, "10.0.0.1:9092", "SYN_SENT"))),
                  (1_000, view(BOOT))]
    for polls in (reconnect, idle, starting, connecting):
        assert reasons(run(polls)) == [], polls


def test_a_coordinator_moving_three_times_in_fifteen_minutes_is_flapping():
    polls = [(0, view(B1, coordinator=1)), (60_000, view(B1, coordinator=2)),
             (120_000, view(B1)),  # between coordinators: no move of its own
             (180_000, view(B1, coordinator=3)), (240_000, view(B1, coordinator=1))]
    (found,) = run(polls).findings
    assert found.reason == "coordinator_flapping" and found.since_ms == 240_000
    assert found.evidence["brokers"] == ["1", "2", "3", "1"]
    assert found.evidence["moves"] == 3 and found.evidence["group_id"] == "orders"
    assert "moved 3 times in 180 s: broker 1 → 2 → 3 → 1" in found.detail
    # the coordinator connection's broker where the client does not name it
    by_conn = [(i * 60_000, view(conn("c", Role.COORDINATOR, b, f"10.0.0.{b}:9092")))
               for i, b in enumerate((1, 2, 1, 2))]
    assert reasons(run(by_conn)) == ["coordinator_flapping"]
    # a move older than the window no longer counts
    late = [*polls, (60_001 + coordinator_flapping.WINDOW_MS, view(B1, coordinator=1))]
    assert reasons(run(late)) == []


def test_look_alikes_of_a_flapping_coordinator_raise_nothing():
    # one move after a broker restart, and back once it returned: two moves
    restart = [(0, view(coordinator=1)), (60_000, view(coordinator=2)),
               (600_000, view(coordinator=1))]
    # the coordinator lost and found on the same broker, again and again
    same = [(i * 10_000, view(coordinator=1 if i % 2 else None)) for i in range(10)]
    # three moves, but spread over more than fifteen minutes
    slow = [(i * 500_000, view(coordinator=b)) for i, b in enumerate((1, 2, 3, 1))]
    for polls in (restart, same, slow):
        assert reasons(run(polls)) == [], polls


def test_the_marks_keep_only_changes_and_go_with_the_process():
    watch = FindingWatch()
    for ts_ms in range(0, 10_000, 1_000):
        watch.observe(ts_ms, [view(B1)], {})
    watch.observe(10_000, [view(B1, B2)], {})
    assert [m.ts_ms for m in watch.marks[7]] == [0, 10_000]
    watch.observe(11_000, [], {})
    assert 7 not in watch.marks
    assert rebootstrap.find(Look(0, [view()])) == []  # no past: nothing
