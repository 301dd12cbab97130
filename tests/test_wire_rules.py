"""The wire's rules, from what a socket carried to its claim, and how the claim meets the
other evidence: the cases the real clients of ``test_wire.py`` do not produce on demand
(transactions, the new consumer protocol, a bootstrap socket's position, a disagreement).
Flows are built by hand here; everything else is the product's own code."""

from __future__ import annotations

import time
from collections import Counter

from kmon.classify import MAX_INT
from kmon.evidence.claims import Claim, Gathered
from kmon.evidence.resolve import resolve_one
from kmon.evidence.threads import thread_evidence
from kmon.evidence.wire import flow_says
from kmon.model import Connection, Opening, Role
from kmon.sources import kafka_protocol as kp
from kmon.sources.brokers.dns import Resolver
from kmon.sources.kernel.sockets import Endpoint, TcpSocket
from kmon.sources.packets.kafka_wire import Flow, WireView

BROKER = Endpoint("127.0.0.1", 9093)
LOCAL = Endpoint("127.0.0.1", 5000)
KNOWN = {BROKER: 2}
NOW_MS = 10_000


def flow(*apis: int, first_request_ms: int = 1_000, from_start: bool = True) -> Flow:
    return Flow(0, api_counts=Counter(apis), api_last_ms={api: 9_000 for api in apis},
                first_request_ms=first_request_ms, from_start=from_start)


def claim_of(carried: Flow, learned_ms: int | None = 5_000, bootstrap: str = "",
             known: dict | None = None) -> Claim | None:
    view = WireView({}, {}, {}, learned_ms, 0, {})
    says = flow_says(carried, BROKER, view, KNOWN if known is None else known, bootstrap,
                     Resolver())
    return None if says is None else says.claim


def test_transaction_apis_make_the_transaction_coordinator():
    claim = claim_of(flow(24, 26))  # AddPartitionsToTxn, EndTxn
    assert (claim.role, claim.node_id, claim.broker_id) == (Role.COORDINATOR, MAX_INT - 2, 2)
    assert claim.detail.startswith("transaction coordinator: ")


def test_consumer_group_heartbeat_makes_the_group_coordinator():
    claim = claim_of(flow(68))
    assert (claim.role, claim.node_id, claim.confidence) == (Role.COORDINATOR, MAX_INT - 2, 1.0)
    assert claim.evidence == {"role": "wire", "wire": "ConsumerGroupHeartbeat×1"}


def test_a_coordinator_socket_lists_every_key_it_carried():
    claim = claim_of(flow(kp.API_VERSIONS, 12, 12, 2))  # KafkaJS: Heartbeat and ListOffsets
    assert claim.role is Role.COORDINATOR
    assert claim.evidence["wire"] == "Heartbeat×2 ApiVersions×1 ListOffsets×1"
    assert f"Heartbeat×2 (last {time.strftime('%H:%M:%S', time.localtime(9))}.0)" in claim.detail


def test_a_bootstrap_socket_gets_its_position_in_bootstrap_servers():
    carried = flow(kp.API_VERSIONS, kp.METADATA, first_request_ms=1_000)
    claim = claim_of(carried, learned_ms=2_000, bootstrap="127.0.0.1:9092,127.0.0.1:9093",
                     known={})
    assert (claim.role, claim.node_id, claim.broker_id) == (Role.BOOTSTRAP, -2, None)


def test_control_apis_after_the_cluster_was_known_make_a_broker_socket_or_a_note():
    carried = flow(kp.METADATA, first_request_ms=8_000)
    assert claim_of(carried).role is Role.BROKER  # to a known broker, once known
    assert claim_of(flow(kp.METADATA, from_start=False)).role is None  # open before attach


def test_the_wire_decides_where_other_evidence_disagrees_and_says_so():
    row = Connection("sock:1", Role.UNKNOWN, None, None, None, "127.0.0.1:5000", str(BROKER),
                     "ESTABLISHED", fd=7)
    inferred = Claim("inferred", Role.BROKER, 2, 2, 0.7, facts={"client": "rdkafka#consumer-1"})
    wire = claim_of(flow(12))
    resolved, notice = resolve_one(row, [inferred, wire])
    assert (resolved.role, resolved.node_id, resolved.confidence) == (
        Role.COORDINATOR, MAX_INT - 2, 1.0)
    assert resolved.client == "rdkafka#consumer-1"  # the other facts stay
    assert notice == (f"{BROKER} (fd 7): the wire says coordinator {MAX_INT - 2}, inferred "
                      "said broker 2; the wire decides")
    assert [c["source"] for c in resolved.claims] == ["inferred", "wire"]


