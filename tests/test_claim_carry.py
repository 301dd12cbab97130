"""What a producer carries of its last poll's claims is what it would make from scratch: a
process's sockets (silent ones, heartbeats, fetches, random talkers; opened, closed, passing
to CLOSE_WAIT, an inode reused for another peer) and what is known of them (the cluster's
broker ids, its groups and idle limit, the brokers its wire names, what its wire carried)
change at random from poll to poll, and at every poll the process's view is the one a
sampler makes whose producers keep nothing but their histories.

The process's sockets and its wire are constructed (``Reader``, ``Wire``): no real process can
be made to show, on demand and at every one of hundreds of polls, an inode reused at once, a
socket's state turned back, a group described or a flow's next request; the sampler, its
producers and its resolver are the real ones."""

from __future__ import annotations

import operator
import os
import random
import socket
import time
from collections import Counter
from dataclasses import dataclass, replace

import pytest

from kmon.engine.directory import Directory
from kmon.engine.sampler import ProcessSampler, SamplerSettings
from kmon.evidence import endpoints, resolve
from kmon.evidence.claims import Evidence, Gathered
from kmon.evidence.endpoints import EndpointEvidence
from kmon.evidence.infer import HISTORY_LEN, CadenceEvidence, remember
from kmon.evidence.resolve import RowResolver
from kmon.evidence.wire import WireEvidence
from kmon.sources.brokers.admin import BrokerInfo, ClusterMetadata, GroupInfo, GroupMember
from kmon.sources.kernel.sockets import Endpoint, TcpSocket
from kmon.sources.packets.kafka_wire import Flow, WireView
from kmon.sources.process_wire import WireReading

BROKERS = [Endpoint("127.0.0.1", 9092 + i) for i in range(3)]
STRANGER = Endpoint("127.0.0.1", 7000)  # no broker's
POLL_MS = 1_000
START_MS = 1_800_000_000_000
APIS = (0, 1, 3, 12, 18)  # Produce, Fetch, Metadata, Heartbeat, ApiVersions
SHAPES = ("silent", "beat", "fetch", "talker")


@dataclass
class Held:
    """One socket of the constructed process and how it behaves."""

    inode: int
    port: int
    remote: Endpoint
    shape: str  # silent, beat, fetch, talker
    state: str = "ESTABLISHED"
    idle_ms: int = 0
    sent: int = 100
    received: int = 50

    def step(self, rng: random.Random, poll: int) -> None:
        """The socket one poll later."""
        if self.state == "SYN_SENT" and rng.random() < 0.5:
            self.state = "ESTABLISHED"
        moved = 0
        if self.shape == "beat":  # a heartbeat every 3 s: idle climbs, a few bytes reset it
            moved = 60 if poll % 3 == 0 else 0
        elif self.shape == "fetch":
            moved = 150
        elif self.shape == "talker":
            moved = rng.choice((0, 0, 0, 40, 5_000))
        self.idle_ms = rng.randrange(0, 400) if moved else self.idle_ms + POLL_MS
        self.sent += moved
        self.received += moved // 2

    def tcp(self) -> TcpSocket:
        return TcpSocket(self.inode, self.inode % 1000, Endpoint("127.0.0.1", self.port),
                         self.remote, self.state, self.idle_ms, self.idle_ms, self.sent,
                         self.received, 0.2)


class Reader:
    """The constructed process's sockets, as its socket reader hands them over."""

    name = "constructed"

    def __init__(self) -> None:
        self.sockets: list[TcpSocket] = []

    def sockets_of(self, pid: int) -> list[TcpSocket]:
        return list(self.sockets)

    def read_ahead(self, pids) -> None:
        pass


class Wire:
    """The constructed process's wire: each poll's view, as a tap hands it over (``changed``:
    the flows that took a segment, while the sockets are the last poll's)."""

    def __init__(self) -> None:
        self.view: WireView | None = None

    def read(self, sockets: list[TcpSocket], now_ms: int) -> WireReading:
        return WireReading(self.view)

    def quiet(self) -> bool:
        return not self.view.changed and self.view.changed is not None

    def ask(self, peers) -> None:
        pass

    def close(self) -> None:
        pass


