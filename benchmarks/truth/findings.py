"""kmon's findings against oracles it does not use: each finding's scenario and its negative
twin on a real cluster, kmon's answer (``kmon attach PID --json``, or ``kmon ps -o json``
where a finding needs every process of the host) against the oracle's, in a confusion
matrix per finding (oracle true/false × kmon raised/not). A finding carries no confidence:
each one raised while the oracle says false is confidently wrong.

The oracles: for ``silent_drop``, a packet capture of the connection showing segments the
client retransmitted that no ack ever covered; for ``advertised_unreachable``, the client's
own debug log (``Connect to ipv4#... failed``); for ``fd_near_limit``, /proc/PID/limits and
/proc/PID/fd counted here; for ``duplicate_client_id``, the client.id each client's own
debug log names it by; for ``rebootstrap``, librdkafka's debug log (``Starting re-bootstrap
sequence``); for ``coordinator_flapping``, the client's own debug log naming each new
coordinator (``changing coordinator 1 -> 2``).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from benchmarks.truth import clients as start
from benchmarks.truth.capture import LINE as PACKET
from benchmarks.truth.client_log import LINE as LOGGED
from benchmarks.truth.kmon_views import Stream, kmon
from benchmarks.truth.score import Tally
from kmon.devtools.forwarder import Forwarder
from kmon.devtools.kafka_cluster import KafkaCluster

WITHIN_S = 25  # the issue's acceptance: a finding appears within 25 s
TWIN_S = 12  # a negative twin is watched this long
FD_LIMIT = 256
# sets the soft limit on open files, opens /dev/null until the process holds the count
# asked, then runs the rest of its arguments in its place (the same pid)
FD_WRAPPER = """
import os, resource, sys
limit, target = int(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
while len(os.listdir("/proc/self/fd")) < target:
    os.set_inheritable(os.open("/dev/null", os.O_RDONLY), True)
os.execv(sys.argv[3], sys.argv[3:])
"""
BEDS = {  # the clusters the scenarios run on: (nodes, broker settings)
    "three nodes": (3, {}),
    "advertising a dead port": (1, {}),  # its advertised.listeners set when it starts
    "reaping idle after 4 s": (1, {"connections.max.idle.ms": "4000"}),
    # the group offsets in one partition on every node: its leader moves when one is killed
    "three nodes, offsets on one partition": (3, {"offsets.topic.replication.factor": "3",
                                                  "offsets.topic.num.partitions": "1"}),
}
MOVES = 3  # coordinator_flapping's threshold
MOVED = re.compile(r"changing coordinator (-?\d+) -> (\d+)")
_tables = itertools.count()


@dataclass
class Told:
    """One process of one findings scenario: the oracle's answer and kmon's."""

    scenario: str
    client: str
    reason: str
    truth: bool | None = None  # None: the oracle could not tell
    raised: bool = False
    took_s: float | None = None  # from the act to the finding
    detail: str = ""  # kmon's, or the oracle's evidence
    others: list[str] = field(default_factory=list)  # other reasons kmon raised
    not_run: str | None = None


@dataclass
class Play:
    """A scenario's cluster and its working directory."""

    cluster: KafkaCluster
    workdir: Path

    def log(self, name: str) -> Path:
        return self.workdir / f"{name}.log"


@dataclass
class FindingScenario:
    name: str
    title: str
    reason: str
    bed: str  # a key of BEDS
    play: Callable[[Play, FindingScenario], list[Told]]


# --- kmon's side ----------------------------------------------------------------------------

def watch(stream: Stream, reason: str, seconds: float, since: int = 0,
          wanted: Callable[[dict], bool] = lambda f: True) -> tuple[dict | None, list[str]]:
    """The first ``reason`` finding of the stream's records from ``since`` on that
    ``wanted`` accepts, waiting up to ``seconds``; and every other reason they raised."""
    deadline, seen, others = time.monotonic() + seconds, since, set()
    while True:
        with stream.lock:
            records = stream.records[seen:]
        seen += len(records)
        for record in records:
            for process in record["processes"]:
                for found in process["findings"]:
                    if found["reason"] == reason and wanted(found):
                        return found, sorted(others)
                    others.add(found["reason"])
        if time.monotonic() > deadline:
            return None, sorted(others - {reason})
        time.sleep(0.2)


def ps_findings(pids: set[int]) -> dict[int, list[dict]]:
    """``kmon ps -o json``'s findings of ``pids`` (none where it failed)."""
    result = kmon("ps", "-o", "json", "--settle", "0")
    if result.returncode != 0:
        return {}
    return {row["pid"]: row["findings"] for row in json.loads(result.stdout)["processes"]
            if row["pid"] in pids}


def told(scenario: FindingScenario, client: str, truth: bool | None, found: dict | None,
         started: float, others: list[str], oracle: str) -> Told:
    took = round(time.monotonic() - started, 1) if found else None
    return Told(scenario.name, client, scenario.reason, truth, found is not None, took,
                found["detail"] if found else oracle, [o for o in others
                                                       if o != scenario.reason])


# --- the oracles ----------------------------------------------------------------------------

class Packets:
    """``tcpdump -S`` on loopback for the ``ports`` given: each segment as its line."""

    def __init__(self, ports: list[int]) -> None:
        expression = "tcp and (" + " or ".join(f"port {p}" for p in ports) + ")"
        self.proc = subprocess.Popen(["tcpdump", "-i", "lo", "-nn", "-tt", "-l", "-S",
                                      "--immediate-mode", "-s", "96", expression],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True)
        time.sleep(1)  # listening

    def stop(self) -> list[str]:
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=10)
        return out.splitlines()


