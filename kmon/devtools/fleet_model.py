"""The modelled fleet behind ``kmon simulate-fleet``: clients, their connections, the truth.

Each host is one recording session of M client processes against B brokers,
polled every ``interval`` for T hours. The model (documented in docs/analysis.md):

* Java producer: connects to every bootstrap address (node ids -1..-k) at start,
  then to every broker; only its partition leaders carry traffic. Idle
  connections are closed by the client after ``connections.max.idle.ms``
  (9 min). A share (``--churn-rate``) of the idle brokers is re-opened by each
  metadata refresh (every ``metadata.max.age.ms``, 5 min) after its reap: the
  5-min/9-min open/close cycle.
* Java consumer: bootstrap -1, then the group coordinator (node id
  2147483647 - broker) and the partition leaders; the bootstrap is dropped.
* librdkafka producer and consumer: sparse; a bootstrap seen for a poll or
  two, the leaders (and ``GroupCoordinator``); a producer, at ``--churn-rate``,
  also holds one idle broker connection that the broker closes after its
  ``connections.max.idle.ms`` (10 min).
* At ``--close-wait-rate``, a traffic-carrying connection is closed by its
  broker and sits in CLOSE_WAIT for a while before the client closes and
  re-opens it; so does a librdkafka idle connection the broker reaps.
* Every ``closed`` event says who closed it and why, as kmon's monitor does: a
  Java idle reap is the client's (``client_idle_reap``), a librdkafka idle
  connection the broker's (``broker_idle_reap``), a busy one closed through
  CLOSE_WAIT ``broker_closed``, a dropped bootstrap ``client_closed``. Each
  metadata-refresh reopen after the first of a broker raises an
  ``idle_reap_cycle`` churn event.
* At ``--per-message-rate``, a host also runs a process that makes a client per
  message: its connections live a few ms (no poll sees them), so it shows only
  as ``client_per_message`` churn events, one a minute.

``Host.truth()`` is the ground truth the analyses must find;
``kmon.devtools.fleet_writer`` writes the hosts as a recording.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kmon.classify import (
    BROKER_IDLE_MS,
    JAVA_CLIENT_IDLE_MS,
    bootstrap_node_id,
    coordinator_node_id,
)
from kmon.model import Churn, CloseStory, Event, EventKind, Role
from kmon.tcp_state import TcpState

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: the default start of a simulated fleet
METADATA_MAX_AGE_MS = 300_000
REAP_CYCLES = 2  # kmon's default [churn] reap_cycles
NEVER = 2**62  # "not before the end" for close and CLOSE_WAIT times
KIND_PATTERN = ("java-producer", "java-consumer", "librdkafka-producer",
                "librdkafka-consumer", "java-producer", "java-consumer")
# per kind and role: (request period ms, bytes sent per request, bytes received per request)
TRAFFIC = {"producer": (500, 1500, 90), "consumer": (500, 90, 1200), "coordinator": (3000, 70, 40)}


@dataclass(frozen=True)
class FleetSpec:
    """What to simulate."""

    hosts: int = 3
    clients: int = 6
    brokers: int = 6
    hours: float = 1.0
    interval_ms: int = 1000
    close_wait_rate: float = 0.1
    churn_rate: float = 0.3
    per_message_rate: float = 0.5
    seed: int = 1
    start_ms: int = START_MS

    @property
    def end_ms(self) -> int:
        return self.start_ms + int(self.hours * 3_600_000)


@dataclass
class Lifetime:
    """One TCP connection of a simulated client, from open to close."""

    role: Role
    node_id: int
    broker_id: int | None
    remote: str
    opened: int
    closed: int = NEVER
    close_wait: int = NEVER  # when the broker closed it; the client closes at ``closed``
    active: bool = False  # carries application traffic
    traffic: str = "producer"  # key of TRAFFIC
    by_refresh: bool = False  # re-opened by a metadata refresh after an idle reap
    key: str = ""

    def close_cause(self, java: bool) -> tuple[str, str]:
        """(closed_by, reason) of its close, as kmon's monitor tells it."""
        if self.close_wait != NEVER:
            return "broker", "broker_closed" if self.active else "broker_idle_reap"
        if self.role is Role.BOOTSTRAP and self.closed - self.opened < JAVA_CLIENT_IDLE_MS:
            return "client", "client_closed"
        if not self.active:
            return ("client", "client_idle_reap") if java else ("broker", "broker_idle_reap")
        return "unknown", "unknown"


