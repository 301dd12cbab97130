"""The scenarios: a real cluster, real clients, kmon's stream beside the oracles, one act
(wait for reaps, kill a node, stop the cluster), then every verdict scored."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from benchmarks.truth import clients as start
from benchmarks.truth import connection_count, groups, java_client_log
from benchmarks.truth.capture import Capture
from benchmarks.truth.client_log import ClientLog
from benchmarks.truth.kmon_views import (
    NOT_LISTED,
    Recording,
    Serve,
    Stream,
    command_of,
    connection_closes,
    once,
    ps,
)
from benchmarks.truth.owners import Owners
from benchmarks.truth.score import (
    Context,
    Tally,
    close_truths,
    once_disagreements,
    oracle_disagreements,
    ps_disagreements,
    record_disagreements,
    recorded_role_wrongs,
    recorded_wrongs,
    score_closes,
    score_roles,
    served_close_excess,
    summed_disagreements,
)
from kmon.devtools.kafka_cluster import KafkaCluster

CLIENT_LISTENERS = ("PLAINTEXT", "SASL_PLAINTEXT", "SSL")
Starter = Callable[[], start.Client]
SETTLE_S = 3.0  # snapshots and heartbeats seen before the one-shot views are taken


@dataclass
class Outcome:
    """One client in one scenario: its tallies, its views' disagreements, or why not run."""

    scenario: str
    client: str
    closes: Tally | None = None
    roles: Tally | None = None
    roles_by_packets: Tally | None = None  # the cross-check, where the client's log told roles
    views: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    not_run: str | None = None


@dataclass
class Run:
    """A scenario's running parts, for its clients and its act."""

    cluster: KafkaCluster
    workdir: Path
    clients: list[start.Client] = field(default_factory=list)  # started, for the act
    joiners: list[Starter] = field(default_factory=list)  # more members, for the act
    serve: Serve | None = None  # kmon serve, for an act that reads its /metrics
    counts: dict = field(default_factory=dict)  # an act's connection counts (connection_count)

    def log(self, name: str) -> Path:
        return self.workdir / f"{name}.log"


@dataclass
class Scenario:
    name: str
    title: str
    clients: Callable[[Run], list[Starter]]  # each started in turn (stopped however it ends)
    act: Callable[[Run], None] = lambda run: None
    setup: Callable[[Run], None] = lambda run: None  # before the clients start
    watch_s: float = 8.0
    brokers: int = 1
    broker_config: dict[str, str] = field(default_factory=dict)
    client_names: tuple[str, ...] = ()
    kmon_asks_cluster: bool = True  # kmon's views get -b BOOTSTRAP

    @property
    def broker_idle_ms(self) -> int | None:
        value = self.broker_config.get("connections.max.idle.ms")
        return int(value) if value else None


