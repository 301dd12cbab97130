"""Claims from librdkafka's broker threads: the socket a node's thread polls is that node's
connection (kmon.sources.processes.rdk_threads reads which thread polls which socket).

A broker claim at ``THREAD_CONFIDENCE`` for each such socket: the client's own handle for
it, as sure as its statistics' pairing, though it tells nothing else (no client id, no
counters). The claim is exact (``Claim.exact``): the thread's own socket, not one paired
with it by endpoint, so it outranks a guess of the wire's (below 1.0). Where kmon knows
the socket's endpoint as another broker's, the thread's word and the cluster's disagree:
no claim, the other evidence decides. Bootstrap and coordinator handles (``rdk:broker-1``)
are never named by their thread: both start with no node id.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

from kmon.evidence.claims import Claim, Evidence, Gathered, socket_key
from kmon.model import Role

THREAD_CONFIDENCE = 0.95
_EVIDENCE = {"role": "thread", "node_id": "thread"}


def thread_evidence(gathered: Gathered, earlier: Mapping[str, Sequence[Claim]]) -> Evidence:
    """A broker claim for each socket a node's librdkafka thread polls (``gathered.threads``)."""
    claims: dict[str, Claim] = {}
    if not gathered.threads:
        return Evidence(claims=claims)
    for sock in gathered.sockets:
        node = gathered.threads.get(sock.inode)
        if node is None or gathered.known.get(sock.remote, node) != node:
            continue
        claims[socket_key(sock)] = thread_claim(node)
    return Evidence(claims=claims)


@functools.lru_cache(maxsize=1024)
def thread_claim(node: int) -> Claim:
    """The claim of a socket node ``node``'s thread polls: one (immutable) claim, poll after
    poll, so a row made from it is seen unchanged at a glance."""
    return Claim("thread", Role.BROKER, node, node, THREAD_CONFIDENCE, evidence=_EVIDENCE,
                 detail=f"polled by librdkafka's thread rdk:broker{node}", exact=True)