@dataclass
class SimClient:
    """One client process: its identity, configuration and connections."""

    pid: int
    name: str
    client_id: str
    kind: str
    started: int
    config: dict[str, str]
    group: str | None = None
    lifetimes: list[Lifetime] = field(default_factory=list)

    @property
    def type(self) -> str:
        return self.kind.split("-")[1]

    @property
    def java(self) -> bool:
        return self.kind.startswith("java")


def broker_address(broker_id: int) -> str:
    return f"10.20.{broker_id // 256}.{broker_id % 256}:9092"


def coordinator_of(group: int, brokers: int) -> int:
    """The broker that coordinates group number ``group`` (a stand-in for Kafka's hash)."""
    return 1 + (group * 7919) % brokers


class _Model:
    """Draws the connections of the clients of one host."""

    def __init__(self, spec: FleetSpec, host: int) -> None:
        import numpy as np

        self.spec, self.host = spec, host
        self.rng = np.random.default_rng([spec.seed, host])
        self.k = min(3, spec.brokers)
        self.groups = max(1, spec.hosts * spec.clients // 6)

    def clients(self) -> list[SimClient]:
        spec, rng = self.spec, self.rng
        kinds = rng.permutation([KIND_PATTERN[i % len(KIND_PATTERN)]
                                 for i in range(spec.clients)])
        first_minute = min(60_000, int(spec.hours * 900_000))
        clients = []
        for index, kind in enumerate(kinds):
            kind = str(kind)
            java, ctype = kind.startswith("java"), kind.split("-")[1]
            number = index + 1
            name = f"{ctype}-{number}" if java else f"rdkafka#{ctype}-{number}"
            config = {"bootstrap.servers": ",".join(broker_address(b)
                                                    for b in range(1, self.k + 1)),
                      "client.id": f"app-{self.host}-{index}",
                      "metadata.max.age.ms": str(METADATA_MAX_AGE_MS)}
            if java:
                config["connections.max.idle.ms"] = str(JAVA_CLIENT_IDLE_MS)
            client = SimClient(pid=10_000 + index, name=name, client_id=config["client.id"],
                               kind=kind, started=spec.start_ms + int(rng.integers(first_minute)),
                               config=config)
            if ctype == "consumer":
                client.group = f"group-{int(rng.integers(self.groups))}"
                config["group.id"] = client.group
            getattr(self, "_" + kind.replace("-", "_"))(client)
            clients.append(client)
        return clients

    def per_message(self) -> int | None:
        """The pid of this host's client-per-message process, if it has one (drawn last, so
        the rest of the host is the same with or without it)."""
        return 20_000 if self.rng.random() < self.spec.per_message_rate else None

    def _leaders(self) -> list[int]:
        count = min(self.spec.brokers, int(self.rng.integers(1, 4)))
        return sorted(int(b) + 1 for b in self.rng.choice(self.spec.brokers, count,
                                                          replace=False))

    def _learned(self, client: SimClient) -> int:
        """When the client has its first metadata: more than one poll after it started."""
        return client.started + self.spec.interval_ms + 100

    def _active(self, client: SimClient, role: Role, node_id: int, broker_id: int,
                opened: int, traffic: str) -> None:
        """A traffic-carrying connection; perhaps closed by its broker (CLOSE_WAIT) and
        re-opened."""
        spec, rng = self.spec, self.rng
        remote = broker_address(broker_id)
        conn = Lifetime(role, node_id, broker_id, remote, opened, active=True, traffic=traffic)
        client.lifetimes.append(conn)
        earliest, latest = opened + 60_000, spec.end_ms - 400_000
        if latest > earliest and rng.random() < spec.close_wait_rate:
            conn.close_wait = int(rng.integers(earliest, latest))
            conn.closed = conn.close_wait + int(rng.integers(2 * spec.interval_ms, 300_000))
            client.lifetimes.append(Lifetime(role, node_id, broker_id, remote,
                                             conn.closed + int(rng.integers(100, 1000)),
                                             active=True, traffic=traffic))

    def _idle(self, client: SimClient, role: Role, node_id: int, broker_id: int | None,
              remote: str, opened: int, limit: int) -> Lifetime:
        conn = Lifetime(role, node_id, broker_id, remote, opened,
                        closed=opened + limit + int(self.rng.integers(500)))
        client.lifetimes.append(conn)
        return conn

    def _java_producer(self, client: SimClient) -> None:
        spec, rng = self.spec, self.rng
        for position in range(self.k):
            self._idle(client, Role.BOOTSTRAP, bootstrap_node_id(position), None,
                       broker_address(position + 1), client.started + position, JAVA_CLIENT_IDLE_MS)
        learned = self._learned(client)
        leaders = self._leaders()
        for broker in range(1, spec.brokers + 1):
            opened = learned + broker
            if broker in leaders:
                self._active(client, Role.BROKER, broker, broker, opened, "producer")
                continue
            cycling = rng.random() < spec.churn_rate
            conn = self._idle(client, Role.BROKER, broker, broker, broker_address(broker),
                              opened, JAVA_CLIENT_IDLE_MS)
            while cycling:
                refreshes = (conn.closed - learned) // METADATA_MAX_AGE_MS + 1
                reopened = learned + refreshes * METADATA_MAX_AGE_MS + 5
                if reopened >= spec.end_ms:
                    break
                conn = self._idle(client, Role.BROKER, broker, broker, broker_address(broker),
                                  reopened, JAVA_CLIENT_IDLE_MS)
                conn.by_refresh = True

    def _java_consumer(self, client: SimClient) -> None:
        self._consumer(client, drop_bootstrap=self.spec.interval_ms + 1500)

    def _librdkafka_consumer(self, client: SimClient) -> None:
        self._consumer(client, drop_bootstrap=self.spec.interval_ms * 3 // 2)

    def _consumer(self, client: SimClient, drop_bootstrap: int) -> None:
        """Bootstrap, then coordinator and leaders; the bootstrap is dropped."""
        position = int(self.rng.integers(self.k))
        client.lifetimes.append(Lifetime(Role.BOOTSTRAP, bootstrap_node_id(position), None,
                                         broker_address(position + 1), client.started,
                                         closed=client.started + drop_bootstrap))
        learned = self._learned(client)
        assert client.group is not None, "every consumer the fleet makes is in a group"
        coordinator = coordinator_of(int(client.group.split("-")[1]), self.spec.brokers)
        self._active(client, Role.COORDINATOR, coordinator_node_id(coordinator), coordinator,
                     learned, "coordinator")
        for broker in self._leaders():
            self._active(client, Role.BROKER, broker, broker, learned + 100 + broker,
                         "consumer")

    def _librdkafka_producer(self, client: SimClient) -> None:
        spec = self.spec
        client.lifetimes.append(Lifetime(Role.BOOTSTRAP, -1, None, broker_address(1),
                                         client.started,
                                         closed=client.started + spec.interval_ms * 3 // 2))
        learned = self._learned(client)
        leaders = self._leaders()
        for broker in leaders:
            self._active(client, Role.BROKER, broker, broker, learned + broker, "producer")
        spare = [b for b in range(1, spec.brokers + 1) if b not in leaders]
        if spare and self.rng.random() < spec.churn_rate:
            broker = spare[int(self.rng.integers(len(spare)))]
            conn = self._idle(client, Role.BROKER, broker, broker, broker_address(broker),
                              learned + 50, BROKER_IDLE_MS)
            if self.rng.random() < spec.close_wait_rate:
                conn.close_wait = conn.closed
                conn.closed += int(self.rng.integers(2 * spec.interval_ms, 300_000))


class Ticks:
    """The polls of one host's session, and which of them saw each connection."""

    def __init__(self, spec: FleetSpec, host: int, lifetimes: list[Lifetime]) -> None:
        import numpy as np

        self.interval = spec.interval_ms
        self.base = spec.start_ms + (host * 7_919) % spec.interval_ms
        self.count = (spec.end_ms - self.base) // self.interval + 1
        opened = np.array([c.opened for c in lifetimes], dtype=np.int64)
        closed = np.array([c.closed for c in lifetimes], dtype=np.int64)
        self.first = np.clip(self.tick_from(opened), 0, self.count)
        self.stop = np.clip(self.tick_from(closed), 0, self.count)  # exclusive

    def tick_from(self, ms):
        """The first poll at or after ``ms``."""
        return -((self.base - ms) // self.interval)

    def at(self, tick) -> int:
        return int(self.base + tick * self.interval)

    @property
    def last_ms(self) -> int:
        return self.at(self.count - 1)


class Host:
    """One simulated host: its session's clients, connections, polls and truth."""

    def __init__(self, spec: FleetSpec, index: int) -> None:
        self.spec, self.index = spec, index
        self.name = f"sim-{index:03d}"
        self.session_id = f"sim-{spec.seed}-{index:03d}"
        model = _Model(spec, index)
        self.clients = model.clients()
        self.per_message_pid = model.per_message()
        self.lifetimes = [c for client in self.clients for c in client.lifetimes]
        self.owners = [o for o, client in enumerate(self.clients) for _ in client.lifetimes]
        for number, conn in enumerate(self.lifetimes):
            conn.key = f"sock:{100_000 + number}"
        self.ticks = Ticks(spec, index, self.lifetimes)
        self.seen = [int(f) < int(s) for f, s in zip(self.ticks.first, self.ticks.stop,
                                                      strict=True)]
        self.process_first: dict[int, int] = {}  # client index -> first tick it was seen
        for i, owner in enumerate(self.owners):
            if self.seen[i]:
                first = int(self.ticks.first[i])
                self.process_first[owner] = min(first, self.process_first.get(owner, first))


    def _closed_tick(self, i: int) -> int | None:
        """The poll that first missed connection ``i`` (its 'closed' event), if any."""
        stop = int(self.ticks.stop[i])
        return stop if self.seen[i] and stop < self.ticks.count else None

    def _close_wait_tick(self, i: int) -> int | None:
        """The first poll that saw connection ``i`` in CLOSE_WAIT, if any."""
        conn = self.lifetimes[i]
        if conn.close_wait == NEVER or not self.seen[i]:
            return None
        tick = max(int(self.ticks.tick_from(conn.close_wait)), int(self.ticks.first[i]))
        return tick if tick < int(self.ticks.stop[i]) else None

    def events(self) -> list[Event]:
        """What kmon's monitor reports between the polls: opened, near_reap, CLOSE_WAIT,
        closed (who and why), churn."""
        out = self._per_message_events()
        at = self.ticks.at
        cycles: dict[tuple[int, int | None], int] = {}  # (pid, broker) -> refresh reopens seen
        for i, conn in enumerate(self.lifetimes):
            if not self.seen[i]:
                continue
            client = self.clients[self.owners[i]]

            def event(tick: int, kind: EventKind, detail: str, conn=conn, client=client) -> None:
                out.append(Event(at(tick), kind, client.pid, conn.key, conn.role, conn.node_id,
                                 conn.remote, detail, client.name, conn.broker_id))

            first, stop = int(self.ticks.first[i]), int(self.ticks.stop[i])
            if first > self.process_first[self.owners[i]]:
                event(first, EventKind.OPENED, f"{conn.role.value} ESTABLISHED")
                if conn.by_refresh:
                    slot = (client.pid, conn.broker_id)
                    cycles[slot] = cycles.get(slot, 0) + 1
                    if cycles[slot] >= REAP_CYCLES:
                        out.append(Event(at(first), EventKind.CHURN, client.pid, None,
                                         detail="idle_reap_cycle: broker reaped idle and "
                                                "reopened", client=client.name,
                                         broker_id=conn.broker_id,
                                         churn=Churn("idle_reap_cycle", 1.0, 60)))
            limit = JAVA_CLIENT_IDLE_MS if client.java else BROKER_IDLE_MS
            if not conn.active:
                near = int(self.ticks.tick_from(conn.opened + 5 + limit * 4 // 5))
                if first < near < stop:
                    event(near, EventKind.NEAR_REAP,
                          f"idle {at(near) - conn.opened - 5} ms of {limit} ms limit")
            close_wait = self._close_wait_tick(i)
            if close_wait is not None and close_wait > first:
                event(close_wait, EventKind.CLOSE_WAIT, "ESTABLISHED -> CLOSE_WAIT")
            closed = self._closed_tick(i)
            if closed is not None:
                state = (TcpState.ESTABLISHED if close_wait is None else TcpState.CLOSE_WAIT).value
                closed_by, reason = conn.close_cause(client.java)
                idle = None if conn.active else conn.closed - conn.opened
                out.append(Event(at(closed), EventKind.CLOSED, client.pid, conn.key, conn.role,
                                 conn.node_id, conn.remote, f"{conn.role.value} after {state}",
                                 client.name, conn.broker_id,
                                 close=CloseStory(closed_by, reason, idle,
                                                  conn.closed - conn.opened)))
        return out

    def _per_message_events(self) -> list[Event]:
        """The client-per-message process: a churn event a minute, at 240 clients a minute."""
        if self.per_message_pid is None:
            return []
        return [Event(ts, EventKind.CHURN, self.per_message_pid, None,
                      detail="client_per_message: 240 client instances created a minute",
                      churn=Churn("client_per_message", 240.0, 60))
                for ts in range(self.ticks.at(60), self.ticks.last_ms, 60_000)]

    def _closes_truth(self) -> list[dict]:
        """Closed connections per (broker, closed_by, reason): what ``why_closed`` must count."""
        counts: dict[tuple, int] = {}
        for i, conn in enumerate(self.lifetimes):
            if self._closed_tick(i) is not None:
                key = (conn.broker_id, *conn.close_cause(self.clients[self.owners[i]].java))
                counts[key] = counts.get(key, 0) + 1
        return [{"host": self.name, "broker_id": b, "closed_by": by, "reason": why, "closes": n}
                for (b, by, why), n in sorted(counts.items(), key=str)]

    def truth(self) -> dict[str, list]:
        """What the analyses must find in this host's session (see docs/analysis.md)."""
        at, last_ms = self.ticks.at, self.ticks.last_ms
        truth: dict[str, list] = {"clients": [], "churn": [], "close_wait": [],
                                  "bootstrap": [], "coordinator_connections": [],
                                  "closes": self._closes_truth(), "churn_events": []}
        for event in self.events():
            if event.churn is not None:
                truth["churn_events"].append({"host": self.name, "pid": event.pid,
                                              "pattern": event.churn.pattern})
        for owner, client in enumerate(self.clients):
            who = {"session_id": self.session_id, "host": self.name, "pid": client.pid,
                   "client": client.name}
            mine = [i for i, o in enumerate(self.owners) if o == owner and self.seen[i]]
            linked = [i for i in mine if self.lifetimes[i].role is not Role.BOOTSTRAP]
            learned = min(int(self.ticks.first[i]) for i in linked)
            process_first_ms = at(self.process_first[owner])
            churn: dict[tuple[str, int | None], list[int]] = {}
            brokers: dict[int | None, list[bool]] = {}  # broker -> [traffic, all closed]
            previous_idle: dict[tuple[str, int | None], bool] = {}
            for i in mine:
                conn = self.lifetimes[i]
                last_seen = at(int(self.ticks.stop[i]) - 1)
                if conn.role is Role.BOOTSTRAP:
                    truth["bootstrap"].append({**who, "key": conn.key,
                                               "open_after_learned_ms": last_seen - at(learned)})
                    continue
                closed = conn.closed <= last_ms
                state = brokers.setdefault(conn.broker_id, [False, True])
                state[0] |= conn.active
                state[1] &= closed
                slot = (conn.role.value, conn.broker_id)
                counts = churn.setdefault(slot, [0, 0])
                idle_churned = not conn.active and conn.opened > process_first_ms and closed
                counts[0] += idle_churned
                counts[1] += conn.by_refresh and previous_idle.get(slot, False)
                previous_idle[slot] = idle_churned
                close_wait = self._close_wait_tick(i)
                if close_wait is not None:
                    stop = int(self.ticks.stop[i])
                    truth["close_wait"].append({
                        **who, "key": conn.key, "broker_id": conn.broker_id,
                        "first_ts": at(close_wait), "last_ts": at(stop - 1),
                        "close_wait_ms": at(stop - 1) - at(close_wait)})
                if conn.role is Role.COORDINATOR:
                    truth["coordinator_connections"].append({
                        **who, "key": conn.key, "broker_id": conn.broker_id,
                        "group": client.group})
            truth["churn"] += [{**who, "role": role, "broker_id": broker,
                                "idle_churned": idle, "reap_cycles": cycles}
                               for (role, broker), (idle, cycles) in sorted(churn.items())
                               if idle]
            truth["clients"].append({
                **who, "kind": client.kind, "group": client.group,
                "brokers_connected": len(brokers),
                "brokers_with_traffic": sum(t for t, _ in brokers.values()),
                "brokers_reaped": sum(not t and closed for t, closed in brokers.values())})
        return truth
