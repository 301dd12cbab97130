"""How the host view groups processes into clusters by the brokers they are connected to."""

from __future__ import annotations

from kmon.engine.host_view import UNKNOWN_CLUSTER, cluster_labels
from kmon.model import ClientInstance, Connection, ProcessView, Role, Snapshot
from kmon.sources.kernel.sockets import Endpoint


def process(pid: int, *remotes: str, role: Role = Role.BROKER) -> ProcessView:
    rows = [Connection(key=f"{pid}-{i}", role=role, node_id=None, broker_id=None, client=None,
                       local="127.0.0.1:50000", remote=remote, state="ESTABLISHED")
            for i, remote in enumerate(remotes)]
    return ProcessView(pid=pid, name=f"p{pid}", cmdline="", connections=rows)


def test_a_process_alone_with_one_broker_is_its_own_cluster():
    labels = cluster_labels(Snapshot(0, "h", [process(1, "127.0.0.1:9092")]), {})
    assert labels == {1: "127.0.0.1:9092"}


def test_only_kmon_s_own_answers_join_processes_into_a_cluster():
    """Processes 1-3 reach brokers of one cluster whose answers to kmon's queries carry no
    cluster id (the same list from each broker); 4 claims 9093 and a broker of its own:
    its claim joins nobody; 7 reaches a broker that sent its cluster id."""
    cluster = ("127.0.0.1:9092", "127.0.0.1:9093", "127.0.0.1:9094")
    answers = {Endpoint("127.0.0.1", port): (None, cluster) for port in (9093, 9094)}
    answers[Endpoint("10.0.0.9", 9092)] = ("MkU3OEVBNTcwNTJENDM2Qg", ("10.0.0.9:9092",))
    answers[Endpoint("10.0.0.8", 9092)] = ("x" * 65, ("10.0.0.8:9092",))  # no cluster id
    snapshot = Snapshot(0, "h", [
        process(1, "127.0.0.1:9094"),
        process(2, "127.0.0.1:9093"),
        process(3, "127.0.0.1:9094", "127.0.0.1:9093"),
        process(4, "127.0.0.1:9093", "10.0.0.1:9092"),
        process(5, "10.0.0.1:9092", "10.0.0.2:9092"),
        process(6, "10.0.0.3:9092", role=Role.UNKNOWN),
        process(7, "10.0.0.9:9092", role=Role.UNKNOWN),
        process(8, "10.0.0.8:9092"),
    ])
    assert cluster_labels(snapshot, answers) == {
        1: "127.0.0.1:9092 +2", 2: "127.0.0.1:9092 +2", 3: "127.0.0.1:9092 +2",
        4: "127.0.0.1:9092 +2", 5: "10.0.0.1:9092 +1", 6: UNKNOWN_CLUSTER,
        7: "MkU3OEVBNTcwNTJENDM2Qg", 8: "10.0.0.8:9092"}


def test_a_process_whose_brokers_change_is_labelled_by_its_new_brokers():
    first = process(1, "127.0.0.1:9092")
    assert cluster_labels(Snapshot(0, "h", [first]), {}) == {1: "127.0.0.1:9092"}
    moved = process(1, "10.0.0.2:9092", "10.0.0.1:9092")  # the next poll's view of it
    assert cluster_labels(Snapshot(1, "h", [moved]), {}) == {1: "10.0.0.1:9092 +1"}
    assert cluster_labels(Snapshot(2, "h", [process(1)]), {}) == {1: UNKNOWN_CLUSTER}


def test_a_view_s_summary_counts_its_connections():
    view = process(1, "127.0.0.1:9092", "127.0.0.1:9092", "127.0.0.1:9093")
    view.connections[0].idle_ms, view.connections[1].idle_ms = 12_000, 3_000
    view.connections[2].role, view.connections[2].state = Role.UNKNOWN, "CLOSE_WAIT"
    summary = view.summary
    assert (summary.count, summary.roles, summary.close_wait) == (
        3, {Role.BROKER: 2, Role.UNKNOWN: 1}, 1)
    assert (summary.max_idle_ms, summary.min_idle_ms) == (12_000, None)  # one not known
    assert summary.remotes == {"127.0.0.1:9092", "127.0.0.1:9093"}
    assert summary.brokers == {"127.0.0.1:9092"}  # of the connections with a known role
    assert process(2).summary.max_idle_ms is None and not process(2).summary.remotes


def test_a_process_no_broker_named_yet_is_labelled_by_its_sorted_bootstrap():
    """A process whose sockets nothing named yet (TLS, or idle since kmon looked) and that
    was given its bootstrap servers on its command line, or in its clients' configuration:
    labelled by them, sorted, the same whatever their order; by its own word only."""
    def given(pid: int, cmdline: str) -> ProcessView:
        view = process(pid, "10.0.0.5:9093", role=Role.UNKNOWN)
        view.cmdline = cmdline
        return view

    configured = given(3, "python app.py")
    configured.clients = [ClientInstance(name="rdkafka#producer-1", client_id="app",
                                         type="producer",
                                         config={"bootstrap.servers": "b.example:9093"})]
    snapshot = Snapshot(0, "h", [
        given(1, "kafka-console-consumer --bootstrap-server 10.0.0.6:9093,10.0.0.5:9093"),
        given(2, "kcat -b 10.0.0.5:9093,10.0.0.6:9093 -C -t orders"),
        configured,
        given(4, "python 'unbalanced"),
        given(5, "kcat -b nonsense -C")])
    assert cluster_labels(snapshot, {}) == {
        1: "10.0.0.5:9093 +1", 2: "10.0.0.5:9093 +1", 3: "b.example:9093",
        4: UNKNOWN_CLUSTER, 5: UNKNOWN_CLUSTER}


def test_ps_s_table_shows_sockets_of_no_known_role_as_unknown_not_as_nothing():
    """An uninstrumented client kmon could not place yet: its table row (80 columns where
    the terminal is unknown) says its sockets are unknown, never three zeros alone."""
    from kmon.cli.ps import text_lines

    row = {"cluster": UNKNOWN_CLUSTER, "pid": 4242, "user": "root", "command": "consumer.py",
           "client_ids": [], "bootstrap": 0, "coordinator": 0, "broker": 0, "unknown": 4,
           "close_wait": 0, "max_idle_ms": 2500, "clients_created": None, "churn": "",
           "cmdline": "python consumer.py"}
    header, _, line = text_lines([row], "table")
    assert "unknown" in header.split(), header
    assert line.split()[header.split().index("unknown") - 1] == "4", line  # 2 words: client ids


def test_the_host_view_heads_a_cluster_no_process_is_connected_to_by_its_bootstrap():
    """An idle producer between reaps holds no socket: its heading is the bootstrap it was
    given, not "brokers not known yet" as for a process kmon knows nothing of."""
    from kmon.widgets.host_screen import HostScreen

    idle, connected = process(1), process(2, "127.0.0.1:9092")
    heading = HostScreen.group_heading
    assert heading(None, "10.0.0.5:9093 +1", [idle]) == (
        "no broker connected now · bootstrap 10.0.0.5:9093 +1")
    assert heading(None, UNKNOWN_CLUSTER, [idle]) == "brokers not known yet"
    assert heading(None, "c1", [connected, idle]) == "1 broker: 127.0.0.1:9092"
