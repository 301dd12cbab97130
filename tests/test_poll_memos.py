"""What a poll keeps of the last one (the wire's claim of each socket, the row each socket's
claims make, whether a process still runs) is made again whenever what it came from changed:
each poll's claims and rows are the ones a fresh producer and the resolver's own functions
make from scratch, through a request taken on a real socket, a peer's broker id learned, a
client named by other evidence, a new socket, an inode reused for another peer, another
idle limit, a fact in place of the kernel's, and a process that exits."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
from helpers import request_to, wait_for

from kmon.engine.directory import Directory
from kmon.engine.sampler import ProcessSampler, SamplerSettings
from kmon.evidence import infer
from kmon.evidence.claims import Claim, Gathered, socket_key
from kmon.evidence.endpoints import EndpointEvidence
from kmon.evidence.infer import CadenceEvidence
from kmon.evidence.resolve import (
    RowResolver,
    kernel_limits,
    resolve_one,
    socket_row,
    with_limits,
)
from kmon.evidence.threads import thread_evidence
from kmon.evidence.wire import WireEvidence
from kmon.model import Connection, ProcessView, Role
from kmon.sources.brokers.admin import BrokerInfo, ClusterMetadata
from kmon.sources.brokers.dns import Resolver
from kmon.sources.kernel.sockdiag import SockDiagReader
from kmon.sources.kernel.sockets import Endpoint, TcpSocket
from kmon.sources.packets.kafka_wire import WireTap
from kmon.sources.process_wire import WireReading
from kmon.sources.processes.process_info import running_since

BROKER = Endpoint("127.0.0.1", 9092)
OTHER = Endpoint("127.0.0.1", 9093)
PRODUCE = 0  # the Produce API key

pytestmark = pytest.mark.integration  # a real packet tap, a real child process


def produce_request(correlation: int) -> bytes:
    body = (PRODUCE.to_bytes(2, "big") + (9).to_bytes(2, "big")
            + correlation.to_bytes(4, "big") + (4).to_bytes(2, "big") + b"memo" + bytes(40))
    return len(body).to_bytes(4, "big") + body


@pytest.mark.root(reason="the wire needs CAP_NET_RAW (root)")
def test_a_sockets_wire_claim_follows_what_it_carries_and_what_is_known_of_its_peer():
    producer = WireEvidence()
    with socket.create_server(("127.0.0.1", 0)) as server:
        tap = WireTap([], 0)
        client, sock, peer = request_to(server, "memo")  # Metadata, before any poll
        try:
            def claim_at(now_ms: int, known: dict, earlier: dict | None = None) -> Claim:
                gathered = Gathered(now_ms=now_ms, sockets=[sock], known=known,
                                    resolver=Resolver(), broker_idle_ms=600_000,
                                    wire=WireReading(tap.poll([sock], now_ms)))
                claims = producer.evidence(gathered, earlier or {}).claims
                assert claims == WireEvidence().evidence(gathered, earlier or {}).claims
                return claims.get(socket_key(sock))

            now = int(time.time() * 1000)
            first = wait_for(lambda: claim_at(now, {}), "the Metadata request's claim")
            assert first.role is Role.BOOTSTRAP and first.facts == {"client": "memo"}
            later = claim_at(now + 1_500, {})  # nothing carried since: the same claim
            assert later is first and producer.steady is not None  # kept, not looked at
            client.sendall(produce_request(2))
            produced = wait_for(lambda: (c := claim_at(now + 2_000, {})).role is Role.BROKER
                                and c, "the Produce request's claim")
            assert produced.evidence["wire"] in ("Metadata×1 Produce×1", "Produce×1 Metadata×1")
            assert produced.broker_id is None
            learned = claim_at(now + 3_000, {sock.remote: 3})
            assert (learned.node_id, learned.broker_id) == (3, 3)
            named = {socket_key(sock): [Claim("stats", Role.BROKER, 3, 3, 0.9,
                                              facts={"client": "rdkafka#producer-1"})]}
            assert claim_at(now + 4_000, {sock.remote: 3}, named).facts == {}
            assert claim_at(now + 5_000, {sock.remote: 3}).facts == {"client": "memo"}
        finally:
            tap.close()
            client.close()
            peer.close()


def from_scratch(sockets: list[TcpSocket], claims: dict, middlebox_idle_ms: int | None = None,
                 ) -> tuple[list[Connection], list[str]]:
    """The rows as ``resolve_one`` and ``with_limits`` make them, nothing remembered."""
    limits, by = kernel_limits(600_000, middlebox_idle_ms)
    rows, notices = [], []
    for sock in sockets:
        row = socket_row(sock, socket_key(sock), limits, by)
        if claims.get(socket_key(sock)):
            row, notice = resolve_one(row, claims[socket_key(sock)])
            row = with_limits(row, middlebox_idle_ms)
            notices += [notice] if notice else []
        rows.append(row)
    return rows, notices


def tcp(inode: int, fd: int, remote: Endpoint, idle_ms: int) -> TcpSocket:
    return TcpSocket(inode, fd, Endpoint("127.0.0.1", 50_000 + fd), remote, "ESTABLISHED",
                     idle_ms, idle_ms, 1_000 + idle_ms, 2_000, 0.3)


def wire(broker_id: int | None, detail: str) -> Claim:
    return Claim("wire", Role.BROKER, broker_id, broker_id, 1.0, facts={"client": "p"},
                 evidence={"role": "wire", "wire": "Produce×1"}, detail=detail)


def test_each_row_is_the_one_its_claims_make_from_scratch():
    rows = RowResolver()

    def resolved(sockets: list[TcpSocket], claims: dict, middlebox_idle_ms: int | None = None,
                 ) -> tuple[list[Connection], list[str]]:
        made = rows.resolve(sockets, claims, 600_000, middlebox_idle_ms)
        assert made == from_scratch(sockets, claims, middlebox_idle_ms)
        return made

    first = tcp(11, 5, BROKER, 100)
    said = wire(None, "Produce×1 (last 12:00:00.1)")
    (row,), _ = resolved([first], {"sock:11": [said]})
    assert row.broker_id is None and row.client == "p"
    (again,), _ = resolved([tcp(11, 5, BROKER, 600)], {"sock:11": [said]})
    assert again.idle_ms == 600 and again.claims is row.claims  # the same claim: shared
    (row,), _ = resolved([tcp(11, 5, BROKER, 1_100)],
                         {"sock:11": [wire(None, "Produce×1 (last 12:00:01.1)")]})
    assert row.idle_ms == 1_100 and row.claims[0]["detail"] == "Produce×1 (last 12:00:01.1)"
    counted = Claim("wire", Role.BROKER, None, None, 1.0, facts={"client": "p"},
                    evidence={"role": "wire", "wire": "Produce×2"}, detail="Produce×2")
    (row,), _ = resolved([tcp(11, 5, BROKER, 1_200)], {"sock:11": [counted]})
    assert row.evidence["wire"] == "Produce×2"  # a request more: only the evidence moved
    (row,), _ = resolved([tcp(11, 5, BROKER, 1_300)], {"sock:11": [said]}, 300_000)
    (row,), _ = resolved([tcp(11, 5, BROKER, 1_400)], {"sock:11": [counted]}, 300_000)
    assert row.evidence["wire"] == "Produce×2" and row.evidence["idle_limit"] == (
        "middlebox (config)")  # the limits' evidence kept where they set it
    (row,), _ = resolved([tcp(11, 5, BROKER, 2_100)], {"sock:11": [wire(2, "")]})
    assert (row.node_id, row.broker_id) == (2, 2)
    endpoint = Claim("endpoint", Role.BROKER, 1, 1, 0.6, evidence={"role": "inferred"})
    new = tcp(12, 6, OTHER, 50)
    (_, row), _ = resolved([tcp(11, 5, BROKER, 3_100), new], {"sock:11": [wire(2, "")],
                                                               "sock:12": [endpoint]})
    assert (row.role, row.broker_id, row.confidence) == (Role.BROKER, 1, 0.6)
    inferred = Claim("inferred", Role.COORDINATOR, 2147483646, 1, 0.7)
    reused = tcp(11, 9, OTHER, 10)  # the inode of a socket gone, now another's
    (row, _), notices = resolved([reused, new], {"sock:11": [inferred, wire(1, "")],
                                                 "sock:12": [endpoint]})
    assert row.remote == str(OTHER) and notices == [
        f"{OTHER} (fd 9): the wire says broker 1, inferred said coordinator 2147483646; "
        "the wire decides"]
    moved = tcp(11, 10, OTHER, 10)  # the same socket under another fd (dup2)
    _, notices = resolved([moved, new], {"sock:11": [inferred, wire(1, "")],
                                         "sock:12": [endpoint]})
    assert notices[0].startswith(f"{OTHER} (fd 10): ")
    (row, _), _ = resolved([reused, new], {"sock:11": [inferred, wire(1, "")],
                                           "sock:12": [endpoint]}, middlebox_idle_ms=300_000)
    assert (row.idle_limit_ms, row.idle_limit_by) == (300_000, "middlebox")
    stats = Claim("stats", Role.BROKER, 1, 1, 0.9, facts={"idle_ms": 7, "client": "c"})
    for idle in (20, 30):  # the client's idle time in place of the kernel's, poll after poll
        (row, _), _ = resolved([tcp(11, 9, OTHER, idle), new],
                               {"sock:11": [stats], "sock:12": [endpoint]})
        assert row.idle_ms == 7


def test_rows_of_sockets_that_never_talk_are_carried_and_are_those_made_from_scratch():
    """The endpoint claims of a process's sockets to known brokers, poll after poll: the
    same claim while nothing changes (its rows carried at a glance, their ages advancing),
    another once the broker's id does; every row the one its claims make from scratch."""
    rows, cadence, endpoints = RowResolver(), CadenceEvidence(lambda: None, []), EndpointEvidence()
    silent = [4, 5, 6]  # fds of sockets that never carry a request
    kept = None
    for poll, broker_id in enumerate((1, 1, 1, 2, 2)):
        now = 1_000_000 + poll * 1_000
        sockets = [tcp(fd + 10, fd, BROKER, 9_000 + poll * 1_000) for fd in silent]
        gathered = Gathered(now_ms=now, sockets=sockets, known={BROKER: broker_id},
                            resolver=Resolver(), broker_idle_ms=600_000)
        claims: dict[str, list[Claim]] = {}
        for producer in (endpoints.evidence, cadence.evidence):
            for key, claim in producer(gathered, claims).claims.items():
                claims.setdefault(key, []).append(claim)
        made = rows.resolve(sockets, claims, 600_000)
        assert made == from_scratch(sockets, claims)
        assert [r.broker_id for r in made[0]] == [broker_id] * len(silent)
        assert [r.idle_ms for r in made[0]] == [9_000 + poll * 1_000] * len(silent)
        said = claims["sock:14"][0]
        assert len(claims["sock:14"]) == 1  # nothing inferred of a socket that never talks
        assert (said is kept) == (poll not in (0, 3))  # a new claim only once the id changed
        kept = said