def test_metadata_to_an_address_no_broker_advertises_is_a_bootstrap_whenever_opened():
    forwarder = Endpoint("127.0.0.1", 9000)  # a forwarder, a load balancer in front of broker 2
    view = WireView({}, {2: ("127.0.0.1", 9093)}, {}, 5_000, 0, {})
    for carried in (flow(kp.METADATA, from_start=False), flow(kp.METADATA, first_request_ms=8_000)):
        says = flow_says(carried, forwarder, view, KNOWN, "127.0.0.1:9000", Resolver())
        assert (says.role, says.node_id, says.confidence) == (Role.BOOTSTRAP, -1, 1.0)
        assert says.claim.detail.startswith("to an address no broker advertises: ")
    # while no answer named the brokers, an address kmon does not know tells nothing
    unnamed = WireView({}, {}, {}, None, 0, {})
    assert flow_says(flow(kp.METADATA, from_start=False), forwarder, unnamed, KNOWN, "",
                     Resolver()).role is None


def test_metadata_only_after_a_loss_is_a_bootstrap_not_the_broker_behind_its_address():
    """A socket the kernel saw opened once the process had lost every connection to its
    cluster (``Gathered.openings``), carrying only ApiVersions and Metadata: librdkafka's
    re-bootstrap (KIP-899), to a bootstrap address that is broker 2's, is named bootstrap
    (unsure: a client reconnecting to a broker shows it with its first Produce); without
    the loss it stays broker 2; where kmon cannot tell (opened before its first look at the
    process), it is unsettled."""
    carried = flow(kp.API_VERSIONS, kp.METADATA, first_request_ms=8_000)
    view = WireView({}, {}, {}, 5_000, 0, {})
    lost = flow_says(carried, BROKER, view, KNOWN, "127.0.0.1:9093", Resolver(),
                     Opening.LOST).claim
    assert (lost.role, lost.node_id, lost.confidence) == (Role.BOOTSTRAP, -1, 0.7)
    kept = flow_says(carried, BROKER, view, KNOWN, "127.0.0.1:9093", Resolver()).claim
    assert (kept.role, kept.node_id, kept.confidence) == (Role.BROKER, 2, 0.7)
    unplaced = flow_says(carried, BROKER, view, KNOWN, "", Resolver(), None).claim
    assert (unplaced.role, unplaced.broker_id, unplaced.confidence) == (Role.UNKNOWN, 2, 0.3)
    produced = flow(kp.API_VERSIONS, kp.METADATA, 0, first_request_ms=8_000)  # Produce
    assert flow_says(produced, BROKER, view, KNOWN, "", Resolver(), Opening.LOST).claim.role is (
        Role.BROKER)


def test_metadata_only_opened_alone_after_the_client_s_own_close_is_unsettled():
    """A process that makes a client per message (the ground-truth harness's per-ip-limit
    scenario): each new client's bootstrap connection opens once the process had closed
    its last connection itself, the cluster long known from the clients before, to the
    bootstrap address that is broker 2's. Only ApiVersions on it so far: a new client's
    bootstrap or a reconnect to broker 2, which kmon cannot tell, so unsettled (it was
    told broker 2 at 0.7). So is one opened once the process's last connection was refused
    at its connect (a retry of that connection or a re-bootstrap: it was told bootstrap at
    0.7, and was broker 1's retry). Opened beside another connection it stays broker 2."""
    carried = flow(kp.API_VERSIONS, first_request_ms=8_000)
    view = WireView({}, {}, {}, 5_000, 0, {})
    for opening in (Opening.ALONE, Opening.FIRST, Opening.REFUSED):
        told = flow_says(carried, BROKER, view, KNOWN, "127.0.0.1:9093", Resolver(),
                         opening).claim
        assert (told.role, told.node_id, told.broker_id, told.confidence) == (
            Role.UNKNOWN, None, 2, 0.3)
    held = flow_says(carried, BROKER, view, KNOWN, "127.0.0.1:9093", Resolver(),
                     Opening.HELD).claim
    assert (held.role, held.node_id, held.confidence) == (Role.BROKER, 2, 0.7)


