"""Claims from the wire: each socket's role from the Kafka APIs it carried (confidence 1.0).

* a group API (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
  OffsetFetch, ConsumerGroupHeartbeat) or a transaction API: the **coordinator**
  connection, node id ``2147483647 - broker id`` (it may carry other APIs too);
* Produce, Fetch, ListOffsets: a **broker** connection, node id = broker id;
* only ApiVersions, Metadata, FindCoordinator or SASL, Metadata among them, first
  sent before the process had learned the cluster: **bootstrap** (its position in
  ``bootstrap.servers`` when the client's configuration gives it). When it learned it is
  what the tap saw (``WireView.cluster_learned_ms``), unless a socket the process held at
  the tap's start carried a request only a client that knows its cluster sends (Produce,
  Fetch, ListOffsets, a group or transaction API): it knew it before the tap could see, and
  no socket opened since was first used before the cluster was known;
* only those, opened after the process had lost every connection to its cluster (the
  kernel's connect and close times: ``Gathered.openings``): **bootstrap**, at 0.7: a
  client that lost every broker re-bootstraps (KIP-899, librdkafka >= 2.10) with these
  requests, to a bootstrap address that may be a broker's (a client that reconnects to a
  broker it knows shows it with its first Produce or Fetch); where kmon cannot tell a
  bootstrap from a broker connection: unsettled (role unknown, its broker named, 0.3) -
  opened before kmon's first look at the process, or while the process held no other
  connection, its last closed by the client itself or none before (a new client in the
  same process bootstraps so, once the cluster was known, and so does a client reconnect
  to a broker after its own idle close);
* only those, opened after the cluster was known, to a known broker, while the process
  held another connection or had just closed its bootstrap one: a **broker** connection
  (clients connect to brokers by node id once they know them), at 0.7;
* Metadata to an address none of the brokers its answers named advertises, whenever
  opened: **bootstrap** (a forwarder, a load balancer or a Kubernetes service in front of
  the brokers: clients reach brokers by their advertised addresses only);
* a TLS socket: the same rules, from the request headers the TLS source read inside its
  writes (kmon.sources.tls); where it cannot, a note (``tls``), and its role comes from the
  other evidence.

Broker ids come from the Metadata and FindCoordinator responses the process
received, else from the endpoints kmon already knows, else from one Metadata
request kmon sends itself to a broker the process talks Kafka to in plaintext
(the producer names those peers in ``Evidence.ask``; the sampler hands them to the
wire source, ``kmon.sources.process_wire``, whose answer a later poll reads). A pure
function of what was gathered: the tap is read by the source. Without CAP_NET_RAW
the producer makes one notice and no claims.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from kmon.classify import bootstrap_node_id, coordinator_node_id
from kmon.evidence.claims import Claim, Evidence, Gathered, socket_key
from kmon.evidence.logical import bootstrap_of, bootstrap_position
from kmon.model import Opening, Role
from kmon.sources import kafka_protocol as kp
from kmon.sources.brokers.dns import CACHE_SECONDS, Resolver
from kmon.sources.kernel.sockets import Endpoint
from kmon.sources.packets.kafka_wire import Flow, WireView, last_seen

AFTER_LEARNED = 0.7  # metadata only, once the cluster was known: a broker
AFTER_LOSS = 0.7  # ... opened once the process had lost its cluster: a re-bootstrap
UNPLACED = 0.3  # ... opened where kmon cannot tell a bootstrap from a broker: unsettled
KNEW_BEFORE = 0  # when the cluster was learned, for a process that knew it before the tap
# requests only a client that knows its cluster sends (to a partition's leader, a coordinator)
KNOWING_APIS = kp.BROKER_APIS | kp.GROUP_APIS | kp.TXN_APIS
# what leaves a socket carrying metadata only unplaced, in the words of its claim
UNPLACED_OPENINGS = {
    None: "where kmon cannot tell what the process held then (before its first look at the "
          "process, or too recently for every event before it to be read: a re-bootstrap or "
          "a broker connection)",
    Opening.FIRST: "as the process's first connection kmon saw (a new client's bootstrap or "
                   "a reconnect to the broker)",
    Opening.ALONE: "once the client had closed its last connection itself (a new client's "
                   "bootstrap or a reconnect to the broker)",
    Opening.REFUSED: "once the process's last connection was refused at its connect (a retry "
                     "of that connection or a re-bootstrap)"}


class WireEvidence:
    """The wire producer of one process: claims from what its tap read (``Gathered.wire``).

    What a socket's flow says is worked out again only when something it depends on changed
    (a request taken, the broker id of its peer, when the cluster was learned, the bootstrap
    servers, another claim naming its client): a socket whose traffic said nothing new keeps
    its claim, poll after poll."""

    def __init__(self, cmdline_bootstrap: str = "") -> None:
        self.cmdline_bootstrap = cmdline_bootstrap
        # the broker names last worked out, until when, and their endpoints
        self.endpoints_of_names: tuple[object, float, dict[Endpoint, int]] = (None, 0.0, {})
        # socket key -> (what FlowSays was worked out from, it, its claim): the sockets of the
        # last poll (a claim stays the same object while it holds)
        self.said: dict[str, tuple[tuple[object, ...], FlowSays | None, Claim | None]] = {}
        # what the last poll's claims were made from (Steady), while they may be kept
        self.steady: Steady | None = None
        self.knew_before = False  # the process knew its cluster before the tap started

    def evidence(self, gathered: Gathered, earlier: Mapping[str, Sequence[Claim]]) -> Evidence:
        """Claims for every socket whose traffic says what it is; the peers whose broker ids
        nobody named, to be asked (``Evidence.ask``). When the sockets, what is known of
        their peers and the process are the last poll's, only the sockets whose flows took a
        segment since are looked at again."""
        reading = gathered.wire
        if reading is None:
            return Evidence()
        view = reading.view
        if view is None:
            return Evidence(notices=[reading.problem] if reading.problem else [])
        notices = list(reading.notices)
        self.knew_before = self.knew_before or _knew_before(view)
        if self.knew_before and view.cluster_learned_ms != KNEW_BEFORE:
            view = replace(view, cluster_learned_ms=KNEW_BEFORE)
        learned = self._broker_endpoints(view, gathered.resolver)
        known = {**gathered.known, **learned}
        bootstrap = bootstrap_of(gathered.stats, self.cmdline_bootstrap)
        named = frozenset(key for key, claims in earlier.items() if _named_client(claims))
        openings = gathered.openings
        context = ([s.inode for s in gathered.sockets], known, view.cluster_learned_ms,
                   bool(view.brokers), bootstrap, named, openings)
        steady = self.steady
        if (view.changed is not None and steady is not None and view.polls == steady.polls + 1
                and steady.context == context and view.changed <= steady.keys.keys()):
            claims, lasting = dict(steady.claims), True  # the claims kept all last
            for pair in view.changed:
                lasting &= self._say(steady.keys[pair], view.flows[pair], pair, view, known,
                                     bootstrap, named, gathered.resolver, claims, openings)
                flow = view.flows[pair]  # a flow's APIs only grow: it may join the unknown
                if (flow.api_counts and not flow.tls and pair[1] not in known
                        and pair[1] not in steady.unknown):
                    steady.unknown = [*steady.unknown, pair[1]]
        else:
            claims, keys, lasting = {}, {}, True
            for sock in gathered.sockets:
                pair = (sock.local, sock.remote)
                keys[pair] = key = socket_key(sock)
                seen = view.flows.get(pair)
                if seen is not None:
                    lasting &= self._say(key, seen, pair, view, known, bootstrap, named,
                                         gathered.resolver, claims, openings)
            self.said = {key: self.said[key] for key in keys.values() if key in self.said}
            steady = Steady(context, keys, {}, _unknown(view, known))
        steady.claims, steady.polls = claims, view.polls
        self.steady = steady if lasting else None
        if view.drops:
            notices.append(f"the wire missed {view.drops:,} packets (kmon's ring was full)")
        return Evidence(claims=claims, learned=learned, notices=notices,
                        closes=view.closes, ask=steady.unknown)

    def _say(self, key: str, flow: Flow, pair: tuple[Endpoint, Endpoint], view: WireView,
             known: Mapping[Endpoint, int], bootstrap: str, named: frozenset[str],
             resolver: Resolver, claims: dict[str, Claim],
             openings: Mapping[tuple[Endpoint, Endpoint], Opening | None]) -> bool:
        """What the flow of the socket ``key`` (its (local, remote) ``pair``) says now, into
        ``claims`` and ``self.said``: worked out again only when something it depends on
        changed. False if it may say otherwise next time with nothing changed (it looked a
        name up)."""
        is_named, remote = key in named, pair[1]
        opening = openings.get(pair, Opening.HELD)
        inputs = (flow, flow.requests, known.get(remote), view.cluster_learned_ms,
                  bool(view.brokers), bootstrap, is_named, opening)
        memo = self.said.get(key)
        if memo is None or memo[0] != inputs or not (memo[1] is None or memo[1].lasting):
            says = flow_says(flow, remote, view, known, bootstrap, resolver, opening)
            if says is not None and says.role is not None and not is_named:
                says = says.with_client(flow.client_id)
            memo = self.said[key] = (inputs, says, None if says is None else says.claim)
        if memo[1] is None or memo[2] is None:
            claims.pop(key, None)
            return True
        claims[key] = memo[2]
        return memo[1].lasting

    def _broker_endpoints(self, view: WireView, resolver: Resolver) -> dict[Endpoint, int]:
        """The endpoints of the brokers the process's responses named: worked out again when
        the names change, or when the resolver would look them up again."""
        named, until, endpoints = self.endpoints_of_names
        now = time.monotonic()
        if named != (view.brokers, view.coordinators) or now > until:
            endpoints = _broker_endpoints(view, resolver)
            self.endpoints_of_names = ((view.brokers, view.coordinators), now + CACHE_SECONDS,
                                       endpoints)
        return endpoints


@dataclass(slots=True)
class Steady:
    """What one poll's wire claims were made from, while every claim lasts: the next poll
    with the same ``context`` keeps them, but for the sockets whose flows changed."""

    context: tuple[object, ...]  # the sockets' inodes, the brokers known, the cluster learned, ...
    keys: dict[tuple[Endpoint, Endpoint], str]  # every socket's key, by its endpoints
    claims: dict[str, Claim]  # kept as they are: each poll's are a copy
    unknown: list[Endpoint]  # the peers to ask for their broker ids
    polls: int = 0  # the tap's poll they were made at (WireView.polls)


def _knew_before(view: WireView) -> bool:
    """Whether a socket the process held when its tap started carried, since the last poll, a
    request only a client that knows its cluster sends."""
    flows = view.flows.values() if view.changed is None else (
        view.flows[pair] for pair in view.changed)
    return any(not flow.from_start and not flow.api_counts.keys().isdisjoint(KNOWING_APIS)
               for flow in flows)


def _unknown(view: WireView, known: Mapping[Endpoint, int]) -> list[Endpoint]:
    """The peers the process talks Kafka to in plaintext whose broker ids nobody named."""
    return list(dict.fromkeys(remote for (_, remote), f in view.flows.items()
                              if f.api_counts and not f.tls and remote not in known))


@dataclass(frozen=True)
class FlowSays:
    """What the traffic of a socket says: the claim's fields, and its detail's text around
    when each API was last seen."""

    role: Role | None
    node_id: int | None
    broker_id: int | None
    confidence: float
    evidence: Mapping[str, str]
    before: str = ""  # the detail: this, when each of ``seen`` was last seen, then ``after``
    after: str = ""
    seen: tuple[tuple[str, int], ...] = ()  # Flow.seen()
    facts: Mapping[str, object] = field(default_factory=dict)
    lasting: bool = True  # False: it looked a name up (which may resolve otherwise later)

    @property
    def claim(self) -> Claim:
        """The claim it makes (made again at each look: ``WireEvidence`` keeps one a flow)."""
        return Claim("wire", self.role, self.node_id, self.broker_id, self.confidence,
                     self.facts, self.evidence, self.before + last_seen(self.seen) + self.after)

    def with_client(self, client_id: str | None) -> FlowSays:
        """Naming its client by the client_id it sent (where no other evidence names one)."""
        if not client_id:
            return self
        # made field by field: dataclasses.replace costs twice as much, once a request
        return FlowSays(self.role, self.node_id, self.broker_id, self.confidence,
                        self.evidence, self.before, self.after, self.seen,
                        {"client": client_id}, self.lasting)


def flow_says(flow: Flow, remote: Endpoint, view: WireView, known: Mapping[Endpoint, int],
              bootstrap: str, resolver: Resolver,
              opening: Opening | None = Opening.HELD) -> FlowSays | None:
    """What the traffic of a socket to ``remote`` says, if it says enough (its claim's detail
    says when each API was last seen); ``opening``: what the process held when the socket
    opened (kmon.engine.losses; None: kmon cannot tell)."""
    keys = flow.api_counts.keys()
    if flow.tls and not keys:
        return FlowSays(None, None, None, 0.0, {"wire": "tls"},
                        "TLS: the Kafka headers are encrypted")
    lost = opening is Opening.LOST
    if not keys and not (lost and flow.from_start):
        return None
    broker_id = known.get(remote)
    seen = flow.seen()
    apis = " ".join(text for text, _ in seen)
    evidence = {"role": "wire", "wire": apis}
    client = (f" · client_id {flow.client_id}" if flow.client_id else "") + (
        " · over TLS" if flow.tls else "")
    if keys & (kp.GROUP_APIS | kp.TXN_APIS):
        node_id = None if broker_id is None else coordinator_node_id(broker_id)
        which = "group" if keys & kp.GROUP_APIS else "transaction"
        return FlowSays(Role.COORDINATOR, node_id, broker_id, 1.0, evidence,
                        f"{which} coordinator: ", client, seen)
    if keys & kp.BROKER_APIS:
        return FlowSays(Role.BROKER, broker_id, broker_id, 1.0, evidence, "", client, seen)
    learned_at = view.cluster_learned_ms
    if flow.from_start and kp.METADATA in keys and flow.first_request_ms is not None and (
            learned_at is None or flow.first_request_ms <= learned_at):
        return _bootstrap(remote, bootstrap, resolver, evidence,
                          "before the cluster was known: ", client, seen)
    if flow.from_start and lost:
        return _bootstrap(remote, bootstrap, resolver, evidence, "opened once the process had "
                          "lost every connection to the cluster (a re-bootstrap): ", client,
                          seen, AFTER_LOSS)
    if flow.from_start and opening in UNPLACED_OPENINGS and broker_id is not None:
        return FlowSays(Role.UNKNOWN, None, broker_id, UNPLACED, evidence,
                        f"opened to broker {broker_id} {UNPLACED_OPENINGS[opening]}: ",
                        client, seen)
    if flow.from_start and broker_id is not None and learned_at is not None:
        return FlowSays(Role.BROKER, broker_id, broker_id, AFTER_LEARNED, evidence,
                        f"opened to broker {broker_id} once the cluster was known: ", client,
                        seen)
    if kp.METADATA in keys and broker_id is None and view.brokers:
        # clients reach brokers by the addresses the brokers advertise only: Kafka to any
        # other address went through the bootstrap servers (a forwarder, a load balancer,
        # a Kubernetes service in front of the brokers)
        return _bootstrap(remote, bootstrap, resolver, evidence,
                          "to an address no broker advertises: ", client, seen)
    return FlowSays(None, None, None, 0.0, {"wire": apis}, "only ",
                    f"{client}: no role from the wire yet", seen)


def _bootstrap(remote: Endpoint, bootstrap: str, resolver: Resolver,
               evidence: Mapping[str, str], before: str, client: str,
               seen: tuple[tuple[str, int], ...], confidence: float = 1.0) -> FlowSays:
    """A bootstrap connection to ``remote``, its node id by its place in ``bootstrap``."""
    position = bootstrap_position(str(remote), bootstrap) if bootstrap else None
    looked_up = position is None and bool(bootstrap)
    if looked_up:
        position = next((i for i, entry in enumerate(bootstrap.split(","))
                         if remote in resolver.endpoints(entry.strip())), None)
    return FlowSays(Role.BOOTSTRAP, bootstrap_node_id(position or 0), None, confidence,
                    evidence, before, client, seen, lasting=not looked_up)


def _broker_endpoints(view: WireView, resolver: Resolver) -> dict[Endpoint, int]:
    """The endpoints of the brokers the process's responses named."""
    named = {(host, port): broker_id for broker_id, (host, port) in view.brokers.items()}
    named.update(view.coordinators)
    return {endpoint: broker_id for (host, port), broker_id in named.items()
            for endpoint in resolver.endpoints(f"{host}:{port}")}


def _named_client(claims: Sequence[Claim] | None) -> bool:
    return any(c.facts.get("client") for c in claims or ())