def test_a_process_runs_until_it_exits_even_unreaped():
    child = subprocess.Popen(["sleep", "30"])
    try:
        started = running_since(child.pid)
        assert started is not None and running_since(child.pid) == started
        child.kill()
        wait_for(lambda: running_since(child.pid) is None, "the zombie")  # not reaped yet
    finally:
        child.kill()
        child.wait()
    assert running_since(child.pid) is None


HOLDER = """
import socket, sys
conns = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(3)]
print("ready", flush=True)
for line in sys.stdin:
    conns[int(line)].sendall(b"x")
"""


class ReadOnce:
    """The real sock_diag reader, read once a poll: the carried sampler and the one made from
    scratch see the same sockets, ages and all."""

    name = "sock_diag"

    def __init__(self) -> None:
        self.reader, self.read = SockDiagReader(), None

    def sockets_of(self, pid: int) -> list[TcpSocket]:
        return self.read if self.read is not None else self.reader.sockets_of(pid)

    def read_ahead(self, pids) -> None:
        self.read = None


def test_a_silent_processs_claims_are_carried_and_its_rows_are_those_made_from_scratch(
        monkeypatch):
    """A process whose sockets carry nothing keeps its claims from poll to poll (its rows made
    again from them, their ages advancing); a byte sent, or another broker id, makes them
    again. Each poll's view is the one a sampler made from scratch makes."""
    monkeypatch.setattr(infer, "HEARTBEAT_MAX_MS", 300)  # silent after 0.3 s, not 6 s
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(port)], text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        peers = [server.accept()[0] for _ in range(3)]
        try:
            assert holder.stdout.readline() == "ready\n"
            directory = Directory(ClusterMetadata(f"127.0.0.1:{port}",
                                                  (BrokerInfo(1, "127.0.0.1", port),), None))
            reader, settings = ReadOnce(), SamplerSettings(require_kafka=False, wire="off")
            carried = ProcessSampler(holder.pid, reader, settings, directory=directory)

            def poll() -> ProcessView:
                time.sleep(0.4)
                reader.read = reader.reader.sockets_of(holder.pid)
                now = int(time.time() * 1000)
                view = carried.sample(now)
                scratch = ProcessSampler(holder.pid, reader, settings, directory=directory)
                assert view == scratch.sample(now)
                assert [c.idle_ms for c in view.connections] == [
                    s.idle_ms for s in sorted(reader.read, key=lambda s: s.fd)]
                return view

            first = poll()
            made = carried.made
            assert made is not None and {c.broker_id for c in first.connections} == {1}
            second = poll()
            assert carried.made is made  # carried: nothing made again
            assert all(b.idle_ms > a.idle_ms for a, b in zip(first.connections,
                                                            second.connections, strict=True))
            holder.stdin.write("0\n")
            holder.stdin.flush()
            assert peers[0].recv(1) == b"x"
            talked = poll()
            assert carried.made is not made and sorted(
                c.bytes_sent for c in talked.connections) == [0, 0, 1]
            poll()
            made = carried.made
            assert made is not None
            directory.learn_cluster(ClusterMetadata(f"127.0.0.1:{port}",
                                                    (BrokerInfo(2, "127.0.0.1", port),), None),
                                    None, None)
            moved = poll()
            assert carried.made is not made and {c.broker_id for c in moved.connections} == {2}
        finally:
            holder.kill()
            holder.wait()
            for peer in peers:
                peer.close()