def run(scenario: Scenario, keep: Path | None = None) -> list[Outcome]:
    """Run one scenario from a cluster of its own to its last stopped process; ``keep``: a
    folder to leave its evidence in (the clients' logs, tcpdump's text, kmon's closes, its
    stream's records and its recording)."""
    names = scenario.client_names or ("client",)
    cluster = KafkaCluster(scenario.brokers, dict(scenario.broker_config))
    try:
        cluster.start()
    except Exception as err:  # noqa: BLE001 (any reason is the table's "not run")
        cluster.stop()
        return [Outcome(scenario.name, n, not_run=f"the cluster did not start: {err}")
                for n in names]
    workdir = Path(tempfile.mkdtemp(prefix="kmon-truth-", dir=keep))
    ports = {p for node in cluster.nodes for name, p in node.ports.items()
             if name in CLIENT_LISTENERS}
    node_of_port = {p: node.node_id for node in cluster.nodes for p in node.ports.values()}
    capture = Capture(ports, keep=workdir / "packets.txt" if keep else None)
    owners, streams, started, serve = Owners(), {}, [], None
    served: str | None = None  # serve's last /metrics: None where it did not answer
    recording, recorded = None, {}
    try:
        capture.start()
        the_run = Run(cluster, workdir)
        scenario.setup(the_run)
        for starter in scenario.clients(the_run):
            began = time.time() * 1000
            started.append(starter())
            started[-1].started_ms = began
        the_run.clients = started
        bootstrap = cluster.bootstrap() if scenario.kmon_asks_cluster else None
        for client in started:
            streams[client.name] = Stream(client.pid, bootstrap).start()
            owners.watch(client.pid)
        serve = the_run.serve = Serve(bootstrap)
        recording = Recording([c.pid for c in started], bootstrap, workdir / "recording")
        time.sleep(SETTLE_S)
        commands = {c.name: command_of(c.pid) for c in started}
        views = {c.name: views_of(c.pid, bootstrap, streams[c.name], serve,
                                  [streams[o.name] for o in started
                                   if commands[o.name] == commands[c.name]])
                 for c in started}
        scenario.act(the_run)
        time.sleep(scenario.watch_s)
        served = serve.last_scrape()  # its closes over its whole watch, before any stops
        recorded["error"] = recording.stop()
        if recorded["error"] is None:
            recorded.update((table, recording.rows(table)) for table in ("snapshots", "events"))
        rejected = broker_log_count(cluster, "Rejected connection from")
        failed_auth = broker_log_count(cluster, "Failed authentication with")
    except Exception as err:  # noqa: BLE001
        return [Outcome(scenario.name, n, not_run=f"{type(err).__name__}: {err}")
                for n in names]
    finally:
        for stream in streams.values():
            stream.stop()
        if recording is not None:
            recording.stop()
        if serve is not None:
            serve.stop()
        for client in started:
            client.stop()
        flows = capture.stop() if hasattr(capture, "proc") else {}
        owners.stop()
        cluster.stop()
    outcomes, truths = [], {}
    for client in started:
        stream = streams[client.name]
        if keep:
            client.log.with_suffix(".closes.json").write_text(json.dumps(stream.closes()))
            client.log.with_suffix(".stream.jsonl").write_text(
                "".join(json.dumps(record) + "\n" for record in stream.records))
        fds = owners.seen.get(client.pid, {})
        ctx = Context(flows, ClientLog.read(client.log), fds, node_of_port,
                      scenario.broker_idle_ms, rejected, failed_auth,
                      frozenset(n.ports["SASL_PLAINTEXT"] for n in cluster.nodes),
                      first_syn(flows, client.started_ms),
                      java_client_log.sockets(java_client_log.read(client.log), flows, set(fds)))
        until_ms = stream.latest()["ts_ms"]
        truths[client.name] = close_truths(ctx, stream.closes())
        notes = [f"the brokers' log: {count} × “{what}”" for count, what in
                 ((rejected, "Rejected connection from"),
                  (failed_auth, "Failed authentication with")) if count]
        notes += [f"the oracles differ: {d}" for d in oracle_disagreements(ctx)]
        views[client.name].update(record_views(recorded, stream, client.pid, ctx))
        if the_run.counts:
            the_run.counts["packets"] = connection_count.accepted(flows,
                                                                  the_run.counts["window_ms"])
            views[client.name]["opens"] = dict(the_run.counts)
            notes.append(connection_count.verdict(the_run.counts))
        outcomes.append(Outcome(
            scenario.name, client.name,
            closes=score_closes(stream.closes(), ctx, stream.started_ms + 1000, until_ms),
            roles=score_roles(stream.last_rows(), ctx), views=views[client.name],
            roles_by_packets=(score_roles(stream.last_rows(), ctx, packets_only=True)
                              if ctx.java_nodes else None),
            notes=notes))
    for client in started:
        served_views(views[client.name], served, commands[client.name],
                     [truths[o.name] for o in started if commands[o.name] == commands[client.name]])
    if not keep:
        shutil.rmtree(workdir, ignore_errors=True)  # kept when not run: the logs say why
    return outcomes