class World:
    """The process, its wire and what the session knows, changed at random poll by poll."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.next_inode = 1000
        self.held: list[Held] = []
        self.flows: dict[tuple[Endpoint, Endpoint], Flow] = {}
        self.pairs: list[tuple[Endpoint, Endpoint]] = []
        self.polls = 0
        self.named: dict[int, tuple[str, int]] = {}  # brokers the wire's responses named
        self.directory = Directory(self._cluster([0, 1, 2]))
        for shape in ("beat", "silent", "silent", "talker", "beat", *rng.choice(((), ("fetch",)))):
            self.open(shape)

    @staticmethod
    def _cluster(ids: list[int]) -> ClusterMetadata:
        return ClusterMetadata("127.0.0.1:9092", tuple(
            BrokerInfo(broker_id, b.ip, b.port) for broker_id, b in zip(ids, BROKERS,
                                                                          strict=True)), None)

    def open(self, shape: str, inode: int | None = None) -> None:
        """A new socket (under ``inode``, else a new one)."""
        if inode is None:
            inode = self.next_inode = self.next_inode + 1
        self.held.append(Held(inode, 40_000 + inode % 20_000,
                              self.rng.choice([*BROKERS, *BROKERS, STRANGER]), shape,
                              self.rng.choice(("ESTABLISHED", "ESTABLISHED", "SYN_SENT"))))

    def change(self, poll: int) -> None:
        """One poll's worth of random change."""
        rng = self.rng
        for held in self.held:
            held.step(rng, poll)
        roll = rng.random()
        if roll < 0.15:
            self.open(rng.choice(SHAPES))
        elif roll < 0.25 and self.held:
            at = rng.randrange(len(self.held))
            gone = self.held.pop(at)
            if rng.random() < 0.3:  # its inode reused at once for another peer
                self.held.insert(at, replace(gone, remote=rng.choice(
                    [e for e in (*BROKERS, STRANGER) if e != gone.remote])))
            elif rng.random() < 0.5:  # its ends reused at once by another socket
                self.next_inode += 1
                self.held.insert(at, replace(gone, inode=self.next_inode))
        elif roll < 0.32 and self.held:
            rng.choice(self.held).state = rng.choice(("CLOSE_WAIT", "ESTABLISHED"))
        elif roll < 0.38:
            ids = rng.sample(range(4), 3)
            self.directory.learn_cluster(
                self._cluster(ids), rng.choice((None, (self._group(rng.choice(ids)),))),
                rng.choice((None, 30_000, 45_000)))  # the brokers' idle limit
        elif roll < 0.44:
            self.named = rng.choice(({}, {7: ("127.0.0.1", BROKERS[0].port)}))
        elif roll < 0.54 and self.held:  # a consumer stops fetching, a producer starts, ...
            rng.choice(self.held).shape = rng.choice(SHAPES)
        self._talk(rng)

    @staticmethod
    def _group(coordinator: int) -> GroupInfo:
        return GroupInfo("orders", "stable", coordinator, (GroupMember("c", "/127.0.0.1"),))

    def _talk(self, rng: random.Random) -> None:
        """The wire's view: a flow taking a segment now and then."""
        pairs = [(Endpoint("127.0.0.1", h.port), h.remote) for h in self.held]
        self.flows = {pair: flow for pair, flow in self.flows.items() if pair in pairs}
        changed = set()
        for pair in pairs:
            if rng.random() < 0.03:
                api = rng.choice(APIS)
                flow = self.flows.get(pair) or Flow(START_MS, from_start=rng.random() < 0.5)
                counts = Counter(flow.api_counts)
                counts[api] += 1
                self.flows[pair] = replace(
                    flow, api_counts=counts, api_last_ms={**flow.api_last_ms, api: START_MS},
                    first_request_ms=flow.first_request_ms or START_MS + self.polls,
                    client_id="bench", requests=flow.requests + 1)
                changed.add(pair)
        self.polls += 1
        same = pairs == self.pairs
        self.pairs = pairs
        self.view = WireView(dict(self.flows), dict(self.named), {},
                             START_MS if self.named else None, 0, {},
                             changed if same else None, self.polls)


class ScratchEndpoints:
    """The endpoint producer keeping nothing from poll to poll but the most sockets it saw
    beside each socket (what its rule reads of earlier polls)."""

    def __init__(self) -> None:
        self.beside: dict[str, int] = {}

    def evidence(self, gathered: Gathered, earlier) -> Evidence:
        fresh = EndpointEvidence()
        fresh.beside = self.beside
        found = fresh.evidence(gathered, earlier)
        self.beside = fresh.beside
        return found


class ScratchCadence(CadenceEvidence):
    """The cadence producer keeping nothing from poll to poll but its sockets' readings: its
    rules run at every poll."""

    def evidence(self, gathered: Gathered, earlier) -> Evidence:
        remember(self.history, [s for s in gathered.sockets if s.remote in gathered.known],
                 gathered.now_ms)
        return Evidence(claims=self.infer(earlier, {s.local.ip for s in gathered.sockets}))


def sampler(reader: Reader, wire: Wire, directory: Directory) -> ProcessSampler:
    made = ProcessSampler(os.getpid(), reader, SamplerSettings(require_kafka=False, wire="off"),
                          directory=directory)
    made.wire_source, made.wire = wire, WireEvidence()
    return made


@dataclass
class Run:
    """What one run of polls saw: rows with claims, polls whose endpoint claims were the last
    poll's very ones, polls whose cadence rules ran."""

    claimed: int = 0
    kept: int = 0
    ruled: int = 0


