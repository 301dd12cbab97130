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
evidence names it.
"""

from __future__ import annotations

import functools
import operator
from collections import Counter
from collections.abc import Mapping, Sequence

from kmon.evidence.claims import Claim, Evidence, Gathered, socket_key
from kmon.model import Role
from kmon.sources.kernel.sockets import Endpoint

ESTABLISHED = "ESTABLISHED"
ENDPOINT_CONFIDENCE = 0.6
SHARED_CONFIDENCE = 0.3  # one of several sockets to one broker endpoint: which one is unsaid


# what of a socket its endpoint claim follows: its key's parts (inode, local and remote
# endpoints) and its state (the established sockets to its endpoint count)
_SAID_OF = operator.itemgetter(0, 2, 3, 4)


class EndpointEvidence:
    """The endpoint producer of one process: remembers, per socket, the most established
    sockets it was seen beside to its endpoint (forgotten once it is gone). Its claims follow
    the sockets' ends and states, the brokers known and the forwarders only: while those are
    the last poll's, so are its claims (and what it remembers), kept as they were."""

    def __init__(self) -> None:
        self.beside: dict[str, int] = {}  # socket key -> the most sockets to its endpoint
        # what the last claims were made from (``_SAID_OF`` of each socket, the brokers
        # known, the forwarders), and them
        self.made: tuple[list[tuple[object, ...]], dict[Endpoint, int],
                         dict[Endpoint, tuple[tuple[int, str], ...]]] | None = None
        self.claims: dict[str, Claim] = {}

    def evidence(self, gathered: Gathered, earlier: Mapping[str, Sequence[Claim]]) -> Evidence:
        """A broker claim for every socket whose remote endpoint is a known broker's (unsettled
        where it shares that endpoint), a bootstrap claim for every one to a forwarder kmon's
        own query found."""
        made = (list(map(_SAID_OF, gathered.sockets)), gathered.known, gathered.fronts)
        if made == self.made:
            return Evidence(claims=self.claims)
        self.made = (made[0], dict(gathered.known), dict(gathered.fronts))
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
                claims[key] = (broker_claim(sock.remote, broker_id) if most <= 1
                               else shared_claim(sock.remote, broker_id, most))
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
def shared_claim(remote: Endpoint, broker_id: int, sockets: int) -> Claim:
    """The claim of a socket seen among ``sockets`` to a known broker: its broker, no role."""
    return Claim(source="endpoint", role=Role.UNKNOWN, node_id=None, broker_id=broker_id,
                 confidence=SHARED_CONFIDENCE, evidence={"role": "inferred"},
                 detail=f"{remote} is broker {broker_id}, seen among {sockets} sockets to it: "
                        "nothing tells which is the broker, coordinator or bootstrap "
                        "connection")