def served_views(found: dict, served: str | None, command: str,
                 truths: list[Counter]) -> None:
    """Into a client's views, the close kinds serve's /metrics (``served``: its last scrape;
    None: it did not answer, and the view was not checked) counted for its ``command``
    beyond what the packets hold for the processes of that command (``truths``: each one's
    ``close_truths``)."""
    if not isinstance(found.get("metrics"), int):
        return
    if served is None:
        found["metrics"] = "serve did not answer its last scrape"
        return
    excess = served_close_excess(connection_closes(served, command), sum(truths, Counter()))
    found["metrics"] += len(excess)
    found["metrics_closes"] = len(excess)
    found["metrics_detail"] = [*found.get("metrics_detail", []), *excess]


def views_of(pid: int, bootstrap: str | None, stream: Stream, serve: Serve,
             same_command: list[Stream]) -> dict:
    """``--once``, ``ps`` and /metrics against every snapshot of the stream from just before
    each ran to the first polled after it answered (``Stream.since``: a one-shot view answers
    for one moment of its run, /metrics for its last poll; /metrics
    adds up the processes of one command, ``same_command``'s streams): {"once":
    sockets that differ, or why not run; "once_sockets"; "ps" and "metrics": role counts
    that differ, or why not run; and the details}."""
    found: dict = {}
    mark = stream.mark()
    once_rows = once(pid, bootstrap)
    around = stream.since(mark, now_ms())
    if isinstance(once_rows, str):
        found["once"] = once_rows
    else:
        found["once_detail"] = once_disagreements(around, once_rows)
        found["once"] = len(found["once_detail"])
        found["once_sockets"] = sum(any(r["key"] in {x["key"] for x in rows} for rows in around)
                                    for r in once_rows)
    mark = stream.mark()
    ps_row = ps(pid, bootstrap)
    if isinstance(ps_row, str) and ps_row != NOT_LISTED:
        found["ps"] = ps_row
    else:
        found["ps_detail"] = ps_disagreements(stream.since(mark, now_ms()),
                                              None if ps_row == NOT_LISTED else ps_row)
        found["ps"] = len(found["ps_detail"])
    marks = [s.mark() for s in same_command]
    roles = serve.roles(pid)
    if isinstance(roles, str):
        found["metrics"] = roles
    else:
        answered = now_ms()
        pairs = list(zip(same_command, marks, strict=True))
        found["metrics_detail"] = summed_disagreements(
            [s.since(m, answered) for s, m in pairs], roles,
            between=[role for s, m in pairs for role in s.between(m)])
        found["metrics"] = len(found["metrics_detail"])
    return found


def now_ms() -> float:
    return time.time() * 1000


def record_views(recorded: dict, stream: Stream, pid: int, ctx: Context) -> dict:
    """{"record": closes and roles the recording tells otherwise than the stream, and closes
    and roles only it told that it told otherwise than the oracles, or why not run;
    "record_detail"}."""
    if recorded.get("error"):
        return {"record": recorded["error"]}
    closes = stream.closes()
    detail = record_disagreements(stream.history(), closes, recorded["snapshots"],
                                  recorded["events"], pid)
    detail += recorded_wrongs(recorded["snapshots"], recorded["events"], pid, closes, ctx)
    detail += recorded_role_wrongs(recorded["snapshots"], stream.history(), pid, ctx)
    return {"record": len(detail), "record_detail": detail}


def first_syn(flows: dict, since_ms: float) -> float | None:
    """The first connection attempt from ``since_ms`` on (a client's, when clients start one
    after another, each once READY)."""
    return min((f.syn_ms for f in flows.values() if f.syn_ms >= since_ms), default=None)


def broker_log_count(cluster: KafkaCluster, text: str) -> int:
    total = 0
    for node in cluster.nodes:
        log = node.directory / "server.log"
        if log.exists():
            total += log.read_text(errors="replace").count(text)
    return total


# --- the scenarios --------------------------------------------------------------------------

def plain_consumer(run: Run) -> list[Starter]:
    return [partial(start.workload, "confluent-kafka consumer, plain", "consumer",
                    run.cluster.bootstrap(), run.log("consumer"))]


def stop_every_node(run: Run) -> None:
    for node in run.cluster.nodes:
        run.cluster.kill(node)