@pytest.mark.root(reason="reading a process's thread waits needs the right to trace it")
def test_broker_threads_name_the_same_sockets_with_the_same_mapping_until_one_closes():
    """librdkafka's broker threads (a mock cluster's client in this process): the mapping of
    the sockets they poll is the last poll's very one while they live (a carried poll's
    claims compare it at a glance), a new one once a named socket is gone, the old one left
    as it was."""
    from confluent_kafka import Producer

    from kmon.sources.processes.rdk_threads import BrokerThreads

    client = Producer({"test.mock.num.brokers": 3, "log_level": 3})
    try:
        client.list_topics(timeout=10)
        reader, threads = SockDiagReader(), BrokerThreads(os.getpid())
        named = wait_for(lambda: threads.nodes(reader.sockets_of(os.getpid())) or (
            time.sleep(0.5), None)[1], "a broker thread's socket named")
        sockets = reader.sockets_of(os.getpid())
        assert threads.nodes(sockets) is named  # nothing changed: the very mapping
        gone = next(iter(named))
        kept = dict(named)
        fewer = threads.nodes([s for s in sockets if s.inode != gone])
        assert gone not in fewer and named == kept  # made anew; the last left as it was
        gathered = Gathered(now_ms=0, sockets=sockets, known={}, resolver=Resolver(),
                            broker_idle_ms=600_000, threads=named)
        first = thread_evidence(gathered, {}).claims
        assert first and first == thread_evidence(gathered, {}).claims
        assert all(claim is thread_evidence(gathered, {}).claims[key]  # the very claim
                   for key, claim in first.items())
    finally:
        client.flush(1)



