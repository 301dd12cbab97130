"""kmon's verdicts against the oracles: per verdict family a confusion matrix (oracle's
answer × kmon's), and the counts right, wrong, confidently wrong, unsettled.

A close's truth, in order: a SYN answered by a RST is ``-/connect_failed``; the
side is the first FIN or RST's (``both`` when each side sent its FIN before it had
the other's: a simultaneous close, where either side is right); closed by the broker
without a byte from it while the brokers' log rejected connections,
``per_ip_rejected``; to a SASL port that answered, while the brokers' log failed
authentications, ``auth_failed``; a RST first, ``reset``; the client's,
``client_idle_reap`` when its log reaped that handle's socket (logged after its FIN,
before the handle's next connect), else
``client_closed`` (no oracle where two handles connected at once and /proc never showed
the socket's fd); the broker's, ``broker_idle_reap`` when the packets show it idle
for the broker's limit (less 100 ms), else ``broker_closed``. A socket's role is the
librdkafka handle whose ``connect()`` made it (by its fd in /proc, else the connect
logged last before the SYN), under the name the handle bore then (``/bootstrap``,
``/N``, ``GroupCoordinator``). The Java client's socket has its role from the node id its
DEBUG log initiated it with (``java_client_log``: ``-N`` bootstrap, ``+B`` or ``2147483647 -
B`` coordinator:B, ``B`` broker:B), the packets' requests a cross-check. A client with no
such log (kafka-python, KafkaJS, Go) has its sockets' roles from the requests the packets
show it sent:
a group API on it (JoinGroup, Heartbeat, OffsetCommit, ConsumerGroupHeartbeat…), a
coordinator of its broker; a Produce, Fetch or ListOffsets, a broker; both, either; only
ApiVersions, Metadata and FindCoordinator on the client's first connection, bootstrap;
anything else has no oracle.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from benchmarks.truth.capture import Flow
from benchmarks.truth.client_log import ClientLog, role_of
from benchmarks.truth.java_client_log import JavaConnect
from benchmarks.truth.kmon_views import with_ports

UNSETTLED = {"unknown", "unsettled", "?", None}
CONFIDENT = 0.9  # a wrong answer at this confidence or more is confidently wrong


@dataclass
class Tally:
    """One verdict family of one client in one scenario."""

    matrix: Counter = field(default_factory=Counter)  # (oracle, kmon) -> count
    right: int = 0
    wrong: int = 0
    confident_wrong: int = 0
    unsettled: int = 0
    no_oracle: int = 0  # kmon spoke of a socket no oracle could tell about
    missed: int = 0  # the oracle saw it, kmon told nothing
    wrongs: list[str] = field(default_factory=list)  # each wrong verdict, for the report

    def add(self, truth: str, said: str, unsettled: bool, confidence: float,
            what: str = "") -> None:
        self.matrix[(truth, said)] += 1
        if unsettled:
            self.unsettled += 1
        elif said in truth.split(" or ") or (truth.startswith("both/") and said.partition("/")[2]
                                          == truth.partition("/")[2]):
            self.right += 1
        else:
            self.wrong += 1
            self.confident_wrong += confidence >= CONFIDENT
            self.wrongs.append(f"{what}: {said} at confidence {confidence:g}, truly {truth}")

    @property
    def told(self) -> int:
        """The verdicts kmon committed to: an unsettled one (``?``, unknown) is counted
        apart, never right nor wrong."""
        return self.right + self.wrong


@dataclass
class Context:
    """What the oracles know of a scenario, none of it from kmon."""

    flows: dict[tuple[int, int], Flow]
    log: ClientLog
    fds: dict[tuple[int, int], int]  # (local, remote port) -> fd, from /proc
    node_of_port: dict[int, int]
    broker_idle_ms: int | None = None
    per_ip_rejections: int = 0  # the brokers' log's "Rejected connection" lines
    auth_failures: int = 0  # the brokers' log's "Failed authentication" lines
    sasl_ports: frozenset[int] = frozenset()
    first_syn_ms: float | None = None  # the client's first connection attempt
    # (local port, server port, SYN ms) -> the Java client's log line that initiated it
    java_nodes: dict[tuple[int, int, float], JavaConnect] = field(default_factory=dict)
    # the attempts the client's log claims, one each (``log_claims``), once asked
    claimed: frozenset[tuple[int, int, float]] | None = field(default=None, compare=False)


def close_truth(flow: Flow, ctx: Context) -> str | None:
    """side/reason of a close, from its packets, the client's log and the brokers' log (None:
    the client's own close of a socket whose handle its log does not tell)."""
    if flow.refused:
        return "-/connect_failed"
    label = close_reason(flow, ctx)
    if label is None:
        return None
    return "both/" + label.partition("/")[2] if flow.simultaneous else label


def close_reason(flow: Flow, ctx: Context) -> str | None:
    side = "client" if flow.first_close_by == "client" else "broker"
    if ctx.per_ip_rejections and side == "broker" and flow.server_bytes == 0:
        return "broker/per_ip_rejected"
    if ctx.auth_failures and flow.server_port in ctx.sasl_ports and flow.server_bytes:
        return f"{side}/auth_failed"
    if flow.first_close_kind == "RST":
        return f"{side}/reset"
    if side == "client":
        connect = handle(flow, ctx)
        if connect is None and ctx.log.connects:
            return None  # two handles connected at once, its fd unseen: reaped or not, unknown
        reaped = connect is not None and ctx.log.reaped(connect, flow.close_ms)
        return "client/client_idle_reap" if reaped else "client/client_closed"
    idle = flow.idle_at_close_ms()
    if ctx.broker_idle_ms and idle is not None and idle >= ctx.broker_idle_ms - 100:
        return "broker/broker_idle_reap"
    return "broker/broker_closed"


def kmon_close(event: dict) -> tuple[str, bool]:
    """(side/reason as kmon told it, whether it left it unsettled)."""
    reason = event.get("reason")
    if reason == "connect_failed":
        return "-/connect_failed", False
    side = event.get("closed_by") or "unknown"
    return f"{side}/{reason}", reason in UNSETTLED or side in UNSETTLED


def handle(flow: Flow, ctx: Context):
    return ctx.log.handle_of(flow.server_port, flow.syn_ms,
                             ctx.fds.get((flow.client_port, flow.server_port)))


def owned(flow: Flow, ctx: Context) -> bool:
    """The client's own connection: /proc showed it in the process, or its log claims it
    (``log_claims``)."""
    if (flow.client_port, flow.server_port) in ctx.fds:
        return True
    if ctx.claimed is None:
        ctx.claimed = log_claims(ctx.flows, ctx.log)
    return (flow.client_port, flow.server_port, flow.syn_ms) in ctx.claimed


def log_claims(flows: dict[tuple[int, int], Flow],
               log: ClientLog) -> frozenset[tuple[int, int, float]]:
    """The attempts the client's log claims, each line one at most: a logged connect() the
    SYN to its port nearest it (from 1 ms before the line to 20 ms after: the line is
    written right before the call, its time cut to the millisecond), a logged refusal the
    refused attempt to its port nearest it (within 100 ms). Another program's connects to
    the same port between the client's own (kmon's own cluster queries, to a stopped
    broker) are claimed by no line, however near one they came."""
    attempts = [f for latest in flows.values() for f in latest.attempts()]

    def claims(lines: Iterable[tuple[float, int]], window: tuple[float, float],
               candidates: list[Flow], when) -> set[tuple[int, int, float]]:
        """Each line's nearest unclaimed attempt to its port with ``when`` from
        ``window[0]`` to ``window[1]`` ms of it."""
        by_port: dict[int, list[tuple[float, Flow]]] = {}
        for flow in candidates:
            by_port.setdefault(flow.server_port, []).append((when(flow), flow))
        for timed in by_port.values():
            timed.sort(key=lambda pair: pair[0])
        claimed: set[tuple[int, int, float]] = set()
        for at_ms, port in lines:
            timed = by_port.get(port, [])
            start = bisect.bisect_left(timed, at_ms + window[0], key=lambda pair: pair[0])
            end = bisect.bisect_right(timed, at_ms + window[1], key=lambda pair: pair[0])
            near = [(abs(t - at_ms), flow) for t, flow in timed[start:end]
                    if (flow.client_port, port, flow.syn_ms) not in claimed]
            if near:
                flow = min(near, key=lambda pair: pair[0])[1]
                claimed.add((flow.client_port, port, flow.syn_ms))
        return claimed

    connects = claims(((c.ts_ms, c.port) for c in log.connects), (-1, 20), attempts,
                      lambda f: f.syn_ms)
    refusals = claims(log.refused, (-100, 100), [f for f in attempts if f.refused],
                      lambda f: f.close_ms)
    return frozenset(connects | refusals)


def score_closes(closes: list[dict], ctx: Context, since_ms: int, until_ms: int) -> Tally:
    """Every close kmon told against the packets; the client's closes it did not tell."""
    tally = Tally()
    told = set()
    for event in closes:
        flow = nearest(ctx.flows, event)
        said, unsettled = kmon_close(event)
        if flow is None or flow.close_ms is None:
            tally.no_oracle += 1
            tally.matrix[("(no packets)", said)] += 1
            continue
        told.add((flow.client_port, flow.server_port, flow.syn_ms))
        truth = close_truth(flow, ctx)
        if truth is None:
            tally.no_oracle += 1
            tally.matrix[("(no handle)", said)] += 1
            continue
        tally.add(truth, said, unsettled, 1.0,
                  f"close of :{flow.client_port}>:{flow.server_port}")
    for flow in (f for latest in ctx.flows.values() for f in latest.attempts()):
        if (flow.close_ms is not None and since_ms <= flow.close_ms <= until_ms
                and owned(flow, ctx)
                and (flow.client_port, flow.server_port, flow.syn_ms) not in told):
            tally.missed += 1
            tally.matrix[(close_truth(flow, ctx) or "(no handle)", "(none)")] += 1
    return tally


def nearest(flows: dict[tuple[int, int], Flow], event: dict) -> Flow | None:
    """The attempt on a close event's ports whose first FIN or RST is nearest the close kmon
    timed (a client reuses a port whose last connection the broker closed: no TIME_WAIT on
    its side)."""
    ports = event["ports"]
    flow = flows.get(ports) if None not in ports else None
    if flow is None:
        return None
    at = event.get("closed_ms") or event["ts_ms"]
    return min(flow.attempts(), key=lambda f: abs((f.close_ms or f.syn_ms) - at))


def kmon_role(row: dict) -> str:
    role = row.get("role")
    if role in ("broker", "coordinator"):
        return f"{role}:{row.get('broker_id') if row.get('broker_id') is not None else '?'}"
    return role or "unknown"


GROUP_APIS = {8, 9, 11, 12, 13, 14, 68, 69, 24, 25, 26, 28}  # to a group's (txn) coordinator
DATA_APIS = {0, 1, 2, 23}  # Produce, Fetch, ListOffsets, OffsetForLeaderEpoch
METADATA_APIS = {3, 10, 17, 18, 36, 60, 71, 72}  # asked of any broker (and SASL's)


def packet_role(flow: Flow, ctx: Context) -> str | None:
    """A socket's role from the requests the client sent on it (None: they do not tell)."""
    node = ctx.node_of_port.get(flow.server_port, "?")
    group, data = flow.api_keys & GROUP_APIS, flow.api_keys & DATA_APIS
    if group or data:
        return " or ".join([f"coordinator:{node}"] * bool(group) + [f"broker:{node}"] * bool(data))
    if flow.api_keys and flow.api_keys <= METADATA_APIS and flow.syn_ms == ctx.first_syn_ms:
        return "bootstrap"
    return None


def score_roles(rows: dict[tuple[int, int], dict], ctx: Context,
                packets_only: bool = False) -> Tally:
    """Each socket's role as kmon last showed it against the client's own log (the librdkafka
    handle that opened it, the Java client's node id) or, for a client with neither (or
    ``packets_only``: the cross-check), the requests it carried."""
    tally = Tally()
    for ports, row in rows.items():
        flow = ctx.flows.get(ports)
        said = kmon_role(row)
        unsure = unsettled(row)
        confidence = row.get("confidence") or 0.0
        what = f"socket :{ports[0]}>:{ports[1]}"
        java = (ctx.java_nodes.get((flow.client_port, flow.server_port, flow.syn_ms))
                if flow is not None and not packets_only else None)
        if java is not None:
            tally.add(java.role, said, unsure, confidence, f"{what} (node {java.node})")
            continue
        connect = handle(flow, ctx) if flow is not None and not packets_only else None
        if connect is None and flow is not None and (packets_only or not ctx.log.connects):
            truth = packet_role(flow, ctx)
            if truth is not None:
                apis = ",".join(map(str, sorted(flow.api_keys)))
                tally.add(truth, said, unsure, confidence, f"{what} (API keys {apis})")
                continue
        if connect is None:
            tally.no_oracle += 1
            tally.matrix[("(requests untold)" if packets_only else "(no log)", said)] += 1
            continue
        name = ctx.log.name_of(connect, flow.close_ms)
        tally.add(role_of(name, connect.port, ctx.node_of_port), said, unsure, confidence,
                  f"{what} ({name})")
    return tally


def oracle_disagreements(ctx: Context) -> list[str]:
    """Sockets the Java client's log initiated as one role and whose requests (the packets)
    tell another: the two oracles at odds, kmon aside."""
    found = []
    for (local, server, syn_ms), java in sorted(ctx.java_nodes.items()):
        flow = next(f for f in ctx.flows[(local, server)].attempts() if f.syn_ms == syn_ms)
        packets = packet_role(flow, ctx)
        if packets is not None and java.role not in packets.split(" or "):
            apis = ",".join(map(str, sorted(flow.api_keys)))
            found.append(f"socket :{local}>:{server}: node {java.node} ({java.role}) in the "
                         f"client's log, {packets} by its requests (API keys {apis})")
    return found


ROLES = ("bootstrap", "coordinator", "broker", "unknown")


def unsettled(row: dict) -> bool:
    """Whether kmon left a socket's role unsaid: unknown, or a role with no node (broker:?)."""
    return row.get("role") in UNSETTLED or kmon_role(row).endswith(":?")


def once_disagreements(around: list[list[dict]], once_rows: list[dict]) -> list[str]:
    """Sockets ``--once`` names otherwise than the stream did in every snapshot from just
    before it ran to just after (``around``: the stream's rows then; a socket that changed
    meanwhile counts for whichever it matches). A socket ``--once`` leaves unsettled names
    nothing: no disagreement (issue 33: a one-shot view that cannot tell says so)."""
    lives = [{row["key"]: kmon_role(row) for row in rows} for rows in around]
    return [f"{' / '.join(sorted({live[row['key']] for live in lives if row['key'] in live}))}"
            f" in the stream, {kmon_role(row)} in --once"
            for row in once_rows if not unsettled(row)
            and any(row["key"] in live for live in lives)
            and all(live.get(row["key"], kmon_role(row)) != kmon_role(row) for live in lives)]


def ps_disagreements(around: list[list[dict]], ps_row: dict | None,
                     view: str = "ps") -> list[str]:
    """Roles whose count ``kmon ps`` (or another ``view``'s {role: count}) gives otherwise
    than the stream in every snapshot from just before it ran to just after (a process ps
    does not list counts none)."""
    counts = [Counter(row.get("role") for row in rows) for rows in around]
    mine = ps_row or {}
    if any(not counts_differ(c, mine) for c in counts):
        return []
    return [f"{role}: {' / '.join(sorted({str(c.get(role, 0)) for c in counts}))} in the "
            "stream, "
            f"{mine.get(role, 0)} in {view}{'' if ps_row else ' (the process not listed)'}"
            for role in ROLES if all(c.get(role, 0) != mine.get(role, 0) for c in counts)]


def counts_differ(stream: Counter, view: dict) -> bool:
    """Whether a view's {role: count} says otherwise than the stream's: not when every role
    the view is short of is made up by sockets it left unknown (unsettled, not wrong)."""
    short = [stream.get(role, 0) - view.get(role, 0) for role in ROLES if role != "unknown"]
    spare = view.get("unknown", 0) - stream.get("unknown", 0)
    return min(short) < 0 or sum(short) != spare


def summed_disagreements(arounds: list[list[list[dict]]], counts: dict,
                         view: str = "/metrics", between: Iterable[str] = ()) -> list[str]:
    """Roles whose count ``view`` gives for processes it adds up (kmon serve: one command's)
    outside what their streams allow together: each stream's least to most over its
    snapshots from just before the view ran to just after, summed. ``between``: the roles at
    their close of sockets that lived between those snapshots (``Stream.between``): the view
    may have polled one, named or not yet (unknown); one the stream never named (no poll of
    its showed it: the kernel's events told its life) it may have named anything."""
    ranges = {role: [0, 0] for role in ROLES}
    for around in arounds:
        seen = [Counter(row.get("role") for row in rows) for rows in around] or [Counter()]
        for role in ROLES:
            ranges[role][0] += min(c.get(role, 0) for c in seen)
            ranges[role][1] += max(c.get(role, 0) for c in seen)
    for role in between:  # named at its close: that role or unknown; unnamed: any role
        for each in {role, "unknown"} if role in ranges and role != "unknown" else ranges:
            ranges[each][1] += 1
    # the roles the view is short of, made up by sockets it left unknown: unsettled, not wrong
    short = {role: max(0, low - counts.get(role, 0)) for role, (low, _) in ranges.items()
             if role != "unknown"}
    if sum(short.values()) <= counts.get("unknown", 0) - ranges["unknown"][0]:
        for role, missing in short.items():
            ranges[role][0] -= missing
        ranges["unknown"][1] += sum(short.values())
    return [f"{role}: {low}–{high} in the streams, {counts.get(role, 0)} in {view}"
            for role, (low, high) in ranges.items() if not low <= counts.get(role, 0) <= high]


def record_disagreements(history: dict[str, list[tuple[int, dict]]], closes: list[dict],
                         snapshots: list[dict], events: list[dict], pid: int) -> list[str]:
    """Where ``kmon record``'s tables say otherwise than the stream about ``pid``: a socket's
    last recorded role that the stream never gave it within 2 s of that poll (``history``:
    the stream's rows of each socket by time), a close told with another side or reason,
    a close one told and the other not (away from the ends of the recording's watch of the
    process: ``kmon record -b`` finds a cluster's clients every 10 s, one with no connection
    open at that moment the next time). A socket it found at its first look at the process
    opened before that look, when its capture of the process opens (its handshake unseen):
    where it left that socket, or its close, unsettled, it says it cannot tell, as
    ``--once`` may (``once_disagreements``); so does a socket it last saw unsettled before
    the stream had settled it (a connection living less than a poll, each view's one look
    at it at another moment of its short life); and a close, unsettled, of a connection
    opened before that look, which no poll of it showed (its kernel's open and close read).
    A close is the same one in both by its ports and its time, not its key: a view whose
    poll saw the socket keys it by its inode, one whose polls missed it by its endpoints
    (``kernel:…``)."""
    found = []
    last = last_recorded(snapshots, pid)
    times = [row["ts_ms"] for row in snapshots if row["pid"] == pid]  # while it watched pid
    before = {row["key"] for row in snapshots if row["pid"] == pid  # at its first look
              and row["ts_ms"] == min(times)}
    alone = recorded_only_roles(last, history)
    for key, row in last.items():
        if key in alone or unsettled(row) and (key in before or not any(
                ts <= row["ts_ms"] and not unsettled(seen) for ts, seen in history.get(key, []))):
            continue
        said = kmon_role(row)
        near = {kmon_role(seen) for ts, seen in history.get(key, [])
                if abs(ts - row["ts_ms"]) <= 2000}
        if near and said not in near:
            found.append(f"{key}: {said} recorded, {' / '.join(sorted(near))} in the stream")
    recorded = recorded_closes(snapshots, events, pid)
    pairs, told_only = same_closes(recorded, closes)
    first_look = min(times, default=None)
    for ours, theirs in pairs:
        said, heard = (f"{e.get('closed_by')}/{e.get('reason')}" for e in (ours, theirs))
        unseen = ours["key"] in before or (first_look is not None and (
            ours.get("opened_ms") or close_at(ours)) < first_look)
        if said != heard and (not unseen or not kmon_close(ours)[1]):
            found.append(f"close of {ours['key']}: {said} recorded, {heard} in the stream")
    if times:
        inside = range(min(times) + 1000, max(times) - 2000)
        matched = {id(ours) for ours, _ in pairs}
        found += [f"close of {e['key']} in the stream only" for e in told_only
                  if e["ts_ms"] in inside]
        found += [f"close of {e['key']} recorded only" for e in recorded
                  if id(e) not in matched and e["ts_ms"] in inside]
    return found


def last_recorded(snapshots: list[dict], pid: int) -> dict[str, dict]:
    """Each socket's last row of ``pid`` in ``kmon record``'s snapshots, by key."""
    last: dict[str, dict] = {}
    for row in snapshots:
        if row["pid"] == pid and row["ts_ms"] >= last.get(row["key"], {}).get("ts_ms", 0):
            last[row["key"]] = row
    return last


def recorded_only_roles(last: dict[str, dict], history: dict[str, list[tuple[int, dict]]]
                        ) -> dict[str, dict]:
    """The sockets whose last recorded row (``last``) names a role the stream never gave
    them, where the stream left them unsettled within 2 s of that poll and settled them
    nowhere (a connection living less than a poll: each view's look at it at another moment
    of its short life). Not the stream's word against the recording's: the recording's
    alone, held to the oracle (``recorded_role_wrongs``)."""
    alone = {}
    for key, row in last.items():
        seen = history.get(key, [])
        if (not unsettled(row) and any(abs(ts - row["ts_ms"]) <= 2000 for ts, _ in seen)
                and all(unsettled(said) for _, said in seen)):
            alone[key] = row
    return alone


def recorded_role_wrongs(snapshots: list[dict], history: dict[str, list[tuple[int, dict]]],
                         pid: int, ctx: Context) -> list[str]:
    """The roles of ``pid``'s sockets only ``kmon record`` settled (``recorded_only_roles``)
    that it told otherwise than the oracle the stream's roles are scored by."""
    rows = {ports: row for row in recorded_only_roles(last_recorded(snapshots, pid),
                                                      history).values()
            if (ports := row_ports(row)) is not None}
    return [f"recorded only: {wrong}" for wrong in score_roles(rows, ctx).wrongs]


def row_ports(row: dict) -> tuple[int, int] | None:
    """A row's (local port, remote port), where it names both."""
    ends = [str(row.get(side) or "").rpartition(":")[2] for side in ("local", "remote")]
    return (int(ends[0]), int(ends[1])) if all(end.isdigit() for end in ends) else None


def recorded_closes(snapshots: list[dict], events: list[dict], pid: int) -> list[dict]:
    """``pid``'s closes in ``kmon record``'s tables, each with its ports (``with_ports``)."""
    return with_ports([e for e in events if e["kind"] == "closed" and e["pid"] == pid],
                      {row["key"]: row["local"] for row in snapshots if row["pid"] == pid})


def recorded_wrongs(snapshots: list[dict], events: list[dict], pid: int, told: list[dict],
                    ctx: Context) -> list[str]:
    """The closes of ``pid`` only ``kmon record`` told (none of the stream's ``told`` is the
    same close: ``record_disagreements`` holds those to the stream), that it told otherwise
    than the packets, the oracle the stream's closes are scored by."""
    pairs, _ = same_closes(recorded := recorded_closes(snapshots, events, pid), told)
    paired = {id(ours) for ours, _ in pairs}
    alone = [event for event in recorded if id(event) not in paired]
    tally = score_closes(alone, ctx, since_ms=1, until_ms=0)  # (an empty window: none missed)
    return [f"recorded only: {wrong}" for wrong in tally.wrongs]


def close_truths(ctx: Context, told: list[dict]) -> Counter:
    """The oracle's close of every connection of the client the packets saw close, by
    "side/reason" (None: the packets and logs do not tell): those ``owned`` shows it held,
    and those its stream told closes of (``told``: a socket that lived less than the
    owners' look at /proc, as a reconnect a dead broker reset, is the client's by the
    kernel's events alone)."""
    flows = {id(flow): flow for latest in ctx.flows.values() for flow in latest.attempts()
             if flow.close_ms is not None and owned(flow, ctx)}
    for event in told:
        flow = nearest(ctx.flows, event)
        if flow is not None and flow.close_ms is not None:
            flows[id(flow)] = flow
    return Counter(close_truth(flow, ctx) for flow in flows.values())


def served_close_excess(served: Counter, truths: Counter) -> list[str]:
    """The close kinds ``kmon serve``'s ``kmon_connections_closed_total`` counted more of
    than the packets hold for the processes it adds up (``truths``: ``close_truths`` summed
    over them): serve counts the closes of its watch, a part of the scenario, so a settled
    kind beyond the packets' closes of that kind (a close both sides began counts for
    either side; one the oracle cannot tell, for any kind) is a close told wrong."""
    untold = truths[None]
    found = []
    for kind, count in sorted(served.items()):
        side, _, reason = kind.partition("/")
        if reason in UNSETTLED or side in UNSETTLED:
            continue
        held = truths[kind] + truths[f"both/{reason}"] + untold
        if count > held:
            found.append(f"closes {kind}: {count} in /metrics, {held} in the packets")
    return found


SAME_CLOSE_MS = 2000  # two views' stamps of one close: the kernel's, each read on its clock


def same_closes(recorded: list[dict], told: list[dict]) -> tuple[list[tuple[dict, dict]],
                                                                 list[dict]]:
    """The closes both tell, as (recorded, told) pairs: on the same ports (where the kernel
    gave no local port, under the same key), the nearest in time within SAME_CLOSE_MS (a
    client may reuse a port); and the told ones left over."""
    left = list(told)
    pairs = []
    for ours in recorded:
        at = close_at(ours)
        same = [e for e in left if e["ports"] == ours["ports"]
                and (None not in e["ports"] or e["key"] == ours["key"])
                and abs(close_at(e) - at) <= SAME_CLOSE_MS]
        if same:
            theirs = min(same, key=lambda e: abs(close_at(e) - at))
            left.remove(theirs)
            pairs.append((ours, theirs))
    return pairs, left


def close_at(event: dict) -> float:
    """When a close happened as a view told it: the kernel's time where it timed it."""
    return event.get("closed_ms") or event["ts_ms"]