def unacked_retransmits(lines: list[str], until: float | None = None) -> list[str]:
    """The connections whose client resent data (a segment starting below the highest
    sequence it had sent: the kernel may resend several segments as one) that no ack of
    the other side covered afterwards, up to ``until`` (epoch s: the drop lifted, its resent
    segments go through and are acked), as "client port>server port"."""
    highest: dict[tuple[int, int], int] = {}  # flow -> the end of the data it sent
    resent: dict[tuple[int, int], int] = {}  # flow -> the highest end it resent
    acked: dict[tuple[int, int], int] = {}  # flow -> the highest ack the other side sent
    for line in lines:
        match = PACKET.match(line)
        if not match:
            continue
        ts, _, sport, _, dport, _, seq, seq_end, ack, length = match.groups()
        if until is not None and float(ts) > until:
            break
        flow = (int(sport), int(dport))
        if int(length) > 0 and seq_end is not None:
            if int(seq) < highest.get(flow, int(seq)):
                resent[flow] = max(resent.get(flow, 0), int(seq_end))
            highest[flow] = max(highest.get(flow, 0), int(seq_end))
        if ack is not None:
            back = (flow[1], flow[0])
            acked[back] = max(acked.get(back, 0), int(ack))
    return [f"{sport}>{dport}" for (sport, dport), end in resent.items()
            if acked.get((sport, dport), 0) < end]