@pytest.mark.root(reason="reading a process's thread waits needs the right to trace it")
def test_broker_threads_look_for_a_socket_at_the_polls_its_look_counts_say():
    """Sockets no broker thread polls (plain sockets beside a mock cluster's client in this
    process): a poll scans the threads exactly where the scans' counts, looked through socket
    by socket as before, say one is due: each new socket at ``LOOKS`` polls, then not again
    while every socket has had its looks; a socket opened later brings the scans back."""
    from confluent_kafka import Producer

    from kmon.sources.processes import rdk_threads

    client = Producer({"test.mock.num.brokers": 3, "log_level": 3})
    with socket.create_server(("127.0.0.1", 0)) as server:
        held = [socket.create_connection(server.getsockname()) for _ in range(3)]
        try:
            client.list_topics(timeout=10)
            reader, threads = SockDiagReader(), rdk_threads.BrokerThreads(os.getpid())
            scans = []
            real = threads._scan
            threads._scan = lambda by_fd: scans.append(len(by_fd)) or real(by_fd)

            def poll() -> bool:
                """One poll; whether it scanned, checked against the counts' own word."""
                sockets, before = reader.sockets_of(os.getpid()), len(scans)
                named = threads.named.keys()
                unnamed = {s.inode for s in sockets if s.fd is not None and s.inode} - named
                counted = threads.looks
                due = bool(unnamed) and any(counted.get(inode, 0) < rdk_threads.LOOKS
                                            for inode in unnamed)
                threads.nodes(sockets)
                assert threads.looked == {inode for inode, n in threads.looks.items()
                                          if n >= rdk_threads.LOOKS}
                assert (len(scans) > before) == due  # (the polls are well within RESCAN_S)
                return due

            assert [poll() for _ in range(rdk_threads.LOOKS + 2)][-2:] == [False, False]
            held.append(socket.create_connection(server.getsockname()))
            assert [poll() for _ in range(rdk_threads.LOOKS + 1)] == [
                *[True] * rdk_threads.LOOKS, False]
        finally:
            for sock in held:
                sock.close()
            client.flush(1)