def test_a_socket_the_wire_leaves_unsettled_keeps_the_client_s_own_role():
    """Seen in the truth harness (client-idle-reap): a librdkafka producer's reconnect to
    broker 2 after its own idle close carried only ApiVersions; the wire cannot tell a new
    client's bootstrap from that reconnect (unsettled), but the client's broker thread and its
    statistics can: the row keeps their role, as a one-shot view with no wire gives it. Only
    a known endpoint's guess gives way to the wire's doubt."""
    row = Connection("sock:1", Role.UNKNOWN, None, None, None, "127.0.0.1:5000", str(BROKER),
                     "ESTABLISHED", fd=7)
    unsure = flow_says(flow(kp.API_VERSIONS, first_request_ms=8_000), BROKER,
                       WireView({}, {2: ("127.0.0.1", 9093)}, {}, 5_000, 0, {}), KNOWN,
                       "127.0.0.1:9093", Resolver(), Opening.ALONE).claim
    assert unsure.role is Role.UNKNOWN
    endpoint = Claim("endpoint", Role.BROKER, 2, 2, 0.6)
    thread = Claim("thread", Role.BROKER, 2, 2, 0.95, evidence={"role": "thread"})
    kept, notice = resolve_one(row, [thread, unsure, endpoint])
    assert (kept.role, kept.node_id, kept.confidence, notice) == (Role.BROKER, 2, 0.95, None)
    assert kept.evidence["wire"] == "ApiVersions×1" and kept.evidence["role"] == "thread"
    doubted, _ = resolve_one(row, [unsure, endpoint])
    assert (doubted.role, doubted.broker_id, doubted.confidence) == (Role.UNKNOWN, 2, 0.3)


def test_the_client_s_own_broker_thread_outranks_the_wire_s_re_bootstrap_guess():
    """Seen in the truth harness (node-killed, an instrumented producer): once the killed
    node's sockets were gone, the producer reconnected to broker 2 (whose address is a
    bootstrap server) with ApiVersions only so far. The wire guesses a re-bootstrap (0.7);
    librdkafka's thread ``rdk:broker2`` polls the socket: it is broker 2's handle's, and the
    thread decides. Statistics paired with it by endpoint alone do not: librdkafka's real
    re-bootstrap socket to that address is paired with broker 2's statistics as well."""
    row = Connection("sock:1", Role.UNKNOWN, None, None, None, "127.0.0.1:5000", str(BROKER),
                     "ESTABLISHED", fd=7)
    view = WireView({}, {}, {}, 5_000, 0, {})
    guess = flow_says(flow(kp.API_VERSIONS, first_request_ms=8_000), BROKER, view, KNOWN,
                      "127.0.0.1:9093", Resolver(), Opening.LOST).claim
    assert (guess.role, guess.confidence) == (Role.BOOTSTRAP, 0.7)
    stats = Claim("stats", Role.BROKER, 2, 2, 1.0, facts={"client": "rdkafka#producer-1"},
                  evidence={"role": "stats", "pairing": "endpoint"})
    thread = thread_evidence(Gathered(0, [TcpSocket(11, 7, LOCAL, BROKER, "ESTABLISHED")], {},
                                      Resolver(), 0,
                                      threads={11: 2}), {}).claims["sock:11"]
    kept, notice = resolve_one(row, [stats, thread, guess])
    assert (kept.role, kept.node_id, kept.confidence) == (Role.BROKER, 2, 0.95)
    assert kept.client == "rdkafka#producer-1" and kept.evidence["role"] == "thread"
    assert kept.evidence["wire"] == "ApiVersions×1"
    assert notice == (f"{BROKER} (fd 7): the wire guessed bootstrap -1, thread says broker 2; "
                      "the thread decides")
    paired, _ = resolve_one(row, [stats, guess])  # the statistics' pairing is no handle
    assert (paired.role, paired.node_id) == (Role.BOOTSTRAP, -1)
    sure = claim_of(flow(12))  # a heartbeat: the wire at 1.0 still decides
    assert resolve_one(row, [thread, sure])[0].role is Role.COORDINATOR
