"""The Java client log source: line formats of Kafka 2.x-4.x, following a real file, node tables."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

import pytest

from kmon.classify import MAX_INT
from kmon.evidence.java_log_nodes import NodeTable
from kmon.model import Role
from kmon.sources.jvm.java_log import JavaLogEvent, LogFollower, parse_line, parse_timestamp

NC = "(org.apache.kafka.clients.NetworkClient)"


def local_ms(*parts: int) -> int:
    """Epoch ms of a naive (local-time) timestamp, as the parser reads it."""
    *whole, ms = parts
    return int(datetime(*whole).timestamp()) * 1000 + ms


def utc_ms(*parts: int) -> int:
    *whole, ms = parts
    return int(datetime(*whole, tzinfo=timezone.utc).timestamp()) * 1000 + ms


# --- parse_line: one sample per version / client / level / layout -----------

# (line, expected fields). Layouts: Kafka's own log4j "[%d] %p %m (%c)", log4j
# "%d %p [%t] %c: %m", Spring Boot 2 and 3, logback's time-only default.
SAMPLES = [
    pytest.param(  # 2.0: no "using address" yet; log4j 1 layout with thread and logger
        "2019-02-03 04:05:06,789 DEBUG [kafka-producer-network-thread | producer-1] "
        "org.apache.kafka.clients.NetworkClient: [Producer clientId=producer-1] "
        "Initiating connection to node broker1:9092 (id: -1 rack: null)",
        dict(kind="connecting", node_id=-1, host="broker1", port=9092, address=None,
             client_id="producer-1", client_type="producer", group_id=None,
             ts_ms=local_ms(2019, 2, 3, 4, 5, 6, 789)),
        id="2.0-producer-debug-connecting"),
    pytest.param(  # 2.1-2.8: "using address host/ip"
        "2021-03-04 10:11:12,345 DEBUG [main] NetworkClient - [Consumer clientId=consumer-1, "
        "groupId=orders] Initiating connection to node localhost:9092 (id: -1 rack: null) "
        "using address localhost/127.0.0.1",
        dict(kind="connecting", node_id=-1, host="localhost", port=9092, address="127.0.0.1",
             client_id="consumer-1", group_id="orders", client_type="consumer"),
        id="2.7-consumer-debug-connecting"),
    pytest.param(
        "2021-03-04 10:11:12.400 DEBUG 4242 --- [ad | adminclient-1] "
        "o.a.kafka.clients.NetworkClient          : [AdminClient clientId=adminclient-1] "
        "Completed connection to node -1. Fetching API versions.",
        dict(kind="connected", node_id=-1, client_id="adminclient-1", client_type="admin",
             ts_ms=local_ms(2021, 3, 4, 10, 11, 12, 400)),
        id="2.x-admin-spring-boot-2-connected"),
    pytest.param(
        "[2021-03-04 10:11:12,500] DEBUG [Producer clientId=p1] Completed connection to node 1. "
        f"Ready. {NC}",
        dict(kind="connected", node_id=1, client_type="producer"), id="no-api-versions-ready"),
    pytest.param(
        "2021-03-04 10:11:13,000 DEBUG [Consumer clientId=consumer-1, groupId=orders] Sending "
        "metadata request (type=MetadataRequest, topics=orders) to node localhost:9092 "
        "(id: -1 rack: null)",
        dict(kind="metadata_request", node_id=-1, host="localhost", port=9092),
        id="2.1-metadata-request"),
    pytest.param(
        "[2023-06-07 08:09:10,111] DEBUG [Producer clientId=producer-1] Sending metadata request "
        "MetadataRequestData(topics=[MetadataRequestTopic(topicId=AAAAAAAAAAAAAAAAAAAAAA, "
        "name='orders')], allowAutoTopicCreation=true, includeClusterAuthorizedOperations=false, "
        f"includeTopicAuthorizedOperations=false) to node broker2:9093 (id: 2 rack: r2) {NC}",
        dict(kind="metadata_request", node_id=2, host="broker2", port=9093,
             ts_ms=local_ms(2023, 6, 7, 8, 9, 10, 111)),
        id="3.x-metadata-request-kafka-layout"),
    pytest.param(  # <= 3.0 DEBUG, 3.1-3.8 INFO
        "2021-03-04 10:11:14,000 DEBUG [Consumer clientId=consumer-1, groupId=orders] "
        "Node -1 disconnected.",
        dict(kind="disconnected", node_id=-1, detail=None), id="2.x-debug-disconnected"),
    pytest.param(
        "[2023-06-07 08:09:10,222] INFO [Consumer clientId=c, groupId=g] Node 1 disconnected. "
        + NC,
        dict(kind="disconnected", node_id=1), id="3.x-info-disconnected"),
    pytest.param(  # 3.9+: idle expiry told apart
        "2024-11-02T10:00:00.000Z DEBUG [Producer clientId=p] Idle connection to node 1 "
        "disconnected.",
        dict(kind="idle_close", node_id=1, detail="idle", ts_ms=utc_ms(2024, 11, 2, 10, 0, 0, 0)),
        id="3.9-idle-disconnected-iso-z"),
    pytest.param(  # Selector, TRACE, all versions
        "[2023-06-07 08:18:10,333] TRACE [Consumer clientId=c, groupId=g] About to close the idle "
        "connection from -1 due to being idle for 540001 millis "
        "(org.apache.kafka.common.network.Selector)",
        dict(kind="idle_close", node_id=-1, idle_ms=540001), id="selector-trace-idle"),
    pytest.param(
        "[2023-06-07 08:09:10,444] INFO [Consumer clientId=consumer-orders-1, groupId=orders] "
        "Discovered group coordinator broker1:9092 (id: 2147483646 rack: null) "
        "(org.apache.kafka.clients.consumer.internals.ConsumerCoordinator)",
        dict(kind="coordinator", node_id=2147483646, host="broker1", port=9092,
             coordinator_type="group", group_id="orders"),
        id="3.x-classic-coordinator"),
    pytest.param(  # static membership prefix
        "2022-01-01 00:00:00,000 INFO [Consumer instanceId=i-1, clientId=c-1, groupId=g] "
        "Discovered group coordinator b:9092 (id: 2147483645 rack: null)",
        dict(kind="coordinator", node_id=2147483645, client_id="c-1", group_id="g"),
        id="3.x-static-member-coordinator"),
    pytest.param(  # 3.7+ CoordinatorRequestManager logs the response: nodeId is the broker id
        "2025-04-01T09:00:00.123+02:00  INFO 1 --- [consumer_background_thread] "
        "o.a.k.c.c.i.CoordinatorRequestManager   : [Consumer clientId=c-2, groupId=g] Discovered "
        "group coordinator Coordinator(key='g', nodeId=2, host='broker2', port=9092, errorCode=0, "
        "errorMessage='')",
        dict(kind="coordinator", node_id=2147483645, host="broker2", port=9092,
             coordinator_type="group", ts_ms=utc_ms(2025, 4, 1, 7, 0, 0, 123)),
        id="4.x-new-consumer-coordinator-spring-boot-3"),
    pytest.param(  # transactional producer: the coordinator is the broker's own node id
        "[2023-06-07 08:09:10,555] INFO [Producer clientId=p, transactionalId=tx-1] Discovered "
        "transaction coordinator broker3:9092 (id: 3 rack: null) "
        "(org.apache.kafka.clients.producer.internals.TransactionManager)",
        dict(kind="coordinator", node_id=3, coordinator_type="transaction", client_id="p"),
        id="3.x-transaction-coordinator"),
    pytest.param(
        "2020-01-01 00:00:00,000 INFO [Consumer clientId=c, groupId=g] Group coordinator "
        "broker1:9092 (id: 2147483646 rack: null) is unavailable or invalid, will attempt "
        "rediscovery",
        dict(kind="coordinator_lost", node_id=2147483646), id="2.x-coordinator-lost"),
    pytest.param(
        "[2024-01-01 00:00:00,000] INFO [Consumer clientId=c, groupId=g] Group coordinator "
        "broker1:9092 (id: 2147483646 rack: null) is unavailable or invalid due to cause: "
        "coordinator unavailable. isDisconnected: true. Rediscovery will be attempted.",
        dict(kind="coordinator_lost", node_id=2147483646), id="3.x-coordinator-lost"),
    pytest.param(  # 4.x Node.toString may carry more after the rack
        "2025-05-05 05:05:05,005 DEBUG [Producer clientId=p4] Initiating connection to node "
        "broker1:9092 (id: 1 rack: null isFenced: false) using address broker1/10.0.0.1",
        dict(kind="connecting", node_id=1, host="broker1", port=9092, address="10.0.0.1"),
        id="4.x-node-isfenced"),
    pytest.param(
        "[2025-01-01 00:00:00,000] WARN [AdminClient clientId=a] Connection to node -1 "
        "(localhost/127.0.0.1:9092) could not be established. Node may not be available. "
        f"{NC}",
        dict(kind="connect_failed", node_id=-1, host="localhost", port=9092, address="127.0.0.1",
             detail="could not be established"),
        id="4.x-connect-failed"),
    pytest.param(
        "2020-01-01 00:00:00,000 WARN [Producer clientId=p] Connection to node 1 "
        "(broker1/<unresolved>:9092) could not be established. Broker may not be available.",
        dict(kind="connect_failed", node_id=1, host="broker1", port=9092, address=None),
        id="2.x-connect-failed-unresolved"),
    pytest.param(
        "[2023-01-01 00:00:00,000] WARN [Producer clientId=p] Bootstrap broker localhost:9092 "
        "(id: -1 rack: null) disconnected (org.apache.kafka.clients.NetworkClient)",
        dict(kind="disconnected", node_id=-1, host="localhost", port=9092,
             detail="bootstrap broker disconnected"),
        id="bootstrap-broker-disconnected"),
    pytest.param(
        "[2023-01-01 00:00:00,000] INFO [Producer clientId=p] Disconnecting from node 2 due to "
        "request timeout.",
        dict(kind="disconnected", node_id=2, detail="request timeout"), id="request-timeout"),
    pytest.param(
        "[2023-01-01 00:00:00,000] INFO [Producer clientId=p] Disconnecting from node 2 due to "
        "socket connection setup timeout. The timeout value is 10000 ms.",
        dict(kind="connect_failed", node_id=2, detail="connection setup timeout"),
        id="setup-timeout"),
    pytest.param(
        "[2023-01-01 00:00:00,000] INFO [Consumer clientId=c, groupId=g] Client requested "
        "disconnect from node 2147483646",
        dict(kind="disconnected", node_id=2147483646, detail="client requested"),
        id="client-requested-disconnect"),
    pytest.param(  # logback's default layout has no date: the read time is used
        "12:00:00.123 [kafka-producer-network-thread | p] DEBUG o.a.k.clients.NetworkClient - "
        "[Producer clientId=p] Initiating connection to node [::1]:9092 (id: -1 rack: null) "
        "using address localhost/0:0:0:0:0:0:0:1",
        dict(kind="connecting", node_id=-1, host="[::1]", port=9092, address="0:0:0:0:0:0:0:1",
             ts_ms=None),
        id="logback-time-only-ipv6"),
    # kafka-clients 4.4.0 as it logs through slf4j-simple (dateTimeFormat with zone): its
    # group coordinator connection is "+B" (GroupCoordinatorNode), kmon's MAX_INT - B.
    pytest.param(
        "2026-11-24T05:00:56.852Z [main] INFO org.apache.kafka.clients.consumer.internals."
        "ConsumerCoordinator - [Consumer clientId=c1, groupId=g1] Discovered group coordinator "
        "127.0.0.1:44925 (id: +1 rack: null isFenced: false)",
        dict(kind="coordinator", node_id=MAX_INT - 1, host="127.0.0.1", port=44925,
             coordinator_type="group", ts_ms=utc_ms(2026, 11, 24, 5, 0, 56, 852)),
        id="4.4-classic-coordinator-plus-id"),
    pytest.param(
        "2026-11-24T05:00:56.868Z [main] DEBUG org.apache.kafka.clients.NetworkClient - "
        "[Consumer clientId=c1, groupId=g1] Initiating connection to node 127.0.0.1:44925 "
        "(id: +1 rack: null isFenced: false) using address /127.0.0.1",
        dict(kind="connecting", node_id=MAX_INT - 1, host="127.0.0.1", port=44925,
             address="127.0.0.1"),
        id="4.4-connecting-to-coordinator"),
    pytest.param(
        "2026-11-24T05:00:56.951Z [main] DEBUG org.apache.kafka.clients.NetworkClient - "
        "[Consumer clientId=c1, groupId=g1] Completed connection to node +1. Fetching API "
        "versions.",
        dict(kind="connected", node_id=MAX_INT - 1), id="4.4-connected-to-coordinator"),
    pytest.param(  # every request at DEBUG: the connection's last I/O
        "2026-11-24T05:00:57.279Z [kafka-coordinator-heartbeat-thread | g1] DEBUG "
        "org.apache.kafka.clients.NetworkClient - [Consumer clientId=c1, groupId=g1] Sending "
        "SYNC_GROUP request with header RequestHeader(apiKey=SYNC_GROUP, apiVersion=5, "
        "clientId=c1, correlationId=12, headerVersion=2) and timeout 30000 to node +1: "
        "SyncGroupRequestData(groupId='g1')",
        dict(kind="io", node_id=MAX_INT - 1, detail="sent",
             ts_ms=utc_ms(2026, 11, 24, 5, 0, 57, 279)),
        id="4.4-request-sent"),
    pytest.param(
        "2026-11-24T05:00:38.648Z [kafka-producer-network-thread | p1] DEBUG "
        "org.apache.kafka.clients.NetworkClient - [Producer clientId=p1] Received API_VERSIONS "
        "response from node -2 for request with header RequestHeader(apiKey=API_VERSIONS, "
        "apiVersion=5, clientId=p1, correlationId=0, headerVersion=2): ApiVersionsResponseData()",
        dict(kind="io", node_id=-2, detail="received", client_type="producer"),
        id="4.4-response-received"),
]


@pytest.mark.parametrize(("line", "expected"), SAMPLES)
def test_parse_line_reads_each_format(line: str, expected: dict) -> None:
    event = parse_line(line)
    assert event is not None, line
    for name, value in expected.items():
        assert getattr(event, name) == value, (name, event)
    assert event.raw == line


@pytest.mark.parametrize("line", [
    "",
    "\x00\xff\xfe garbage \x1b[31m",
    "[2023-06-07 08:09:10,111] INFO [Producer clientId=p] Instantiated an idempotent producer.",
    "[2023-06-07 08:09:10,111] INFO [Consumer clientId=c, groupId=g] Cancelled in-flight FETCH "
    "request with correlation id 7 due to node 1 being disconnected",
    "Client requested disconnect from node 3, which is already disconnected",
    "2026-11-24T05:32:38.249Z [main] DEBUG org.apache.kafka.clients.NetworkClient - [Consumer "
    "clientId=c, groupId=g] Client requested disconnect from node +2, which is already "
    "disconnected",  # 4.4.0, after NOT_COORDINATOR: nothing new, and not unreadable either
    "Initiating connection to node broker1:9092 (id: one rack: null)",
    "Node x disconnected.",
    "Initiating connection to node b:9092 (id: +9999999999 rack: null)",  # no such broker
])
def test_lines_without_an_event_give_none(line: str, tmp_path: Path) -> None:
    assert parse_line(line) is None
    if "already disconnected" in line:  # not counted as a line kmon cannot read either
        (tmp_path / "client.log").write_text(line + "\n")
        follower = LogFollower(tmp_path / "client.log", from_start=True)
        assert (follower.poll(), follower.unparsed, follower.ignored) == ([], 0, 1)


def test_a_port_no_socket_has_is_left_out_of_a_line_read() -> None:
    """``str.isdigit`` holds for "²", which int() refuses: the line is read, its port left
    out (a client's log is its own to write)."""
    event = parse_line("[2025-01-01 00:00:00,000] WARN [AdminClient clientId=a] Connection to "
                       "node -1 (localhost/127.0.0.1:²) could not be established.")
    assert event is not None
    assert (event.kind, event.node_id, event.port, event.address) == (
        "connect_failed", -1, None, None)
    for port in ("65536", "9" * 100):  # none a socket has; 5,000 digits int() refuses
        event = parse_line("[AdminClient clientId=a] Connection to node -1 (localhost/"
                           f"127.0.0.1:{port}) could not be established.")
        assert event is not None and (event.node_id, event.port) == (-1, None)
    assert parse_line("[AdminClient clientId=a] Connection to node -1 (localhost/127.0.0.1:"
                      f"{'9' * 5000}) could not be established.") is None  # past the span


@pytest.mark.parametrize("line", [
    "[Consumer clientId=c, groupId=g] Discovered group coordinator Coordinator(key=g, "
    "nodeId=99999999999999999999, host='h', port=9092",
    "[Consumer clientId=c, groupId=g] Discovered group coordinator Coordinator(key=g, "
    f"nodeId={'9' * 5000}, host='h', port=9092",
    "[Consumer clientId=c, groupId=g] Discovered group coordinator Coordinator(key=g, "
    "nodeId=1, host='h', port=99999",
    "[Producer clientId=p] Initiating connection to node h:99999 (id: 1 rack: null) using "
    "address /127.0.0.1",
    f"[Producer clientId=p] Initiating connection to node h:{'9' * 5000} (id: 1 rack: null)",
    "[Producer clientId=p] About to close the idle connection from 1 due to being idle for "
    f"{'9' * 5000} millis",
])
def test_a_number_no_broker_or_socket_has_leaves_the_line_unread(line: str) -> None:
    """A client's log is its own to write: a coordinator's node id of 20 digits reached the
    rows (past int64: ``--json`` and the recording could not write it), one of 5,000 digits
    failed int() inside the follower's poll. A broker id past MAX_BROKER_ID, a port past
    65,535 or an idle time past 18 digits is no event."""
    assert parse_line(line) is None


@pytest.mark.parametrize("unit", [
    "[Consumer a=", "Bootstrap broker ", "Connection to node x (", "Group coordinator ",
    "Sending metadata request ", "Sending X request with header RequestHeader(",
    "Discovered group coordinator Coordinator(key=", "a"])
def test_the_longest_line_a_poll_reads_is_parsed_in_one_pass(unit: str) -> None:
    """A client's log line of 200 KB repeating ``[Consumer a=`` held a poll 7.5 s (one of
    1 MiB, the longest the follower keeps, about 3.5 min): patterns with ``.*`` were tried
    from every occurrence of their first words. Each now reads a line once (a regression
    hangs this test until pytest-timeout ends it)."""
    for head in ("", "Node 1 disconnected. ", "[Consumer clientId="):
        line = head + unit * ((1 << 20) // len(unit))
        event = parse_line(line)
        assert event is None or event.node_id == 1


def test_timestamps() -> None:
    assert parse_timestamp("2024-05-01 12:00:00,123 INFO x") == local_ms(2024, 5, 1, 12, 0, 0, 123)
    assert parse_timestamp("[2024-05-01 12:00:00,5] x") == local_ms(2024, 5, 1, 12, 0, 0, 500)
    assert parse_timestamp("2024-05-01T12:00:00.123456-0130 x") == utc_ms(
        2024, 5, 1, 13, 30, 0, 123)
    assert parse_timestamp("2024-05-01T12:00:00Z") == utc_ms(2024, 5, 1, 12, 0, 0, 0)
    assert parse_timestamp("2024-13-01 12:00:00,000 bad month") is None
    assert parse_timestamp("INFO 2024-05-01 12:00:00,000 not at the start") is None


def test_event_is_a_plain_value() -> None:
    event = parse_line("[Producer clientId=p] Node 1 disconnected.")
    assert event == JavaLogEvent(kind="disconnected", node_id=1, client_id="p",
                                 client_type="producer",
                                 raw="[Producer clientId=p] Node 1 disconnected.")


# --- LogFollower on real files -------------------------------------------------

P = "[Producer clientId=p]"
LINE_A = f"[2024-05-01 12:00:00,000] DEBUG {P} Completed connection to node 1. Ready."
LINE_B = f"[2024-05-01 12:00:01,000] INFO {P} Node 1 disconnected."
LINE_C = f"[2024-05-01 12:00:02,000] DEBUG {P} Completed connection to node 2. Ready."
NOISE = f"[2024-05-01 12:00:03,000] INFO {P} Instantiated an idempotent producer."


def append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(text)


def ids(events: list[JavaLogEvent]) -> list[tuple[str, int | None]]:
    return [(e.kind, e.node_id) for e in events]


def test_follower_starts_at_the_end_and_reads_appended_lines(tmp_path: Path) -> None:
    log = tmp_path / "client.log"
    log.write_text(LINE_A + "\n")
    follower = LogFollower(log)
    assert follower.poll() == []
    append(log, LINE_B + "\n" + NOISE + "\n")
    assert ids(follower.poll()) == [("disconnected", 1)]
    assert (follower.parsed, follower.unparsed, follower.ignored) == (1, 0, 1)
    assert follower.poll() == []
    assert follower.problem is None


def test_follower_from_start(tmp_path: Path) -> None:
    log = tmp_path / "client.log"
    log.write_text(LINE_A + "\n" + LINE_B + "\n")
    assert ids(LogFollower(log, from_start=True).poll()) == [("connected", 1), ("disconnected", 1)]


def test_partial_last_line_waits_for_its_end(tmp_path: Path) -> None:
    log = tmp_path / "client.log"
    log.write_text("")
    follower = LogFollower(log)
    follower.poll()
    append(log, LINE_A + "\n" + LINE_B[:30])
    assert ids(follower.poll()) == [("connected", 1)]
    assert follower.poll() == []
    append(log, LINE_B[30:] + "\r\n")
    assert ids(follower.poll()) == [("disconnected", 1)]
    assert follower.unparsed == 0


def test_rotation_by_rename_reads_the_old_file_to_its_end(tmp_path: Path) -> None:
    log = tmp_path / "client.log"
    log.write_text("")
    follower = LogFollower(log)
    follower.poll()
    append(log, LINE_A + "\n" + LINE_B)  # the last line of the old file has no newline
    log.rename(tmp_path / "client.log.1")
    log.write_text(LINE_C + "\n")
    assert ids(follower.poll()) == [("connected", 1), ("disconnected", 1), ("connected", 2)]
    append(log, LINE_B + "\n")
    assert ids(follower.poll()) == [("disconnected", 1)]


def test_copytruncate_reads_again_from_the_start(tmp_path: Path) -> None:
    log = tmp_path / "client.log"
    log.write_text(NOISE + "\n")
    follower = LogFollower(log)
    follower.poll()
    append(log, LINE_A + "\n" + LINE_B + "\n")
    assert len(follower.poll()) == 2
    with log.open("r+") as f:  # what logrotate's copytruncate does after copying
        f.truncate(0)
    append(log, LINE_C + "\n")
    assert ids(follower.poll()) == [("connected", 2)]


def test_deleted_then_recreated(tmp_path: Path) -> None:
    log = tmp_path / "client.log"
    log.write_text("")
    follower = LogFollower(log)
    follower.poll()
    append(log, LINE_A + "\n")
    log.unlink()
    assert ids(follower.poll()) == [("connected", 1)]  # what was written before the delete
    assert follower.problem is not None and "no such file" in follower.problem
    assert follower.poll() == []
    log.write_text(LINE_B + "\n")
    assert ids(follower.poll()) == [("disconnected", 1)]
    assert follower.problem is None


def test_missing_file_is_a_problem_not_an_error(tmp_path: Path) -> None:
    log = tmp_path / "later.log"
    follower = LogFollower(log)
    assert follower.poll() == []
    assert "no such file" in (follower.problem or "")
    log.write_text(LINE_A + "\n")  # a file that appears later is read from its start
    assert ids(follower.poll()) == [("connected", 1)]
    directory = LogFollower(tmp_path)
    assert directory.poll() == [] and directory.problem


def test_garbage_is_counted_never_fatal(tmp_path: Path) -> None:
    log = tmp_path / "client.log"
    log.write_bytes(b"\x00\xff\xfe\n\n" + b"x" * 5000 + b"\n"
                    + b"[Producer clientId=p] Initiating connection to node nowhere\n"
                    + LINE_A.encode() + b"\n")
    follower = LogFollower(log, from_start=True)
    assert ids(follower.poll()) == [("connected", 1)]
    assert (follower.parsed, follower.unparsed, follower.ignored) == (1, 1, 3)


def test_lines_without_timestamp_get_the_read_time(tmp_path: Path) -> None:
    log = tmp_path / "client.log"
    log.write_text("DEBUG [Producer clientId=p] Node 1 disconnected.\n" + LINE_A + "\n")
    events = LogFollower(log, from_start=True, clock=lambda: 1700000000.25).poll()
    assert [e.ts_ms for e in events] == [1700000000250, local_ms(2024, 5, 1, 12, 0, 0, 0)]


def test_small_read_budget_still_reads_everything_in_order(tmp_path: Path) -> None:
    log = tmp_path / "client.log"
    log.write_text("")
    follower = LogFollower(log, max_bytes_per_poll=64)
    follower.poll()
    append(log, (LINE_A + "\n") * 3 + LINE_B + "\n")
    os.rename(log, tmp_path / "client.log.1")
    log.write_text(LINE_C + "\n")
    events: list[JavaLogEvent] = []
    for _ in range(20):
        events += follower.poll()
    assert ids(events) == [("connected", 1)] * 3 + [("disconnected", 1), ("connected", 2)]
    follower.close()


# --- NodeTable -----------------------------------------------------------------

CONSUMER = "[Consumer clientId=consumer-orders-1, groupId=orders]"


def consumer_line(second: int, level: str, message: str) -> str:
    return f"[2024-05-01 12:{second // 60:02d}:{second % 60:02d},000] {level} {CONSUMER} {message}"


def fold(lines: list[str], table: NodeTable | None = None) -> NodeTable:
    table = table or NodeTable()
    for line in lines:
        event = parse_line(line)
        assert event is not None, line
        table.apply(event)
    return table


CONSUMER_START = [
    consumer_line(0, "DEBUG", "Initiating connection to node localhost:9092 (id: -1 rack: null) "
                              "using address localhost/127.0.0.1"),
    consumer_line(0, "DEBUG", "Completed connection to node -1. Fetching API versions."),
    consumer_line(1, "DEBUG", "Sending metadata request MetadataRequestData(topics=[]) to node "
                              "localhost:9092 (id: -1 rack: null)"),
    consumer_line(2, "INFO", "Discovered group coordinator broker1:9092 (id: 2147483646 "
                             "rack: null)"),
    consumer_line(2, "DEBUG", "Initiating connection to node broker1:9092 (id: 2147483646 "
                              "rack: null) using address broker1/10.0.0.1"),
    consumer_line(3, "DEBUG", "Completed connection to node 2147483646. Fetching API versions."),
    consumer_line(4, "DEBUG", "Initiating connection to node broker1:9092 (id: 1 rack: null) "
                              "using address broker1/10.0.0.1"),
    consumer_line(4, "DEBUG", "Completed connection to node 1. Fetching API versions."),
]


def test_consumer_sequence_bootstrap_coordinator_broker_idle_close() -> None:
    table = fold(CONSUMER_START + [
        consumer_line(544, "TRACE", "About to close the idle connection from -1 due to being "
                                    "idle for 540001 millis"),
        consumer_line(544, "INFO", "Node -1 disconnected."),  # 3.1-3.8 tell it again
    ])
    [client] = table.clients()
    assert (client.client_type, client.client_id, client.group_id) == (
        "consumer", "consumer-orders-1", "orders")
    assert client.coordinators == {"group": 2147483646}
    nodes = table.nodes("consumer-orders-1")
    assert sorted(nodes) == [-1, 1, 2147483646]

    bootstrap = nodes[-1]
    assert (bootstrap.host, bootstrap.port, bootstrap.address) == ("localhost", 9092, "127.0.0.1")
    assert bootstrap.role is Role.BOOTSTRAP
    assert bootstrap.state == "idle_closed"
    assert (bootstrap.connects, bootstrap.disconnects, bootstrap.idle_ms) == (1, 1, 540001)
    assert bootstrap.opened_ms == local_ms(2024, 5, 1, 12, 0, 0, 0)
    assert bootstrap.closed_ms == local_ms(2024, 5, 1, 12, 9, 4, 0)
    assert bootstrap.metadata_request_ms == local_ms(2024, 5, 1, 12, 0, 1, 0)

    coordinator = nodes[2147483646]
    assert coordinator.role is Role.COORDINATOR and coordinator.state == "connected"
    assert (coordinator.host, coordinator.address) == ("broker1", "10.0.0.1")
    assert coordinator.connected_ms == local_ms(2024, 5, 1, 12, 0, 3, 0)
    assert nodes[1].role is Role.BROKER and nodes[1].state == "connected"


def test_idle_close_told_twice_in_3_9_is_one_close() -> None:
    table = fold(CONSUMER_START + [
        consumer_line(544, "TRACE", "About to close the idle connection from 1 due to being "
                                    "idle for 540002 millis"),
        consumer_line(545, "DEBUG", "Idle connection to node 1 disconnected."),
    ])
    node = table.nodes("consumer-orders-1")[1]
    assert (node.state, node.disconnects, node.idle_ms) == ("idle_closed", 1, 540002)
    assert node.closed_ms == local_ms(2024, 5, 1, 12, 9, 4, 0)


def test_reconnect_after_close_and_failed_attempt() -> None:
    table = fold(CONSUMER_START + [
        consumer_line(10, "INFO", "Node 1 disconnected."),
        consumer_line(10, "WARN", "Connection to node 1 (broker1/10.0.0.9:9092) could not be "
                                  "established. Broker may not be available."),
    ])
    node = table.nodes("consumer-orders-1")[1]
    assert (node.state, node.detail, node.address) == (
        "disconnected", "could not be established", "10.0.0.9")
    assert node.disconnects == 1
    fold([consumer_line(20, "DEBUG", "Initiating connection to node broker1:9092 (id: 1 "
                                     "rack: null) using address broker1/10.0.0.1"),
          consumer_line(20, "DEBUG", "Completed connection to node 1. Fetching API versions.")],
         table)
    assert (node.state, node.connects, node.closed_ms, node.detail) == ("connected", 2, None, None)


def test_connected_without_its_start_in_the_log() -> None:
    table = fold(["[2024-05-01 12:00:00,000] DEBUG [Producer clientId=p] Completed connection to "
                  "node 3. Ready."])
    node = table.nodes("p")[3]
    assert (node.state, node.connects, node.opened_ms) == ("connected", 1, node.connected_ms)


def test_coordinator_lost_forgets_it() -> None:
    table = fold(CONSUMER_START + [consumer_line(30, "INFO", (
        "Group coordinator broker1:9092 (id: 2147483646 rack: null) is unavailable or invalid "
        "due to cause: coordinator unavailable. isDisconnected: true. Rediscovery will be "
        "attempted."))])
    assert table.client("consumer-orders-1").coordinators == {}


def test_clients_sharing_an_id_are_kept_apart() -> None:
    table = fold([
        "[Producer clientId=app] Completed connection to node -1. Ready.",
        "[Consumer clientId=app, groupId=g] Initiating connection to node b:9092 (id: -1 "
        "rack: null)",
    ])
    assert table.nodes("app", "producer")[-1].state == "connected"
    assert table.nodes("app", "consumer")[-1].state == "connecting"
    with pytest.raises(LookupError):
        table.nodes("app")
    assert table.nodes("nobody") == {}


def test_last_io_is_the_last_request_or_response_of_the_open_connection() -> None:
    def io(second: int, text: str) -> str:
        return consumer_line(second, "DEBUG", text)

    table = fold(CONSUMER_START + [
        io(5, "Sending FETCH request with header RequestHeader(apiKey=FETCH, apiVersion=17, "
              "clientId=c, correlationId=9, headerVersion=2) and timeout 30000 to node 1: {}"),
        io(6, "Received FETCH response from node 1 for request with header RequestHeader()"),
    ])
    nodes = table.nodes("consumer-orders-1")
    assert nodes[1].last_io_ms == local_ms(2024, 5, 1, 12, 0, 6, 0)
    assert nodes[-1].last_io_ms is None  # its metadata request is not one of these lines
    fold([io(7, "Node 1 disconnected."),
          io(8, "Initiating connection to node broker1:9092 (id: 1 rack: null)")], table)
    assert nodes[1].last_io_ms is None  # a new connection has had no I/O yet