def test_a_quiet_socket_is_not_looked_at_again_and_the_claims_are_those_of_every_reading(
        monkeypatch):
    """The cadence producer beside sockets that never talk: once a socket is down to its one
    reading idle past HEARTBEAT_MAX_MS, the polls that find its facts unchanged do not hand it
    to ``remember`` again; a byte moved, or its inode reused for another peer, does. Its
    histories and claims are at every poll those of a producer that reads every socket."""
    handed: list[set[str]] = []
    real = infer.remember

    def counted(history, sockets, now_ms, *still):
        sockets = list(sockets)
        handed.append({socket_key(s) for s in sockets})
        return real(history, sockets, now_ms, *still)

    monkeypatch.setattr(infer, "remember", counted)
    cadence, scratch = CadenceEvidence(lambda: None, []), CadenceEvidence(lambda: None, [])
    beating = 4  # a heartbeat every 3 polls on fd 4; fd 5 fetches; fds 6-9 never talk
    settled, ran = [], {}
    for poll in range(14):
        now = 1_000_000 + poll * 1_000
        sockets = [TcpSocket(14, 4, Endpoint("127.0.0.1", 50_004), BROKER, "ESTABLISHED",
                             (poll % 3) * 1_000, (poll % 3) * 1_000, 100 + 60 * (poll // 3),
                             50, 0.2),
                   TcpSocket(15, 5, Endpoint("127.0.0.1", 50_005), OTHER, "ESTABLISHED",
                             100, 100, 1_000 + 150 * poll, 500, 0.2)]
        sockets += [TcpSocket(10 + fd, fd, Endpoint("127.0.0.1", 50_000 + fd), BROKER,
                              "ESTABLISHED", 9_000 + poll * 1_000, 9_000 + poll * 1_000, 1_000,
                              2_000, 0.3) for fd in range(6, 10)]
        if poll >= 8:  # fd 6 sends a byte, then goes quiet again; fd 7's inode is reused
            sockets[2] = sockets[2]._replace(bytes_sent=1_001 + (poll >= 9))
            sockets[3] = sockets[3]._replace(remote=OTHER)
        if poll >= 12:  # all but two silent ones close; then fd 4 opens again
            sockets = sockets[4:] if poll == 12 else [sockets[0], *sockets[4:]]
        gathered = Gathered(now_ms=now, sockets=sockets, known={BROKER: 1, OTHER: 2},
                            resolver=Resolver(), broker_idle_ms=600_000)
        endpoint = {socket_key(s): [Claim("endpoint", Role.BROKER, 1, 1, 0.6)] for s in sockets}
        claims = cadence.evidence(gathered, endpoint).claims
        infer.remember(scratch.history, [s for s in sockets], now)  # every socket, every poll
        handed.pop()
        assert cadence.history == scratch.history, f"poll {poll}"
        assert cadence.settled == all(  # kept as the readings change, and as if looked at all
            len(readings) == 1 and readings[0].idle_ms > infer.HEARTBEAT_MAX_MS
            for readings in scratch.history.values()), f"poll {poll}"
        settled.append(cadence.settled)
        ran[poll] = claims
        assert claims == scratch.infer(endpoint, {"127.0.0.1"}) or not (
            cadence.beating and cadence.fetching), f"poll {poll}"
        if poll in (1, 2, 3, 4, 5, 6, 7, 10, 11):
            assert not {"sock:16", "sock:17", "sock:18", "sock:19"} & handed[-1], poll
    assert "sock:16" in handed[8] and "sock:17" in handed[8]  # a byte moved; another peer
    assert f"sock:1{beating}" in handed[5]  # a socket that talks is read at every poll
    assert ran[11][f"sock:1{beating}"].role is Role.COORDINATOR  # the rules ran on them all
    assert settled[11:] == [False, True, False]  # only silent ones left; one talks again


@pytest.mark.root(reason="the kernel's TCP events need root")
def test_a_processs_socket_pairs_are_the_last_polls_while_its_sockets_ends_are():
    """What the kernel's events tell of a process's sockets is looked up by their (local,
    remote) pairs: the last poll's very pairs while the sockets' ends are the same (their ages
    and counters aside), made again once a socket is gone or another opened; the openings
    told are the same either way."""
    from kmon.engine.kernel_watch import open_kernel_watch

    watch, notice = open_kernel_watch()
    assert watch is not None, notice
    try:
        asked: list[frozenset] = []
        real = watch.losses.openings
        watch.losses.openings = lambda pid, pairs, *rest: asked.append(pairs) or real(
            pid, pairs, *rest)
        sockets = [tcp(11, 5, BROKER, 100), tcp(12, 6, OTHER, 100)]
        first = watch.openings(4242, sockets, 1_000)
        assert asked[0] == {(("127.0.0.1", 50_005), ("127.0.0.1", 9092)),
                            (("127.0.0.1", 50_006), ("127.0.0.1", 9093))}
        older = [s._replace(last_sent_ms=900, bytes_sent=7_000) for s in sockets]
        assert watch.openings(4242, older, 2_000) == first and asked[1] is asked[0]
        fewer = watch.openings(4242, sockets[1:], 3_000)
        assert asked[2] == {(("127.0.0.1", 50_006), ("127.0.0.1", 9093))} and not fewer
        watch.poll([])  # the process is gone: what was kept of it too
        assert not watch.pairs
    finally:
        watch.close()