def run(seed: int, polls: int = 3 * HISTORY_LEN) -> Run:
    """Poll the carried sampler and the one from scratch through ``polls`` random changes."""
    rng = random.Random(seed)
    world = World(rng)
    reader, wire = Reader(), Wire()
    carried = sampler(reader, wire, world.directory)
    scratch = sampler(reader, wire, world.directory)
    scratch.endpoints = ScratchEndpoints()
    scratch.cadence = ScratchCadence(lambda: world.directory.groups, [])
    seen, said, infer = Run(), [None], carried.cadence.infer

    def endpoints_of(gathered: Gathered, earlier) -> Evidence:
        found = EndpointEvidence.evidence(carried.endpoints, gathered, earlier)
        seen.kept += found.claims is said[-1]
        said.append(found.claims)
        return found

    def ruled(*args) -> dict:
        seen.ruled += 1
        return infer(*args)

    carried.endpoints.evidence, carried.cadence.infer = endpoints_of, ruled
    for poll in range(polls):
        world.change(poll)
        reader.sockets = [h.tcp() for h in world.held]
        wire.view = world.view
        now = START_MS + poll * POLL_MS
        view = carried.sample(now)
        knew_before = scratch.wire.knew_before  # its history: what its polls saw before
        scratch.made, scratch.rows, scratch.wire = None, RowResolver(), WireEvidence()
        scratch.wire.knew_before = knew_before
        assert view == scratch.sample(now), f"seed {seed}, poll {poll}"
        seen.claimed += sum(bool(c.claims) for c in view.connections)
    return seen


@pytest.mark.parametrize("seed", range(8))
def test_carried_claims_are_those_made_from_scratch(seed):
    """... and the carry is taken: endpoint claims kept as they were, cadence rules skipped."""
    seen = run(seed)
    assert seen.claimed and seen.kept and seen.ruled < 3 * HISTORY_LEN


def test_a_memo_that_omits_an_input_is_caught(monkeypatch):
    """The check above fails for a carry keyed without the sockets' states (the endpoint
    claims count the established sockets to each broker)."""
    monkeypatch.setattr(endpoints, "_SAID_OF", operator.itemgetter(0, 2, 3))
    with pytest.raises(AssertionError, match="seed"):
        for seed in range(8):
            run(seed)


@pytest.mark.integration  # real sockets, a real librdkafka client and its mock cluster
def test_a_librdkafka_client_beside_silent_sockets_gets_the_rows_made_from_scratch(monkeypatch):
    """Real parts: a librdkafka producer (its mock cluster, in this process) sending at every
    poll while a dozen more connections to its brokers stay silent, read by the real sock_diag
    reader and librdkafka's broker threads. At every poll the carried sampler's view is the
    one a sampler makes whose producers and resolver keep nothing but their histories; the
    silent sockets are passed over once quiet."""
    from confluent_kafka import Producer

    from kmon.evidence import infer
    from kmon.sources.kernel.sockdiag import SockDiagReader

    monkeypatch.setattr(infer, "HEARTBEAT_MAX_MS", 300)  # quiet after 0.3 s, not 6 s
    client = Producer({"test.mock.num.brokers": 3, "log_level": 3, "linger.ms": 5})
    silent = []
    try:
        brokers = sorted(client.list_topics(timeout=10).brokers.values(), key=lambda b: b.id)
        silent = [socket.create_connection((b.host, b.port)) for b in brokers for _ in range(4)]
        directory = Directory(ClusterMetadata(f"{brokers[0].host}:{brokers[0].port}", tuple(
            BrokerInfo(b.id, b.host, b.port) for b in brokers), None))
        reader, kernel = Reader(), SockDiagReader()
        settings = SamplerSettings(require_kafka=False, wire="off")
        carried = ProcessSampler(os.getpid(), reader, settings, directory=directory)
        scratch = ProcessSampler(os.getpid(), reader, settings, directory=directory)
        scratch.endpoints = ScratchEndpoints()
        scratch.cadence = ScratchCadence(lambda: directory.groups, [])
        scratch.threads = carried.threads  # what its scans saw (a thread busy at one is not)
        for poll in range(12):
            client.produce("memo", b"x" * 100)
            client.poll(0)
            time.sleep(0.4)
            reader.sockets = kernel.sockets_of(os.getpid())
            now = int(time.time() * 1000)
            view = carried.sample(now)
            scratch.made, scratch.rows = None, RowResolver()
            assert view == scratch.sample(now), f"poll {poll}"
        ends = {s.getsockname()[1] for s in silent}
        quiet = {facts[2].port for facts, _ in carried.cadence.quiet.values()}
        assert ends <= quiet  # passed over once quiet
        assert any(c.claims and c.claims[0]["source"] == "thread" for c in view.connections)
    finally:
        for conn in silent:
            conn.close()
        client.flush(1)


def test_a_row_memo_blind_to_a_claims_evidence_is_caught(monkeypatch):
    """The check above fails for rows carried while a socket's claims name the same role,
    node, broker and confidence but their evidence or facts changed (the wire's counts of
    each API, the client it names): a changed evidence item must change the row."""
    monkeypatch.setattr(resolve, "_says_alike_but_evidence", lambda a, b: a is b or (
        a.role is b.role and a.node_id == b.node_id and a.broker_id == b.broker_id
        and a.confidence == b.confidence and a.source == b.source))
    monkeypatch.setattr(resolve, "_evidence_again", lambda _kernel, row, _claims: row.evidence)
    with pytest.raises(AssertionError, match="seed"):
        for seed in range(8):
            run(seed)
