"""The ground-truth harness's Java oracle read on its own (benchmarks/truth/java_client_log.py):
each socket's node id from the Java client's NetworkClient DEBUG log, joined to the SYN it
made, scored before the requests the packets show, and the two oracles' disagreements."""

from __future__ import annotations

from benchmarks.truth import java_client_log
from benchmarks.truth.capture import Flow
from benchmarks.truth.client_log import ClientLog
from benchmarks.truth.score import Context, oracle_disagreements, score_roles

# as group-member/java's consumers printed them (4.4.0, then 3.9.1), a broker on each port
PREFIX = ("{} [main] DEBUG org.apache.kafka.clients.NetworkClient - [Consumer clientId=consumer-"
          "kmon-truth-java-jmx-1, groupId=kmon-truth-java-jmx] Initiating connection to node "
          "127.0.0.1:{} (id: {} rack: null{}) using address /127.0.0.1")
OTHER = ("{} [main] {} org.apache.kafka.clients.NetworkClient - [Consumer clientId=c, "
         "groupId=g] {}")


def completed(stamp: str, node: str) -> str:
    return OTHER.format(stamp, "DEBUG", f"Completed connection to node {node}. Fetching API "
                        "versions.")


LOG = "\n".join([
    PREFIX.format("2026-11-26T17:25:21.381Z", 36171, "-2", " isFenced: false"),
    completed("2026-11-26T17:25:21.390Z", "-2"),
    OTHER.format("2026-11-26T17:25:21.400Z", "DEBUG", "Initiating API versions fetch from "
                 "node -2."),
    PREFIX.format("2026-11-26T17:25:21.706Z", 35235, "1", " isFenced: false"),
    completed("2026-11-26T17:25:21.710Z", "1"),
    PREFIX.format("2026-11-26T17:25:21.853Z", 36171, "+2", " isFenced: false"),
    completed("2026-11-26T17:25:21.860Z", "+2"),
    PREFIX.format("2026-11-26T17:25:30.662+00:00", 36171, "2147483645", ""),
    completed("2026-11-26T17:25:30.670+00:00", "2147483645"),
]) + "\n"
AT = 1795714000000.0  # 2026-11-26T17:26:40Z in epoch ms: the lines above are before it
NODES = {35235: 1, 36171: 2}


def at(stamp: str) -> float:
    """The epoch ms of a 17:25 time (seconds.millis)."""
    return AT - 100_000 + float(stamp) * 1000


def test_a_node_id_tells_the_role(tmp_path):
    (tmp_path / "java.log").write_text(LOG)
    connects = java_client_log.read(tmp_path / "java.log")
    assert [(c.port, c.node, c.role) for c in connects] == [
        (36171, "-2", "bootstrap"), (35235, "1", "broker:1"), (36171, "+2", "coordinator:2"),
        (36171, "2147483645", "coordinator:2")]
    assert connects[0].ts_ms == at("21.381")


def flows(*made: tuple[int, int, float]) -> dict[tuple[int, int], Flow]:
    return {(local, server): Flow(local, server, syn_ms) for local, server, syn_ms in made}


def test_each_line_takes_the_processes_next_syn_to_its_port(tmp_path):
    """Two lines to one port 470 ms apart take the two SYNs in order; a SYN of another
    process (not in its /proc) between them, or a second after the line, is no one's."""
    (tmp_path / "java.log").write_text(LOG)
    connects = java_client_log.read(tmp_path / "java.log")[:3]
    seen = flows((40001, 36171, at("21.3815")), (40002, 36171, at("21.500")),
                 (40003, 35235, at("22.800")), (40004, 36171, at("21.8534")))
    found = java_client_log.sockets(connects, seen, {(40001, 36171), (40003, 35235),
                                                     (40004, 36171)})
    assert {key[0]: connect.node for key, connect in found.items()} == {40001: "-2",
                                                                      40004: "+2"}


def test_a_connect_the_broker_refused_takes_no_socket(tmp_path):
    """A rolling restart (rolling-restart/java): the client's connect to node 2 is refused
    ("could not be established"), its SYN never a socket of the process; 0.7 s later it
    connects to the coordinator +2 on the same port, then to node 2 again. The refused line
    takes no SYN, so each socket keeps its own line (before: node 2 took the coordinator's
    SYN and +2 node 2's, two roles swapped)."""
    (tmp_path / "java.log").write_text("\n".join([
        PREFIX.format("2026-11-26T17:25:28.555Z", 33733, "2", " isFenced: false"),
        OTHER.format("2026-11-26T17:25:28.560Z", "WARN", "Connection to node 2 "
                     "(/127.0.0.1:33733) could not be established. Node may not be available."),
        PREFIX.format("2026-11-26T17:25:29.270Z", 33733, "+2", " isFenced: false"),
        completed("2026-11-26T17:25:29.273Z", "+2"),
        PREFIX.format("2026-11-26T17:25:29.572Z", 33733, "2", " isFenced: false"),
        completed("2026-11-26T17:25:29.572Z", "2")]) + "\n")
    connects = java_client_log.read(tmp_path / "java.log")
    assert [c.node for c in connects] == ["+2", "2"]
    seen = flows((40001, 33733, at("28.556")), (40002, 33733, at("29.271")),
                 (40003, 33733, at("29.573")))
    found = java_client_log.sockets(connects, seen, {(40002, 33733), (40003, 33733)})
    assert {key[0]: connect.node for key, connect in found.items()} == {40002: "+2",
                                                                      40003: "2"}


def test_the_clients_log_decides_and_the_packets_cross_check(tmp_path):
    """A socket its log initiated as node +2 that carried only Metadata and FindCoordinator:
    the log says coordinator:2, and kmon's broker:2 is wrong against it; the packets, which
    cannot tell that socket, leave it without an oracle; a bootstrap socket that carried a
    Fetch is where the two oracles differ."""
    (tmp_path / "java.log").write_text(LOG)
    connects = java_client_log.read(tmp_path / "java.log")
    seen = flows((40001, 36171, at("21.382")), (40004, 36171, at("21.854")))
    seen[(40001, 36171)].api_keys = {18, 3, 1}
    seen[(40004, 36171)].api_keys = {18, 3, 10}
    ctx = Context(seen, ClientLog([], [], [], []), {}, NODES, first_syn_ms=at("21.382"),
                  java_nodes=java_client_log.sockets(connects, seen, set(seen)))
    rows = {(40001, 36171): {"role": "bootstrap", "confidence": 1.0},
            (40004, 36171): {"role": "broker", "broker_id": 2, "confidence": 0.95}}
    by_log = score_roles(rows, ctx)
    assert (by_log.right, by_log.wrong, by_log.confident_wrong) == (1, 1, 1)
    assert by_log.wrongs == ["socket :40004>:36171 (node +2): broker:2 at confidence 0.95, "
                             "truly coordinator:2"]
    by_packets = score_roles(rows, ctx, packets_only=True)
    assert (by_packets.right, by_packets.wrong, by_packets.no_oracle) == (0, 1, 1)
    assert by_packets.matrix[("(requests untold)", "broker:2")] == 1
    assert oracle_disagreements(ctx) == [
        "socket :40001>:36171: node -2 (bootstrap) in the client's log, broker:2 by its "
        "requests (API keys 1,3,18)"]