def logged(log: Path, pattern: str) -> list[str]:
    """The client's debug log lines matching ``pattern``."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return [line for line in text.splitlines() if re.search(pattern, line)]


def client_ids(log: Path) -> set[str]:
    """The client.ids the client's own debug log names its instances by
    (``client.id#kind-N``), less librdkafka's own default (``rdkafka``: no one chose it)."""
    return {m.group(4).rpartition("#")[0] for line in logged(log, r"^%")
            if (m := LOGGED.match(line)) and "#" in m.group(4)} - {"rdkafka"}


def fd_share(pid: int) -> tuple[int, int]:
    """(open descriptors, soft limit on them), from /proc."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            limit = int(line.split()[3])
    return len(os.listdir(f"/proc/{pid}/fd")), limit


class Drop:
    """nftables drops the TCP segments sent from ``from_port`` to ``port`` on loopback (one
    connection) until ``close()``."""

    def __init__(self, port: int, from_port: int) -> None:
        self.table = f"kmon_truth_{os.getpid()}_{next(_tables)}"
        rules = (f"table inet {self.table} {{\n chain input {{\n type filter hook input "
                 f"priority 0; policy accept;\n iifname \"lo\" tcp sport {from_port} "
                 f"tcp dport {port} drop\n }}\n}}\n")
        subprocess.run(["nft", "-f", "-"], input=rules, text=True, check=True)

    def close(self) -> None:
        subprocess.run(["nft", "delete", "table", "inet", self.table], capture_output=True)


# --- the scenarios --------------------------------------------------------------------------

def consumer(play: Play, name: str, *args: str, **options) -> start.Client:
    return start.workload(name, "consumer", play.cluster.bootstrap(), play.log(name), *args,
                          **options)


def busiest_broker_connection(stream: Stream) -> dict | None:
    """The consumer's broker connection that sent the most over 3 s of records."""
    mark = stream.mark()
    time.sleep(3)
    rows = [r for rows in stream.since(mark) for r in rows
            if r["role"] == "broker" and r["state"] == "ESTABLISHED"]
    grown = {}
    for row in rows:
        first = grown.setdefault(row["key"], [row["bytes_sent"], row])
        first[1] = row
    best = max(grown.values(), key=lambda g: g[1]["bytes_sent"] - g[0], default=None)
    return best[1] if best and best[1]["bytes_sent"] > best[0] else None


def silent_drop(dropped: bool, play: Play, scenario: FindingScenario) -> list[Told]:
    """A consumer fetching; one of its broker connections dropped (or, the twin, its broker
    holding each fetch 3 s)."""
    options = ("-X", "socket.timeout.ms=15000") if dropped else ("-X", "fetch.wait.max.ms=3000")
    client = consumer(play, "confluent-kafka consumer", *options)
    stream, drop, packets, lifted = Stream(client.pid, None).start(), None, None, None
    try:
        ports = sorted({n.ports["PLAINTEXT"] for n in play.cluster.nodes})
        packets = Packets(ports)
        conn = busiest_broker_connection(stream) if dropped else {}
        if conn is None:
            return [Told(scenario.name, client.name, scenario.reason,
                         not_run="the consumer fetched on no broker connection")]
        started, since = time.monotonic(), stream.mark()
        if dropped:
            drop = Drop(int(conn["remote"].rpartition(":")[2]),
                        int(conn["local"].rpartition(":")[2]))
        found, others = watch(stream, scenario.reason, WITHIN_S if dropped else TWIN_S, since)
        if found and not dropped:
            time.sleep(1)
    finally:
        if drop is not None:
            drop.close()
            lifted = time.time()
        stream.stop()
        client.stop()
        lines = packets.stop() if packets is not None else []
    unanswered = unacked_retransmits(lines, lifted)
    return [told(scenario, client.name, bool(unanswered), found, started, others,
                 f"the capture: segments resent and never acked on {unanswered or 'none'}")]


def advertised(reachable: bool, given: bool, play: Play,
               scenario: FindingScenario) -> list[Told]:
    """A kcat consumer bootstrapping through a forwarder to a node whose advertised port
    refuses it (or, the twin, to nodes advertising their own ports); kmon with ``-b
    FORWARDER`` when ``given``."""
    forwarder = Forwarder(("127.0.0.1", play.cluster.nodes[0].ports["PLAINTEXT"]))
    log, topic = play.log("kcat"), f"kmon-truth-advertised-{os.getpid()}"
    try:
        # the topic made by the Metadata request (through the forwarder too); the message is
        # delivered, or not, within a second
        subprocess.run(["kcat", "-P", "-b", forwarder.address, "-t", topic, "-X",
                        "message.timeout.ms=1000"], input=b"a message", timeout=30,
                       capture_output=True)
        with open(log, "w") as out:
            proc = subprocess.Popen(["kcat", "-C", "-b", forwarder.address, "-t", topic,
                                     "-d", "broker"],
                                    stdout=subprocess.DEVNULL, stderr=out)
        client = start.Client("kcat consumer through a forwarder", proc, log)
        started = time.monotonic()
        stream = Stream(client.pid, forwarder.address if given else None).start()
        try:
            found, others = watch(stream, scenario.reason,
                                  TWIN_S if reachable else WITHIN_S)
        finally:
            stream.stop()
            client.stop()
    finally:
        forwarder.close()
    failed = logged(log, r"Connect to ipv[46]#\S+ failed")
    return [told(scenario, client.name, bool(failed), found, started, others,
                 f"its log: {len(failed)} failed connects")]


def fd_near_limit(held: int, play: Play, scenario: FindingScenario) -> list[Told]:
    """A consumer under a soft limit of FD_LIMIT open files holding ``held`` before its
    client starts."""
    wrapper = (sys.executable, "-c", FD_WRAPPER, str(FD_LIMIT), str(held))
    client = consumer(play, f"consumer holding {held} of {FD_LIMIT} fds", wrapper=wrapper)
    started = time.monotonic()
    stream = Stream(client.pid, None).start()
    try:
        found, others = watch(stream, scenario.reason, WITHIN_S if held else TWIN_S)
        count, limit = fd_share(client.pid)  # the oracle, while it runs
    finally:
        stream.stop()
        client.stop()
    return [told(scenario, client.name, count >= 0.8 * limit, found, started, others,
                 f"/proc: {count} of {limit}")]


def duplicate(shared: bool, play: Play, scenario: FindingScenario) -> list[Told]:
    """Two consumers of one group with one client.id (or, the twin, ids of their own);
    kmon ps -o json, which sees every process of the host."""
    ids = ["orders-app", "orders-app"] if shared else ["orders-app-0", "orders-app-1"]
    group = f"kmon-truth-{os.getpid()}"
    started_clients = [consumer(play, f"consumer {i} ({cid})", "--client-id", cid,
                                "--group", group, ready=False, instrument=True)
                       for i, cid in enumerate(ids)]
    out = []
    try:
        time.sleep(5)  # joined, its statistics spooled
        started = time.monotonic()
        found: dict[int, dict | None] = {c.pid: None for c in started_clients}
        deadline = started + (WITHIN_S if shared else TWIN_S)
        others: set[str] = set()
        while time.monotonic() < deadline and not all(found.values()):
            for pid, findings in ps_findings(set(found)).items():
                for finding in findings:
                    if finding["reason"] == scenario.reason:
                        found[pid] = found[pid] or finding
                    else:
                        others.add(finding["reason"])
            time.sleep(0.5)
        logged_ids = [client_ids(c.log) for c in started_clients]
        truth = bool(set.intersection(*logged_ids))
        for client, its_ids in zip(started_clients, logged_ids, strict=True):
            out.append(told(scenario, client.name, truth, found[client.pid], started,
                            sorted(others), f"its log names it {sorted(its_ids)}"))
    finally:
        for client in started_clients:
            client.stop()
    return out


def rebootstrap(reaped: bool, play: Play, scenario: FindingScenario) -> list[Told]:
    """A producer whose only broker reaps it when idle, so that librdkafka goes back to its
    bootstrap server (or, the twin, a producer of a cluster that reaps nothing soon)."""
    client = start.workload("confluent-kafka producer, agent", "producer",
                            play.cluster.bootstrap(), play.log("producer"), instrument=True)
    started = time.monotonic()
    stream = Stream(client.pid, play.cluster.bootstrap()).start()
    try:
        found, others = watch(stream, scenario.reason, 2 * WITHIN_S if reaped else TWIN_S,
                              wanted=lambda f: f["evidence"].get("recovery_ms") is not None)
    finally:
        stream.stop()
        client.stop()
    went_back = logged(client.log, "Starting re-bootstrap sequence")
    return [told(scenario, client.name, bool(went_back), found, started, others,
                 f"its log: {len(went_back)} re-bootstraps")]


def coordinator_moves(log: Path) -> list[int]:
    """The coordinators the client's own log named in turn (the first one found, then each
    new one)."""
    path = []
    for line in logged(log, "CGRPCOORD"):
        if (found := MOVED.search(line)) and (not path or path[-1] != int(found[2])):
            path.append(int(found[2]))
    return path


def coordinator_flapping(moved: bool, play: Play, scenario: FindingScenario) -> list[Told]:
    """A group member whose coordinator's node is killed (and started again) MOVES times,
    the coordinator moving each time (or, the twin, a member left alone)."""
    client = consumer(play, "confluent-kafka consumer", instrument=True)
    stream = Stream(client.pid, play.cluster.bootstrap()).start()
    started = time.monotonic()
    try:
        for move in range(MOVES if moved else 0):
            path = coordinator_moves(client.log)
            victim = next(n for n in play.cluster.nodes if n.node_id == path[-1])
            play.cluster.kill(victim)
            deadline = time.monotonic() + 60
            while len(coordinator_moves(client.log)) == len(path):
                if time.monotonic() > deadline:
                    raise RuntimeError("the coordinator did not move")
                time.sleep(0.5)
            if move < MOVES - 1:
                play.cluster.start_node(victim)
                play.cluster.wait_ready()
                time.sleep(3)  # back in the partition's ISR, ready to lead again
        started = time.monotonic()
        found, others = watch(stream, scenario.reason, WITHIN_S if moved else TWIN_S)
    finally:
        stream.stop()
        client.stop()
    path = coordinator_moves(client.log)
    return [told(scenario, client.name, len(path) - 1 >= MOVES, found, started, others,
                 f"its log: coordinator {' -> '.join(map(str, path))}")]


SCENARIOS = {s.name: s for s in [
    FindingScenario("silent-drop", "every segment of one consumer's broker connection "
                    "dropped (nftables)", "silent_drop", "three nodes",
                    partial(silent_drop, True)),
    FindingScenario("silent-drop-twin", "a consumer whose broker holds each fetch 3 s",
                    "silent_drop", "three nodes", partial(silent_drop, False)),
    FindingScenario("advertised-unreachable", "a kcat consumer through a forwarder; the "
                    "advertised port refuses it", "advertised_unreachable",
                    "advertising a dead port", partial(advertised, False, False)),
    FindingScenario("advertised-unreachable-b", "as advertised-unreachable, kmon given "
                    "-b FORWARDER", "advertised_unreachable", "advertising a dead port",
                    partial(advertised, False, True)),
    FindingScenario("advertised-unreachable-twin", "a kcat consumer through a forwarder to "
                    "nodes advertising their own ports", "advertised_unreachable",
                    "three nodes", partial(advertised, True, False)),
    FindingScenario("fd-near-limit", f"a consumer holding 210 of {FD_LIMIT} descriptors",
                    "fd_near_limit", "three nodes", partial(fd_near_limit, 210)),
    FindingScenario("fd-near-limit-twin", f"a consumer under a limit of {FD_LIMIT} "
                    "descriptors, holding what it opens", "fd_near_limit", "three nodes",
                    partial(fd_near_limit, 0)),
    FindingScenario("duplicate-client-id", "two consumers of one group, client.id "
                    "orders-app", "duplicate_client_id", "three nodes",
                    partial(duplicate, True)),
    FindingScenario("duplicate-client-id-twin", "two consumers of one group with ids of "
                    "their own", "duplicate_client_id", "three nodes",
                    partial(duplicate, False)),
    FindingScenario("rebootstrap", "a producer of one node reaping idle connections after "
                    "4 s", "rebootstrap", "reaping idle after 4 s",
                    partial(rebootstrap, True)),
    FindingScenario("rebootstrap-twin", "a producer of three nodes reaping nothing soon",
                    "rebootstrap", "three nodes", partial(rebootstrap, False)),
    FindingScenario("coordinator-flapping", f"a group member whose coordinator's node is "
                    f"killed {MOVES} times", "coordinator_flapping",
                    "three nodes, offsets on one partition",
                    partial(coordinator_flapping, True)),
    FindingScenario("coordinator-flapping-twin", "a group member left alone",
                    "coordinator_flapping", "three nodes",
                    partial(coordinator_flapping, False)),
]}
# run in kmon's suite (tests/test_truth_findings.py) on a cluster it shares: some 30 s
FAST = ("fd-near-limit", "fd-near-limit-twin", "duplicate-client-id")


def run(names: list[str], cluster: KafkaCluster | None = None) -> list[Told]:
    """Run the scenarios ``names``, one cluster per bed (``cluster`` for every one, when
    given: a cluster of the caller's)."""
    out: list[Told] = []
    for bed in BEDS:
        scenarios = [SCENARIOS[n] for n in names if SCENARIOS[n].bed == bed]
        if scenarios:
            out += _run_bed(bed, scenarios, cluster)
    return out


def _run_bed(bed: str, scenarios: list[FindingScenario],
             given: KafkaCluster | None) -> list[Told]:
    brokers, config = BEDS[bed]
    config = dict(config)
    if bed == "advertising a dead port":  # nothing listens there: connects to it are refused
        config["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{_free_port()}"
    cluster = given if given is not None and not config else None
    own = cluster is None
    if own:
        cluster = KafkaCluster(brokers, config)
        try:
            cluster.start()
        except Exception as err:  # noqa: BLE001 (any reason is the table's "not run")
            cluster.stop()
            return [Told(s.name, "", s.reason, not_run=f"the cluster did not start: {err}")
                    for s in scenarios]
    out = []
    try:
        for scenario in scenarios:
            print(f"running {scenario.name}...", file=sys.stderr, flush=True)
            play = Play(cluster, Path(tempfile.mkdtemp(prefix="kmon-truth-")))
            try:
                out += scenario.play(play, scenario)
            except Exception as err:  # noqa: BLE001
                out.append(Told(scenario.name, "", scenario.reason,
                                not_run=f"{type(err).__name__}: {err}"))
    finally:
        if own:
            cluster.stop()
    return out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- the report -----------------------------------------------------------------------------

def tallies(results: list[Told]) -> dict[str, Tally]:
    """Per finding, its confusion matrix: (the oracle's answer, kmon's) -> count."""
    out: dict[str, Tally] = {}
    for r in results:
        if r.not_run or r.truth is None:
            continue
        truth, said = (r.reason if r.truth else "none"), (r.reason if r.raised else "none")
        out.setdefault(r.reason, Tally()).add(truth, said, False, 1.0,
                                              f"{r.scenario}, {r.client}")
        if r.truth and not r.raised:
            out[r.reason].missed += 1
    return out


HEADER = ("scenario", "client", "oracle", "kmon", "took", "other findings", "evidence")


def rows(results: list[Told]) -> list[tuple[str, ...]]:
    return [(r.scenario, r.client, f"not run: {r.not_run}", "", "", "", "") if r.not_run
            else (r.scenario, r.client, {True: "yes", False: "no", None: "?"}[r.truth],
                  "raised" if r.raised else "-", f"{r.took_s} s" if r.took_s else "",
                  ", ".join(r.others), r.detail[:90])
            for r in results]


def text_table(results: list[Told]) -> str:
    table = [HEADER, *rows(results)]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in table]
    for reason, tally in tallies(results).items():
        lines.append(f"{reason}: {tally.right} right of {tally.told}, {tally.wrong} wrong "
                     f"({tally.confident_wrong} confidently), {tally.missed} missed; matrix "
                     + ", ".join(f"oracle {t} × kmon {s}: {n}"
                                 for (t, s), n in sorted(tally.matrix.items())))
    return "\n".join(lines)


def markdown(results: list[Told]) -> str:
    from benchmarks.truth.report import matrix_markdown

    lines = ["## Findings", "", "Each finding's scenario and negative twin against an oracle "
             "kmon does not use (benchmarks/truth/findings.py says which). A finding raised "
             "while the oracle says no is confidently wrong.", "",
             "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER),
             *("| " + " | ".join(row) + " |" for row in rows(results)), ""]
    for reason, tally in tallies(results).items():
        lines += matrix_markdown(f"{reason} (right {tally.right} of {tally.told}, "
                                 f"confidently wrong {tally.confident_wrong}, missed "
                                 f"{tally.missed})", tally)
    return "\n".join(lines)
