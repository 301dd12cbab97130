"""Claims from the wire: each socket's role from the Kafka APIs it carried (confidence 1.0).

* a group API (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
  OffsetFetch, ConsumerGroupHeartbeat) or a transaction API: the **coordinator**
  connection, node id ``2147483647 - broker id`` (it may carry other APIs too);
* Produce, Fetch, ListOffsets: a **broker** connection, node id = broker id;
* only ApiVersions, Metadata, FindCoordinator or SASL, Metadata among them, first
  sent before the process had learned the cluster: **bootstrap** (its position in
  ``bootstrap.servers`` when the client's configuration gives it);
* only those, opened after the cluster was known, to a known broker: a **broker**
  connection (clients connect to brokers by node id once they know them);
* a TLS socket: a note (``tls``); its role comes from the other evidence.

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

from kmon.classify import bootstrap_node_id, coordinator_node_id
from kmon.evidence.claims import Claim, Evidence, Gathered, socket_key
from kmon.evidence.logical import bootstrap_position
from kmon.model import Role
from kmon.sources import kafka_protocol as kp
from kmon.sources.resolve import CACHE_SECONDS, Resolver
from kmon.sources.sockets import Endpoint
from kmon.sources.wire import Flow, WireView


class WireEvidence:
    """The wire producer of one process: claims from what its tap read (``Gathered.wire``)."""

    def __init__(self, cmdline_bootstrap: str = "") -> None:
        self.cmdline_bootstrap = cmdline_bootstrap
        # the broker names last worked out, until when, and their endpoints
        self.endpoints_of_names: tuple[object, float, dict[Endpoint, int]] = (None, 0.0, {})

    def evidence(self, gathered: Gathered, earlier: Mapping[str, Sequence[Claim]]) -> Evidence:
        """Claims for every socket whose traffic says what it is; the peers whose broker ids
        nobody named, to be asked (``Evidence.ask``)."""
        reading = gathered.wire
        if reading is None:
            return Evidence()
        view = reading.view
        if view is None:
            return Evidence(notices=[reading.problem] if reading.problem else [])
        learned = self._broker_endpoints(view, gathered.resolver)
        known = {**gathered.known, **learned}
        unknown = [remote for (_, remote), f in view.flows.items()
                   if f.api_counts and not f.tls and remote not in known]
        bootstrap = ",".join(c.config.get("bootstrap.servers", "") for c in gathered.stats) \
            or self.cmdline_bootstrap
        claims = {}
        for sock in gathered.sockets:
            flow = view.flows.get((sock.local, sock.remote))
            if flow is None:
                continue
            claim = flow_claim(flow, sock.remote, view, known, bootstrap, gathered.resolver,
                               gathered.now_ms)
            if claim is not None:
                if claim.role is not None and not _named_client(earlier.get(socket_key(sock))):
                    claim = _with_client(claim, flow)
                claims[socket_key(sock)] = claim
        notices = [f"the wire missed {view.drops:,} packets (kmon's ring was full)"] \
            if view.drops else []
        return Evidence(claims=claims, learned=learned, notices=notices, closes=view.closes,
                        ask=unknown)

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


def flow_claim(flow: Flow, remote: Endpoint, view: WireView, known: Mapping[Endpoint, int],
               bootstrap: str, resolver: Resolver, now_ms: int) -> Claim | None:
    """The claim the traffic of a socket to ``remote`` makes, if it says enough (its detail
    says when each API was last seen)."""
    if flow.tls:
        return Claim(source="wire", role=None, node_id=None, broker_id=None, confidence=0.0,
                     evidence={"wire": "tls"}, detail="TLS: the Kafka headers are encrypted")
    keys = flow.api_counts.keys()
    if not keys:
        return None
    broker_id = known.get(remote)
    apis, last_seen = flow.apis(now_ms)
    evidence = {"role": "wire", "wire": apis}
    detail = last_seen + (f" · client_id {flow.client_id}" if flow.client_id else "")
    if keys & (kp.GROUP_APIS | kp.TXN_APIS):
        node_id = None if broker_id is None else coordinator_node_id(broker_id)
        which = "group" if keys & kp.GROUP_APIS else "transaction"
        return Claim("wire", Role.COORDINATOR, node_id, broker_id, 1.0, evidence=evidence,
                     detail=f"{which} coordinator: {detail}")
    if keys & kp.BROKER_APIS:
        return Claim("wire", Role.BROKER, broker_id, broker_id, 1.0, evidence=evidence,
                     detail=detail)
    learned_at = view.cluster_learned_ms
    if flow.from_start and kp.METADATA in keys and flow.first_request_ms is not None and (
            learned_at is None or flow.first_request_ms <= learned_at):
        position = bootstrap_position(str(remote), bootstrap) if bootstrap else None
        if position is None and bootstrap:
            position = next((i for i, entry in enumerate(bootstrap.split(","))
                             if remote in resolver.endpoints(entry.strip())), None)
        return Claim("wire", Role.BOOTSTRAP, bootstrap_node_id(position or 0), None, 1.0,
                     evidence=evidence, detail=f"before the cluster was known: {detail}")
    if flow.from_start and broker_id is not None and learned_at is not None:
        return Claim("wire", Role.BROKER, broker_id, broker_id, 1.0, evidence=evidence,
                     detail=f"opened to broker {broker_id} once the cluster was known: {detail}")
    return Claim("wire", None, None, None, 0.0, evidence={"wire": apis},
                 detail=f"only {detail}: no role from the wire yet")


def _broker_endpoints(view: WireView, resolver: Resolver) -> dict[Endpoint, int]:
    """The endpoints of the brokers the process's responses named."""
    named = {(host, port): broker_id for broker_id, (host, port) in view.brokers.items()}
    named.update(view.coordinators)
    return {endpoint: broker_id for (host, port), broker_id in named.items()
            for endpoint in resolver.endpoints(f"{host}:{port}")}


def _named_client(claims: Sequence[Claim] | None) -> bool:
    return any(c.facts.get("client") for c in claims or ())


def _with_client(claim: Claim, flow: Flow) -> Claim:
    """The claim naming its client by the client_id it sent (no other evidence names one)."""
    if not flow.client_id:
        return claim
    return Claim(claim.source, claim.role, claim.node_id, claim.broker_id, claim.confidence,
                 facts={"client": flow.client_id}, evidence=claim.evidence, detail=claim.detail)