def idle_producers(idle_ms: int | None) -> Callable[[Run], list[Starter]]:
    extra = ("--idle-ms", str(idle_ms)) if idle_ms else ()

    def clients(run: Run) -> list[Starter]:
        return [partial(start.workload, "confluent-kafka producer, plain", "producer",
                        run.cluster.bootstrap(), run.log("plain"), *extra),
                partial(start.workload, "confluent-kafka producer, agent", "producer",
                        run.cluster.bootstrap(), run.log("agent"), *extra, instrument=True)]
    return clients


def consumer_and_agent_producer(run: Run) -> list[Starter]:
    return [*plain_consumer(run),
            partial(start.workload, "confluent-kafka producer, agent", "producer",
                    run.cluster.bootstrap(), run.log("agent"), instrument=True)]


def kill_last_node(run: Run) -> None:
    run.cluster.kill(run.cluster.nodes[-1])


def stop_last_node(run: Run) -> None:
    """SIGTERM: the node shuts down as an operator's stop does (its quorum stays up)."""
    node = run.cluster.nodes[-1]
    node.process.terminate()
    node.process.wait(60)


def kcat_beside_rdkafka_member(run: Run) -> list[Starter]:
    return [partial(start.workload, "confluent-kafka consumer, client.id rdkafka", "consumer",
                    run.cluster.bootstrap(), run.log("member"), "--client-id", "rdkafka"),
            partial(start.kcat_producer, "kcat producer, idle", run.cluster.bootstrap(),
                    "kmon-workload", run.log("kcat"))]


