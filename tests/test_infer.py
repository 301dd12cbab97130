"""Coordinator connections of clients kmon has no metrics for: kcat, and the rules behind it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from collections import deque

import pytest
from helpers import Child

from kmon.engine.directory import Directory
from kmon.engine.sampler import ProcessSampler, SamplerSettings
from kmon.evidence.claims import Claim, Gathered, socket_key
from kmon.evidence.endpoints import EndpointEvidence
from kmon.evidence.infer import (
    HISTORY_LEN,
    CadenceEvidence,
    Reading,
    by_cadence,
    by_groups,
    cadence_confidence,
    client_ids,
    heartbeat_cycles,
    remember,
)
from kmon.evidence.resolve import kernel_limits, resolve_one, socket_row
from kmon.model import Connection, Role
from kmon.sources.brokers.admin import GroupInfo, GroupMember, fetch_metadata
from kmon.sources.brokers.dns import Resolver
from kmon.sources.kernel.socket_readers import open_socket_reader
from kmon.sources.kernel.sockets import Endpoint, TcpSocket

KCAT = "/usr/bin/kcat"
POLLS = 60  # at most this many polls for the cadence rule to speak (2 cycles take ~12)
STEADY_POLLS = 8
COORDINATOR = re.compile(r'Group "(?P<group>[^"]+)" coordinator is \S+ id (?P<id>\d+)')
needs_kcat = pytest.mark.skipif(subprocess.run(["test", "-x", KCAT]).returncode != 0,
                                reason="kcat is not installed (.ci/run installs it)")


def sawtooth(period_ms: int, polls: int, step_ms: int = 500, start_bytes: int = 0,
             per_beat: int = 61) -> list[Reading]:
    """A socket that moves ``per_beat`` bytes every ``period_ms``, read every ``step_ms``."""
    return [Reading(t * step_ms, (t * step_ms) % period_ms,
                    start_bytes + per_beat * ((t * step_ms) // period_ms + 1))
            for t in range(polls)]


def fetching(polls: int) -> list[Reading]:
    return [Reading(t * 500, 80, 150 * (t + 1)) for t in range(polls)]


def quiet(polls: int, since_ms: int = 10_000) -> list[Reading]:
    return [Reading(t * 500, since_ms + t * 500, 800) for t in range(polls)]


def test_heartbeat_cycles_count_resets_after_a_climb():
    assert heartbeat_cycles(sawtooth(3000, 20)) == 3  # 10 s of 3 s heartbeats
    assert heartbeat_cycles(fetching(20)) == 0
    assert heartbeat_cycles(quiet(20)) == 0
    assert heartbeat_cycles(sawtooth(3000, 20, per_beat=5000)) == 0  # not a heartbeat's size
    assert heartbeat_cycles(sawtooth(8000, 40)) == 0  # idle past HEARTBEAT_MAX_MS


def test_cadence_confidence_grows_with_agreeing_cycles():
    assert [cadence_confidence(n, True) for n in (2, 3, 4, 5, 9)] == [0.5, 0.6, 0.7, 0.8, 0.8]
    assert cadence_confidence(9, False) == 0.7


def test_cadence_picks_the_heartbeating_socket_beside_a_fetching_one():
    readings = {"coord": sawtooth(3000, 26), "fetch2": fetching(26), "fetch1": fetching(26)}
    found = by_cadence(readings, {"coord": 2, "fetch2": 2, "fetch1": 1})
    assert list(found) == ["coord"]
    assert (found["coord"].broker_id, found["coord"].rule) == (2, "cadence")
    assert found["coord"].confidence == 0.7  # 4 cycles, a second socket to broker 2


def test_cadence_single_socket_needs_fetching_elsewhere():
    readings = {"coord": sawtooth(3000, 24), "fetch1": fetching(24)}
    # 3 cycles, no second socket to broker 2
    assert by_cadence(readings, {"coord": 2, "fetch1": 1})["coord"].confidence == 0.6
    # a producer sending every 3 s, with nothing that fetches: no consumer, no coordinator
    assert by_cadence({"p": sawtooth(3000, 24), "q": quiet(24)}, {"p": 2, "q": 1}) == {}
    # two look-alike heartbeating sockets to one broker: no choice is made
    both = {"a": sawtooth(3000, 24), "b": sawtooth(3000, 24, start_bytes=7), "f": fetching(24)}
    assert by_cadence(both, {"a": 2, "b": 2, "f": 1}) == {}


def test_a_forwarder_that_heartbeats_is_no_coordinator():
    """A socket to a load balancer in front of the cluster has an endpoint claim with no
    broker (a bootstrap front): its cadence names no coordinator of a broker ``None``."""
    producer = CadenceEvidence(lambda: None, [])
    producer.history = {"front": deque(sawtooth(3000, 26)), "fetch": deque(fetching(26))}
    earlier = {"front": [Claim("endpoint", Role.BOOTSTRAP, None, None, 0.6)],
               "fetch": [Claim("endpoint", Role.BROKER, 1, 1, 0.6)]}
    assert producer.infer(earlier, {"127.0.0.1"}) == {}


def test_a_settled_cadence_keeps_its_history_while_its_sockets_stay_silent():
    """``CadenceEvidence.settled``: once every socket is down to its one reading idle past
    HEARTBEAT_MAX_MS, readings idle longer with the same bytes leave the history as it is
    (a poll may carry the claims forward); a socket under the limit, or one talking, is not
    settled."""
    broker = Endpoint("127.0.0.1", 9092)

    def poll(now_ms: int, *sockets: TcpSocket) -> None:
        cadence.evidence(Gathered(now_ms=now_ms, sockets=list(sockets), known={broker: 1},
                                  resolver=Resolver(), broker_idle_ms=600_000), {})

    def sock(inode: int, idle_ms: int, sent: int = 100) -> TcpSocket:
        return TcpSocket(inode, inode, Endpoint("127.0.0.1", 40_000 + inode), broker,
                         "ESTABLISHED", idle_ms, idle_ms, sent, 50)

    cadence = CadenceEvidence(lambda: None, [])
    assert cadence.settled  # nothing remembered
    poll(1_000, sock(1, 2_000), sock(2, 9_000))
    assert not cadence.settled  # one socket idle 2 s: a heartbeat's may come
    poll(6_000, sock(1, 7_000), sock(2, 14_000))
    assert cadence.settled
    kept = {key: list(readings) for key, readings in cadence.history.items()}
    poll(11_000, sock(1, 12_000), sock(2, 19_000))
    assert {key: list(readings) for key, readings in cadence.history.items()} == kept
    poll(16_000, sock(1, 10, sent=160), sock(2, 24_000))
    assert not cadence.settled
    poll(21_000, sock(2, 29_000))  # the talking one closed
    assert cadence.settled


def test_client_ids_from_a_command_line():
    assert client_ids(["kcat", "-X", "client.id=orders", "-G", "g", "t"]) == {"orders"}
    assert client_ids(["app", "-Xclient.id=a"]) == {"a"}
    assert client_ids(["kcat", "-G", "g", "t"]) == set()


def _group(coordinator: int | None, *members: tuple[str, str]) -> GroupInfo:
    return GroupInfo("orders", "stable", coordinator,
                     tuple(GroupMember(cid, host) for cid, host in members))


def test_describe_groups_rule_on_constructed_groups():
    """The rule over group descriptions, on constructed GroupInfo values: librdkafka's
    mock cluster, the only cluster the tests can run, does not answer DescribeGroups."""
    local = {"127.0.0.1"}
    one, beats = {"s2": 2, "s1": 1}, {"s2": 3}
    group = _group(2, ("rdkafka", "/127.0.0.1"))
    found = by_groups([group], local, set(), one, beats)
    assert list(found) == ["s2"] and found["s2"].confidence == 0.7
    assert found["s2"].rule == "describe_groups"
    assert by_groups([group], local, {"rdkafka"}, one, beats)["s2"].confidence == 0.8
    assert by_groups([group], local, {"billing"}, one, beats) == {}  # another client's member
    assert by_groups([group], {"10.0.0.9"}, set(), one, beats) == {}  # on another host
    assert by_groups([_group(None, ("rdkafka", "127.0.0.1"))], local, set(), one, beats) == {}
    assert by_groups([GroupInfo("g", None, 2, None)], local, set(), one, beats) == {}
    # a member with this process's host and client id, but its socket there never heartbeats:
    # another process's member (an idle kcat producer beside a consumer, both "rdkafka")
    assert by_groups([group], local, {"rdkafka"}, one, {}) == {}
    two = {"a": 2, "b": 2}
    assert by_groups([group], local, set(), two, {}) == {}  # which of the two is not known
    assert list(by_groups([group], local, set(), two, {"a": 3})) == ["a"]
    assert list(by_groups([group], local, set(), two, {"a": 0, "b": 3})) == ["b"]


def infer_coordinators(rows: list[Connection], history, groups, args) -> list[Connection]:
    """The rows resolved from their claims and the cadence producer's (rows with a client
    carry a statistics claim; every row a claim of its known broker endpoint)."""
    producer = CadenceEvidence(lambda: groups, args)
    producer.history = history
    earlier = {r.key: [Claim("endpoint", Role.BROKER, r.broker_id, r.broker_id, 0.6,
                             evidence={"role": "inferred"})]
                      + ([Claim("stats", r.role, r.node_id, r.broker_id, 1.0,
                                facts={"client": r.client}, evidence={"role": "stats"})]
                         if r.client else []) for r in rows}
    found = producer.infer(earlier, {"127.0.0.1"})
    return [resolve_one(r, earlier[r.key] + ([found[r.key]] if r.key in found else []))[0]
            for r in rows]


def test_rows_with_client_metrics_are_left_alone():
    def row(key: str, broker: int, client: str | None) -> Connection:
        return Connection(key=key, role=Role.BROKER, node_id=broker, broker_id=broker,
                          client=client, local="127.0.0.1:5000", remote="127.0.0.1:9092",
                          state="ESTABLISHED", evidence={"role": "stats"})

    history = {"c": deque(sawtooth(3000, 24), maxlen=HISTORY_LEN),
               "f": deque(fetching(24), maxlen=HISTORY_LEN)}
    paired = infer_coordinators([row("c", 2, "rdkafka#consumer-1"), row("f", 1, None)],
                                history, None, [])
    assert [c.role for c in paired] == [Role.BROKER, Role.BROKER]
    unpaired = infer_coordinators([row("c", 2, None), row("f", 1, None)], history, None, [])
    assert unpaired[0].role is Role.COORDINATOR and unpaired[0].node_id == 2147483645
    assert unpaired[0].evidence["role"] == "inferred"
    both = infer_coordinators([row("c", 2, None), row("f", 1, None)], history,
                              [_group(2, ("rdkafka", "127.0.0.1"))], ["kcat"])
    assert both[0].evidence["inference"] == "describe_groups+cadence"
    assert both[0].confidence == 0.8  # 0.7 by group, 0.6 by 3 cycles: agreeing, 0.1 more


def test_a_kernel_only_row_has_every_field_where_its_name_says():
    """socket_row builds rows by position (2,000 a poll): the same row as by keyword."""
    sock = TcpSocket(7, 3, Endpoint("127.0.0.1", 5000), Endpoint("127.0.0.1", 9092),
                     "ESTABLISHED", 10, 20, 300, 400, 0.5)
    limits, by = kernel_limits(600_000, 350_000)
    assert socket_row(sock, "sock:7", limits, by) == Connection(
        key="sock:7", role=Role.UNKNOWN, node_id=None, broker_id=None, client=None,
        local="127.0.0.1:5000", remote="127.0.0.1:9092", state="ESTABLISHED", idle_ms=10,
        idle_limit_ms=350_000, bytes_sent=300, bytes_received=400, tcp_rtt_ms=0.5, fd=3,
        inode=7, confidence=0.0, idle_limits=limits, idle_limit_by="middlebox",
        evidence={"role": "none", "idle": "kernel", "bytes": "kernel", "state": "kernel",
                  "idle_limit": "middlebox (config)", "pairing": "none"})


def test_history_is_bounded_and_forgets_closed_sockets():
    def sock(inode: int, idle: int) -> TcpSocket:
        return TcpSocket(inode, 3, Endpoint("127.0.0.1", 5000 + inode),
                         Endpoint("127.0.0.1", 9092), "ESTABLISHED", idle, idle, 10, 20)

    history = {}
    for t in range(HISTORY_LEN + 5):
        remember(history, [sock(1, t), sock(2, t)], t)
    assert [len(r) for r in history.values()] == [HISTORY_LEN, HISTORY_LEN]
    assert history["sock:1"][-1] == Reading(HISTORY_LEN + 4, HISTORY_LEN + 4, 30)
    remember(history, [sock(2, 0)], 99)
    assert list(history) == ["sock:2"]


def test_a_history_kept_short_gives_every_verdict_the_whole_history_gives():
    """A reading idle past HEARTBEAT_MAX_MS is kept alone (a socket that never talks costs
    one reading a poll, not HISTORY_LEN): at every poll of sockets that heartbeat, fetch,
    fall silent and wake, the producer's claims are those made from the whole history."""
    groups = [_group(2, ("rdkafka", "127.0.0.1"))]
    shapes = {  # socket key -> (idle ms, bytes) at poll t, 500 ms apart
        "beat": lambda t: ((t * 500) % 3000, 61 * ((t * 500) // 3000 + 1)),
        "fetch": lambda t: (80, 150 * (t + 1)),
        "silent": lambda t: (10_000 + t * 500, 800),
        # heartbeats, then silent from poll 20 to 40, then heartbeats again
        "wakes": lambda t: ((t * 500) % 3000 if not 20 <= t < 40 else (t - 19) * 500,
                            61 * ((min(t, 20) * 500) // 3000 + 1 + max(0, t - 40) // 6)),
    }
    brokers = {"beat": 2, "fetch": 1, "silent": 2, "wakes": 3}
    earlier = {KEYS[name]: [Claim("endpoint", Role.BROKER, b, b, 0.6,
                                  evidence={"role": "inferred"})]
               for name, b in brokers.items()}
    kept = CadenceEvidence(lambda: groups, [])
    whole: dict[str, deque[Reading]] = {}
    for t in range(HISTORY_LEN * 3):
        sockets = [_sock(key, *shape(t)) for key, shape in shapes.items()]
        remember(kept.history, sockets, t * 500)
        for key, shape in shapes.items():
            whole.setdefault(KEYS[key], deque(maxlen=HISTORY_LEN)).append(
                Reading(t * 500, shape(t)[0], shape(t)[1] + 30))
        scratch = CadenceEvidence(lambda: groups, [])
        scratch.history = whole
        assert kept.infer(earlier, {"127.0.0.1"}) == scratch.infer(earlier, {"127.0.0.1"})
        assert {k: heartbeat_cycles(kept.history[k]) for k in whole} == {
            k: heartbeat_cycles(whole[k]) for k in whole}
    assert KEYS["beat"] in kept.infer(earlier, {"127.0.0.1"})  # the rules spoke
    assert len(kept.history[KEYS["silent"]]) == 1
    assert len(kept.history[KEYS["wakes"]]) == HISTORY_LEN  # awake again for long enough


KEYS = {"beat": "sock:1", "fetch": "sock:2", "silent": "sock:3", "wakes": "sock:4"}


def _sock(name: str, idle_ms: int, moved: int) -> TcpSocket:
    inode = int(KEYS[name].split(":")[1])
    sock = TcpSocket(inode, inode, Endpoint("127.0.0.1", 5000 + inode),
                     Endpoint("127.0.0.1", 9092), "ESTABLISHED", idle_ms, idle_ms, 10,
                     moved + 20)
    assert socket_key(sock) == KEYS[name]
    return sock


# --- against the mock cluster, with kcat: a client kmon has no metrics for ---

def _seed(cluster: str, topic: str) -> None:
    """Create ``topic`` (the mock cluster creates topics on first produce) with 5 messages."""
    lines = "".join(f"kmon-infer-{i}\n" for i in range(5))
    subprocess.run([KCAT, "-P", "-b", cluster, "-t", topic], input=lines, text=True,
                   check=True, timeout=60)


def _wait_stderr(child: Child, pattern: re.Pattern, start: int = 0) -> re.Match:
    """The first of ``child``'s stderr lines from ``start`` that matches (generous hang guard)."""
    deadline = time.monotonic() + 120
    seen = start
    while time.monotonic() < deadline and child.proc.poll() is None:
        lines = child.stderr[seen:]
        for line in lines:
            if m := pattern.search(line):
                return m
        seen += len(lines)
        time.sleep(0.1)
    raise AssertionError(f"no {pattern.pattern!r} from {child.proc.args}: {child.stderr[-5:]}")


@pytest.fixture(scope="module")
def kcat_consumer(cluster):
    """kcat in consumer-group mode, in a fresh group, settled; and its coordinator broker
    (one for the module: its tests each watch it with an observer of their own).

    The coordinator's id comes from kcat's own ``-d cgrp`` debug lines on stderr
    ("Group "G" coordinator is HOST:PORT id N"); the group is settled at its
    first heartbeat, and consuming once the seeded messages reach its (``-u``
    unbuffered) stdout.
    """
    topic, group = f"kmon-infer-{uuid.uuid4().hex[:8]}", f"kmon-infer-{uuid.uuid4().hex[:8]}"
    _seed(cluster, topic)
    kcat = Child([KCAT, "-b", cluster, "-G", group, "-o", "beginning", "-u", "-d", "cgrp",
                  topic])
    try:
        coordinator = _wait_stderr(kcat, COORDINATOR)
        assert coordinator["group"] == group
        _wait_stderr(kcat, re.compile(r"HEARTBEAT.*Heartbeat for group"))
        kcat.wait_line("kmon-infer-")  # it consumes
        yield kcat, int(coordinator["id"])
    finally:
        kcat.stop()


def _attach_stream(pid: int, cluster: str) -> Child:
    """The cadence rule alone: the wire (which would name the coordinator exactly) is off."""
    return Child([sys.executable, "-m", "kmon", "attach", str(pid), "--json", "--interval",
                  "500ms", "--bootstrap-servers", cluster, "--any-process", "--wire", "off"])


def _polls(stream: Child, count: int):
    for _ in range(count):
        (process,) = json.loads(stream.wait_line("{"))["processes"]
        yield process["connections"]


def _coordinators(connections: list[dict]) -> list[dict]:
    return [c for c in connections if c["role"] == "coordinator"]


@pytest.mark.integration
@needs_kcat
def test_kcat_consumer_coordinator_by_cadence(kcat_consumer, cluster):
    kcat, broker = kcat_consumer
    stream = _attach_stream(kcat.pid, cluster)
    try:
        found = None
        for connections in _polls(stream, POLLS):
            assert all(c["broker_id"] == broker for c in _coordinators(connections))
            if _coordinators(connections):
                (found,) = _coordinators(connections)
                break
        assert found is not None, f"no coordinator row within {POLLS} polls"
        assert found["node_id"] == 2147483647 - broker
        assert found["evidence"]["role"] == "inferred"
        assert found["evidence"]["inference"] == "cadence"
        assert 0.5 <= found["confidence"] <= 0.8
        assert found["client"] is None
        for connections in _polls(stream, STEADY_POLLS):  # it stays, and stays alone
            assert [c["key"] for c in _coordinators(connections)] == [found["key"]]
    finally:
        stream.stop()


@pytest.mark.integration
@needs_kcat
def test_kcat_consumer_coordinator_from_group_description(kcat_consumer, cluster):
    """The sampler with a group description as a real cluster would give it (the mock cluster
    gives none): kcat's member on 127.0.0.1, coordinated by the broker kcat names."""
    kcat, broker = kcat_consumer
    group = GroupInfo("g", "stable", broker, (GroupMember("rdkafka", "/127.0.0.1"),))
    settings = SamplerSettings(require_kafka=False, wire="off")
    sampler = ProcessSampler(kcat.pid, open_socket_reader(), settings, directory=Directory(
        fetch_metadata(cluster), (group,)))
    rows = []
    for _ in range(POLLS):
        view = sampler.sample(int(time.time() * 1000))
        rows = _coordinators([c.to_dict() for c in view.connections])
        if rows and "describe_groups" in rows[0]["evidence"]["inference"]:
            break
        time.sleep(0.5)
    (row,) = rows
    assert row["node_id"] == 2147483647 - broker
    assert row["evidence"]["inference"] in ("describe_groups", "describe_groups+cadence")
    assert row["confidence"] >= 0.7


def _assert_no_coordinator(pid: int, cluster: str, tick=lambda poll: None) -> None:
    """Over 16 polls (8 s: more than two heartbeat intervals) no row turns coordinator;
    ``tick(poll)`` runs after each poll."""
    stream = _attach_stream(pid, cluster)
    try:
        brokers = 0
        for poll, connections in enumerate(_polls(stream, 16)):
            assert _coordinators(connections) == []
            brokers = max(brokers, sum(c["broker_id"] is not None for c in connections))
            tick(poll)
        assert brokers, "the process held no socket to a known broker"
    finally:
        stream.stop()


@pytest.mark.integration
@needs_kcat
def test_kcat_producer_gets_no_coordinator(cluster):
    """kcat -P producing a batch every 2 s: periodic traffic, but nothing fetches."""
    topic = f"kmon-infer-{uuid.uuid4().hex[:8]}"
    _seed(cluster, topic)
    producer = Child([KCAT, "-P", "-b", cluster, "-t", topic, "-d", "msg"])
    batch = "\n".join(["x" * 100] * 50)  # more than kcat's stdin buffer: produced at once

    def produce(poll: int) -> None:
        if poll % 4 == 0:
            producer.send(batch)

    try:
        produce(0)
        _wait_stderr(producer, re.compile(r"Produce MessageSet"))
        _assert_no_coordinator(producer.pid, cluster, produce)
    finally:
        producer.stop()


PLAIN_SOCKETS = """
import socket, sys
host, port = sys.argv[1].split(",")[0].rsplit(":", 1)
held = [socket.create_connection((host, int(port))) for _ in range(2)]
print("READY", flush=True)
sys.stdin.read()
"""


def test_sockets_to_one_broker_endpoint_are_unsettled_even_once_left_alone():
    """Sockets the endpoint alone explains: one per broker is a broker (0.6); several to one
    broker cannot be told apart (unknown, 0.3, their broker named), nor can the one left once
    the others closed (franz-go's JoinGroup socket after the cluster stopped). A socket closing
    beside a new one (a reconnect) does not make the new one unsettled."""
    one, two = Endpoint("127.0.0.1", 9092), Endpoint("127.0.0.1", 9093)

    def sock(inode: int, remote: Endpoint, state: str = "ESTABLISHED") -> TcpSocket:
        return TcpSocket(inode, inode, Endpoint("127.0.0.1", 40_000 + inode), remote, state,
                         100, 100, 10, 10, 0.1)

    def said(producer: EndpointEvidence, *sockets: TcpSocket) -> dict[int, tuple]:
        gathered = Gathered(now_ms=0, sockets=list(sockets), known={one: 1, two: 2},
                            resolver=Resolver(), broker_idle_ms=600_000)
        claims = producer.evidence(gathered, {}).claims
        return {s.inode: (claims[socket_key(s)].role, claims[socket_key(s)].broker_id,
                          claims[socket_key(s)].confidence) for s in sockets}

    endpoints = EndpointEvidence()
    assert said(endpoints, sock(1, one), sock(2, one), sock(3, two)) == {
        1: (Role.UNKNOWN, 1, 0.3), 2: (Role.UNKNOWN, 1, 0.3), 3: (Role.BROKER, 2, 0.6)}
    assert said(endpoints, sock(1, one), sock(3, two)) == {
        1: (Role.UNKNOWN, 1, 0.3), 3: (Role.BROKER, 2, 0.6)}
    reconnected = EndpointEvidence()
    assert said(reconnected, sock(4, one, "CLOSE_WAIT"), sock(5, one)) == {
        4: (Role.UNKNOWN, 1, 0.3), 5: (Role.BROKER, 1, 0.6)}
    assert said(reconnected, sock(5, one)) == {5: (Role.BROKER, 1, 0.6)}


@pytest.mark.integration
def test_plain_sockets_to_a_broker_get_no_coordinator(cluster):
    child = Child([sys.executable, "-c", PLAIN_SOCKETS, cluster])
    try:
        child.wait_line("READY")
        _assert_no_coordinator(child.pid, cluster)
    finally:
        child.stop()
