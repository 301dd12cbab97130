"""Claims from known broker endpoints: a socket to a broker kmon knows reaches that broker;
one to an endpoint that answers Metadata for brokers other than itself (a forwarder, a
load balancer, a Kubernetes service in front of them) is a bootstrap connection.

The weakest claims (confidence 0.6): the socket may still be a coordinator or
bootstrap connection to that broker, or carry more than bootstrap requests through a
forwarder, which other evidence can tell. Where the process holds, or held while kmon
watched, another established socket to a socket's broker endpoint, the endpoint cannot say
which is which (a client that keeps a bootstrap, a coordinator or a connection per request
class beside its broker connection; the one left once the others closed is no more told
apart): the socket is unsettled (role unknown, its broker named, confidence 0.3) until other
evidence names it. So is one the process opened holding no other connection (its first as
kmon saw it, once the client had closed its last itself, once it had lost them all, or before
kmon's first look: ``Gathered.openings``) to an endpoint that may be one of its bootstrap
servers (it is one, or kmon does not know them): a new client's bootstrap connection and a
reconnect to the broker look alike there, till the wire or the client's own view tells.
"""

from __future__ import annotations

import functools
import operator
from collections import Counter
from collections.abc import Mapping, Sequence

from kmon.evidence.claims import Claim, Evidence, Gathered, socket_key
from kmon.evidence.logical import bootstrap_entries, bootstrap_of
from kmon.evidence.wire import UNPLACED_OPENINGS
from kmon.model import Opening, Role
from kmon.sources.kernel.sockets import Endpoint

ESTABLISHED = "ESTABLISHED"
ENDPOINT_CONFIDENCE = 0.6
SHARED_CONFIDENCE = 0.3  # one of several sockets to one broker endpoint: which one is unsaid
# what the process held when a socket opened that leaves its endpoint unable to tell a
# bootstrap connection from a broker one, in the words of its claim
UNPLACED = {**UNPLACED_OPENINGS, Opening.LOST: "once the process had lost every connection "
            "to the cluster (a re-bootstrap or a reconnect to the broker)"}


# what of a socket its endpoint claim follows: its key's parts (inode, local and remote
# endpoints) and its state (the established sockets to its endpoint count)
_SAID_OF = operator.itemgetter(0, 2, 3, 4)


class EndpointEvidence:
    """The endpoint producer of one process: remembers, per socket, the most established
    sockets it was seen beside to its endpoint (forgotten once it is gone). Its claims follow
    the sockets' ends and states, the brokers known and the forwarders only: while those are
    the last poll's, so are its claims (and what it remembers), kept as they were."""

    def __init__(self, cmdline_bootstrap: str = "") -> None:
        self.cmdline_bootstrap = cmdline_bootstrap  # as the process's command line gives it
        self.beside: dict[str, int] = {}  # socket key -> the most sockets to its endpoint
        # what the last claims were made from (``_SAID_OF`` of each socket, the brokers
        # known, the forwarders, what the process held as each opened, its bootstrap
        # servers), and them
        self.made: tuple[object, ...] | None = None
        self.claims: dict[str, Claim] = {}

    def evidence(self, gathered: Gathered, earlier: Mapping[str, Sequence[Claim]]) -> Evidence:
        """A broker claim for every socket whose remote endpoint is a known broker's (unsettled
        where it shares that endpoint), a bootstrap claim for every one to a forwarder kmon's
        own query found."""
        bootstrap = bootstrap_of(gathered.stats, self.cmdline_bootstrap)
        made = (list(map(_SAID_OF, gathered.sockets)), gathered.known, gathered.fronts,
                gathered.openings, bootstrap)
        if made == self.made:
            return Evidence(claims=self.claims)
        self.made = (made[0], dict(gathered.known), dict(gathered.fronts),
                     dict(gathered.openings), bootstrap)
        alone = any(o in UNPLACED for o in gathered.openings.values())
        # the endpoints of its bootstrap servers (None: kmon does not know them)
        servers = _endpoints(bootstrap, gathered) if alone and bootstrap else None
        claims: dict[str, Claim] = {}
        held = Counter(sock.remote for sock in gathered.sockets if sock.state == ESTABLISHED)
        beside, before = {}, self.beside
        for sock in gathered.sockets:
            key = socket_key(sock)
            broker_id = gathered.known.get(sock.remote)
            if broker_id is None and sock.remote in gathered.fronts:
                advertised = ", ".join(address for _, address in gathered.fronts[sock.remote])
                claims[key] = Claim(
                    source="endpoint", role=Role.BOOTSTRAP, node_id=None, broker_id=None,
                    confidence=ENDPOINT_CONFIDENCE, evidence={"role": "inferred"},
                    detail=f"{sock.remote} answers Metadata for brokers advertised elsewhere "
                           f"({advertised}): a forwarder or load balancer to bootstrap through")
            elif broker_id is not None:
                most = beside[key] = max(before.get(key, 0), held[sock.remote]
                                         + (sock.state != ESTABLISHED))
                opening = gathered.openings.get((sock.local, sock.remote), Opening.HELD)
                if most > 1:
                    claims[key] = shared_claim(sock.remote, broker_id, most)
                elif opening in UNPLACED and (servers is None or sock.remote in servers):
                    claims[key] = unplaced_claim(sock.remote, broker_id, opening)
                else:
                    claims[key] = broker_claim(sock.remote, broker_id)
        self.beside, self.claims = beside, claims
        return Evidence(claims=claims)


@functools.lru_cache(maxsize=4096)
def broker_claim(remote: Endpoint, broker_id: int) -> Claim:
    """The claim of a socket to a known broker: one (immutable) claim shared by every
    socket to it, poll after poll, so a row made from it is seen unchanged at a glance."""
    return Claim(source="endpoint", role=Role.BROKER, node_id=broker_id, broker_id=broker_id,
                 confidence=ENDPOINT_CONFIDENCE, evidence={"role": "inferred"},
                 detail=f"{remote} is broker {broker_id}")


@functools.lru_cache(maxsize=4096)
def unplaced_claim(remote: Endpoint, broker_id: int, opening: Opening | None) -> Claim:
    """The claim of a socket the process opened holding no other connection (``opening``) to
    a known broker that may be one of its bootstrap servers: its broker, no role."""
    return Claim(source="endpoint", role=Role.UNKNOWN, node_id=None, broker_id=broker_id,
                 confidence=SHARED_CONFIDENCE, evidence={"role": "inferred"},
                 detail=f"{remote} is broker {broker_id}, opened {UNPLACED[opening]}: a "
                        "bootstrap or a broker connection")


def _endpoints(bootstrap: str, gathered: Gathered) -> frozenset[Endpoint]:
    """The endpoints of the bootstrap servers ``bootstrap`` names."""
    return frozenset(endpoint for entry in bootstrap_entries(bootstrap)
                     for endpoint in gathered.resolver.endpoints(entry))


@functools.lru_cache(maxsize=4096)
def shared_claim(remote: Endpoint, broker_id: int, sockets: int) -> Claim:
    """The claim of a socket seen among ``sockets`` to a known broker: its broker, no role."""
    return Claim(source="endpoint", role=Role.UNKNOWN, node_id=None, broker_id=broker_id,
                 confidence=SHARED_CONFIDENCE, evidence={"role": "inferred"},
                 detail=f"{remote} is broker {broker_id}, seen among {sockets} sockets to it: "
                        "nothing tells which is the broker, coordinator or bootstrap "
                        "connection")