def per_ip_limit(run: Run) -> None:
    """max.connections.per.ip lowered on the running node (the node's own connections made
    before it, as a static setting could refuse them)."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": run.cluster.bootstrap()})
    entry = ConfigEntry("max.connections.per.ip", str(PER_IP_LIMIT),
                        incremental_operation=AlterConfigOpType.SET)
    for future in admin.incremental_alter_configs(
            [ConfigResource(ResourceType.BROKER, str(node.node_id), incremental_configs=[entry])
             for node in run.cluster.nodes]).values():
        future.result(timeout=30)
    time.sleep(1)  # the admin client's own connection gone


def client_per_message(run: Run) -> list[Starter]:
    return [partial(start.per_message, "confluent-kafka, a client per message",
                    run.cluster.bootstrap(), run.log("per-message"))]


def wrong_password(run: Run) -> list[Starter]:
    good = run.cluster.client_config("SASL_PLAINTEXT").read_text().splitlines()
    wrong = run.workdir / "wrong.properties"
    wrong.write_text("".join(("sasl.password=not-the-password" if line.startswith(
        "sasl.password=") else line) + "\n" for line in good))
    return [partial(start.workload, "confluent-kafka producer, plain", "producer",
                    run.cluster.bootstrap("SASL_PLAINTEXT"), run.log("sasl"),
                    "--config", str(wrong), ready=False)]


PER_IP_LIMIT = 1  # a client per message opens two at once
PRODUCERS = ("confluent-kafka producer, plain", "confluent-kafka producer, agent")
SCENARIOS = {s.name: s for s in [
    # its connections close at once; 8 s then hold some 150 refused reconnects
    Scenario("cluster-stopped", "the whole cluster stopped under an attached consumer",
             plain_consumer, stop_every_node, watch_s=8,
             client_names=("confluent-kafka consumer, plain",)),
    # the client reaps (and reconnects) every 5 s from its start on: 12 s adds two reaps a
    # client to those before the views
    Scenario("client-idle-reap", "the client reaps its idle connections "
             "(connections.max.idle.ms=5000 on the client)", idle_producers(5000), watch_s=12,
             client_names=PRODUCERS),
    Scenario("broker-idle-reap", "the broker reaps idle connections "
             "(connections.max.idle.ms=5000 on the broker)", idle_producers(None),
             watch_s=22, broker_config={"connections.max.idle.ms": "5000"},
             client_names=PRODUCERS),
    Scenario("node-killed", "one node of two SIGKILLed under a consumer and a producer",
             consumer_and_agent_producer, kill_last_node, watch_s=12, brokers=2,
             client_names=("confluent-kafka consumer, plain",
                           "confluent-kafka producer, agent")),
    Scenario("node-stopped", "one node of three stopped gracefully (SIGTERM) under a "
             "consumer and a producer", consumer_and_agent_producer, stop_last_node,
             watch_s=10, brokers=3, client_names=("confluent-kafka consumer, plain",
                                                  "confluent-kafka producer, agent")),
    Scenario("kcat-beside-member", "an idle kcat producer beside a group member whose "
             "client.id is rdkafka", kcat_beside_rdkafka_member, watch_s=6,
             client_names=("confluent-kafka consumer, client.id rdkafka",
                           "kcat producer, idle")),
    Scenario("client-per-message", "a new producer for every message, dropped after it",
             client_per_message, watch_s=10,
             client_names=("confluent-kafka, a client per message",)),
    Scenario("per-ip-limit", f"max.connections.per.ip={PER_IP_LIMIT} on the broker, a "
             "client per message (kmon without -b: the limit would refuse its own connections)",
             client_per_message, setup=per_ip_limit, watch_s=10, kmon_asks_cluster=False,
             client_names=("confluent-kafka, a client per message",)),
    # kmon without -b: the cluster's PLAINTEXT listener names neither the SASL one nor, with
    # no login, the cluster of a client that never logged in
    Scenario("sasl-wrong-password", "a producer with a wrong SASL/PLAIN password",
             wrong_password, watch_s=10, kmon_asks_cluster=False,
             client_names=("confluent-kafka producer, plain",)),
    Scenario("group-member", "an uninstrumented group member on two nodes: roles, --once "
             "and ps against the stream", plain_consumer, watch_s=6, brokers=2,
             client_names=("confluent-kafka consumer, plain",)),
]}


def burst_client(run: Run) -> list[Starter]:
    return [partial(start.bursts, "confluent-kafka, a client per message on demand",
                    run.cluster.bootstrap(), run.log("bursts"))]


def group_scenarios() -> list[Scenario]:
    """Each library's group consumers (``groups.SETS``) in the scenarios that apply to them."""
    made = []
    for set_name, kinds in groups.SETS.items():
        clients, names = groups.consumers(kinds), groups.names(kinds)
        if set_name != "rdkafka":
            made += [
                Scenario(f"cluster-stopped/{set_name}", "the whole cluster stopped under "
                         "attached group consumers", clients, stop_every_node,
                         setup=groups.topic, watch_s=12, client_names=names),
                Scenario(f"node-killed/{set_name}", "one node of two SIGKILLed under group "
                         "consumers", clients, kill_last_node, setup=groups.topic,
                         watch_s=12, brokers=2, client_names=names),
                Scenario(f"group-member/{set_name}", "group consumers on two nodes: roles, "
                         "--once and ps against the stream", clients, setup=groups.topic,
                         watch_s=6, brokers=2, client_names=names)]
        made += [
            Scenario(f"group-rebalance/{set_name}", "a second member joins each consumer's "
                     f"group, stays {groups.JOINED_S:g} s and leaves", clients,
                     groups.join_and_leave, setup=groups.topic, watch_s=8, brokers=2,
                     client_names=names),
            Scenario(f"rolling-restart/{set_name}", "each of three nodes stopped (SIGTERM) "
                     "and started again in turn under group consumers", clients,
                     groups.rolling_restart, setup=groups.topic, watch_s=8, brokers=3,
                     client_names=names)]
    for set_name, kinds in groups.KIP848.items():
        made.append(Scenario(
            f"kip848-group/{set_name}", "consumers in KIP-848 groups "
            "(group.protocol=consumer) on two nodes, a member joining and leaving",
            groups.consumers(kinds, "group.protocol=consumer"), groups.join_and_leave,
            setup=groups.topic, watch_s=8, brokers=2, client_names=groups.names(kinds)))
    return made


SCENARIOS.update((s.name, s) for s in group_scenarios())
SCENARIOS["connection-count"] = Scenario(
    "connection-count", f"{connection_count.BURST} clients made for one message each on two "
    "nodes: kmon's opens against the brokers' connection-creation-total",
    burst_client, connection_count.measure, watch_s=2, brokers=2,
    client_names=("confluent-kafka, a client per message on demand",))
FAST = ("cluster-stopped", "client-idle-reap")
