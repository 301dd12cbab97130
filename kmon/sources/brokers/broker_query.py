"""Asking a broker for the cluster's brokers with one Metadata request of kmon's own (and,
once a cluster's broker is confirmed, for its idle limit with one DescribeConfigs request).

Used where a process's own Metadata responses have not been seen yet (a client
refreshes them every few minutes): one short plaintext connection to a broker
the process is already talking to. The peer is not trusted: the whole exchange
has one deadline (``DEADLINE_S``, however slowly the peer drips its answer) and
an answer over ``MAX_RESPONSE`` bytes is refused. ``BrokerQuery`` runs it on a
thread of its own, so the poll that starts it, and every poll after, never waits.
``ConfirmedBrokers`` uses it to confirm what processes say of brokers before it
names another process's sockets.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Collection, Iterable
from functools import partial
from itertools import islice
from typing import Any

from kmon.sources import bounded
from kmon.sources import kafka_protocol as kp
from kmon.sources.brokers.dns import Resolver, split_host_port
from kmon.sources.kafka_protocol import IDLE_LIMIT
from kmon.sources.kernel.sockets import Endpoint, normalize_ip

DEADLINE_S = 2.0  # connect, ask and read the whole answer in this long, or give up
MAX_RESPONSE = 64 * 1024  # a Metadata answer without topics: some 40 bytes a broker
CORRELATION_ID = 0x6B6D6F6E  # "kmon"
MAX_ASKED = 256  # endpoints ConfirmedBrokers remembers asking (and confirming)
METADATA_VERSION = 2  # the first whose answer carries the cluster id
MAX_ENTRIES = 1024  # entries of one answer kept (a cluster has a few dozen brokers)
MAX_PENDING = 64  # answers kept until what their entries name is known
MAX_WALKED = 256  # entries of the kept answers one check looks at
MAX_BOOTSTRAPS = 8  # of a bootstrap list, the first few are asked


def ask_brokers(broker: Endpoint, deadline_s: float = DEADLINE_S
                ) -> kp.MetadataAnswer | None:
    """broker id -> (host, port) as ``broker`` answers, with the cluster id it sends (a
    Metadata v2 answer); None when it does not (TLS, SASL,
    not a broker, an answer too large, or not whole within ``deadline_s``). Blocks up to
    ``deadline_s``: see ``BrokerQuery`` for the poll's use."""
    answer = _exchange(broker, kp.metadata_request(CORRELATION_ID, version=METADATA_VERSION),
                       deadline_s)
    return None if answer is None else kp.metadata_brokers(answer, METADATA_VERSION)


def bootstrap_brokers(bootstrap: str, deadline_s: float = DEADLINE_S
                      ) -> kp.MetadataAnswer | None:
    """``ask_brokers`` of the first of ``bootstrap``'s addresses (``host:port,...``; at most
    ``MAX_BOOTSTRAPS`` looked up) that answers with brokers, each given ``deadline_s``; None
    when none does."""
    for address in bootstrap.split(",")[:MAX_BOOTSTRAPS]:
        parts = split_host_port(address)
        if parts is None:
            continue
        host, port = parts
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            continue
        for info in infos[:1]:
            answer = ask_brokers(Endpoint(normalize_ip(str(info[4][0])), port), deadline_s)
            if answer:
                return answer
    return None


def ask_idle_limit(broker: Endpoint, deadline_s: float = DEADLINE_S, *, broker_id: int
                   ) -> int | None:
    """The ``connections.max.idle.ms`` broker ``broker_id`` at ``broker`` describes for
    itself (DescribeConfigs), under the same deadline and size limit as ``ask_brokers``;
    None when it will not say (no permission, not a real broker, no whole answer)."""
    answer = _exchange(broker, kp.describe_configs_request(CORRELATION_ID, broker_id,
                                                           [IDLE_LIMIT]), deadline_s)
    values = None if answer is None else kp.config_values(answer)
    try:
        idle_ms = int((values or {}).get(IDLE_LIMIT) or "")
    except ValueError:
        return None
    return idle_ms if 0 < idle_ms < 1 << 63 else None


def _exchange(broker: Endpoint, request: bytes, deadline_s: float) -> bytes | None:
    """The answer to ``request`` sent on one new plaintext connection to ``broker``, whole
    within ``deadline_s`` and at most ``MAX_RESPONSE`` bytes, carrying kmon's correlation
    id; else None."""
    until = time.monotonic() + deadline_s
    try:
        with socket.create_connection((broker.ip, broker.port), timeout=deadline_s) as conn:
            conn.sendall(request)
            head = _read(conn, 4, until)
            size = int.from_bytes(head, "big", signed=True)
            if not 4 <= size <= MAX_RESPONSE:
                return None
            answer = head + _read(conn, size, until)
    except OSError:  # socket.timeout included
        return None
    return answer if kp.response_correlation(answer) == CORRELATION_ID else None


def _read(conn: socket.socket, n: int, until: float) -> bytes:
    """Exactly ``n`` bytes, all of them before ``until`` (monotonic), else OSError."""
    data = bytearray()
    while len(data) < n:
        left = until - time.monotonic()
        if left <= 0:
            raise TimeoutError("the answer did not arrive in time")
        conn.settimeout(left)
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise OSError("closed early")
        data += chunk
    return bytes(data)


class BrokerQuery:
    """``ask(broker, deadline_s)`` (``ask_brokers`` unless told) on a daemon thread of its
    own, started at once; ``done`` once it has returned, ``answer`` its result (None before
    then)."""

    def __init__(self, broker: Endpoint, deadline_s: float = DEADLINE_S,
                 ask: Callable[[Endpoint, float], Any] = ask_brokers) -> None:
        self.broker = broker
        self.answer: Any = None
        self._ask = ask
        self._finished = threading.Event()
        threading.Thread(target=self._run, args=(deadline_s,), daemon=True,
                         name=f"kmon broker query {broker.text}").start()

    @property
    def done(self) -> bool:
        return self._finished.is_set()

    def _run(self, deadline_s: float) -> None:
        try:
            self.answer = self._ask(self.broker, deadline_s)
        finally:
            self._finished.set()


class ConfirmedBrokers:
    """Broker endpoints kmon has confirmed itself, to name the sockets of every process.

    What a process's own answers (its wire, its statistics) say of brokers speaks only of
    that process: any process can receive a forged Metadata answer. An endpoint is
    confirmed as broker N only when kmon's own Metadata query *to that endpoint* is answered
    with a broker list naming that very endpoint N, which nobody but whoever serves the
    endpoint can forge. ``check`` runs one query at a time, on its own thread
    (``BrokerQuery``); each endpoint is asked once (of the latest ``MAX_ASKED``). Once an
    endpoint is confirmed, its cluster's idle limit is asked of it, once per cluster (its
    answer's cluster id and brokers): the limit that reaps the sockets of the processes
    connected to it (``idle_limit``).

    The peer is not trusted with kmon's time either: of an answer only its first
    ``MAX_ENTRIES`` entries on the asked endpoint's port are kept, at most ``MAX_PENDING``
    answers wait for their names to be looked up, and one ``check`` looks at no more than
    ``MAX_WALKED`` of their entries, however many and large the answers.
    """

    def __init__(self, resolver: Resolver) -> None:
        self.resolver = resolver
        self._brokers: dict[Endpoint, int] = {}  # confirmed endpoint -> broker id
        # asked endpoint -> its answer's entries that may still name it: (id, "host:port")
        self._pending: dict[Endpoint, list[tuple[int, str]]] = {}
        self._asked: dict[Endpoint, None] = {}
        # asked endpoint -> the cluster its answer named: (cluster id, its first MAX_ENTRIES
        # brokers' host:port, sorted)
        self._clusters: dict[Endpoint, tuple[str | None, tuple[str, ...]]] = {}
        # asked endpoint -> the brokers its answer advertised: its first MAX_ENTRIES, as
        # (id, "host:port")
        self._answered: dict[Endpoint, tuple[tuple[int, str], ...]] = {}
        self._query: BrokerQuery | None = None
        # a cluster (as in _clusters) -> the idle limit its brokers describe (None: unsaid)
        self._idle: dict[tuple[str | None, tuple[str, ...]], int | None] = {}
        # clusters whose limit is to be asked -> (a confirmed endpoint of it, its broker id)
        self._idle_due: dict[tuple[str | None, tuple[str, ...]], tuple[Endpoint, int]] = {}
        # the cluster whose idle limit the query under way asks (None: a Metadata query)
        self._asking: tuple[str | None, tuple[str, ...]] | None = None
        self._lock = threading.Lock()
        self.walked = 0  # answer entries the latest check looked at

    @property
    def brokers(self) -> dict[Endpoint, int]:
        """A copy of the confirmed endpoints and their broker ids."""
        with self._lock:
            return dict(self._brokers)

    def clusters(self) -> dict[Endpoint, tuple[str | None, tuple[str, ...]]]:
        """Each confirmed endpoint's cluster as kmon's own query to it answered: the
        cluster id it sent (None if none) and its brokers' host:port, sorted (the same
        from every broker of one cluster)."""
        with self._lock:
            return {endpoint: self._clusters[endpoint] for endpoint in self._brokers
                    if endpoint in self._clusters}

    def fronts(self) -> dict[Endpoint, tuple[tuple[int, str], ...]]:
        """The endpoints kmon's own query found answering for brokers none of which is
        theirs (a forwarder, a load balancer, a Kubernetes service in front of the
        brokers), each with the brokers its answer advertised, as (id, "host:port")."""
        with self._lock:
            return {endpoint: brokers for endpoint, brokers in self._answered.items()
                    if endpoint not in self._brokers and endpoint not in self._pending}

    def idle_limit(self, endpoints: Collection[Endpoint]) -> int | None:
        """The least idle limit the clusters of the confirmed ``endpoints`` describe, if any
        has said one (a walk of the confirmed endpoints, at most ``MAX_ASKED``)."""
        with self._lock:
            limits = [limit for e in self._brokers if e in endpoints
                      if (cluster := self._clusters.get(e)) is not None
                      and (limit := self._idle.get(cluster)) is not None]
        return min(limits, default=None)

    def unanswered(self, endpoints: Iterable[Endpoint]) -> bool:
        """True while a query is under way or due (a cluster's idle limit), or one of
        ``endpoints`` has not been asked."""
        with self._lock:
            return (self._query is not None or bool(self._idle_due)
                    or any(e not in self._asked for e in endpoints))

    def check(self, endpoints: Iterable[Endpoint]) -> None:
        """Take the answer of the query under way, if it has come, look at some of the
        answers' entries, and ask the first of ``endpoints`` (brokers a watched process
        talks to) not asked yet when no query runs."""
        with self._lock:
            query = self._query
            if query is not None and query.done:
                self._query = None
                if self._asking is not None:
                    bounded.put(self._idle, self._asking, query.answer, MAX_ASKED)
                    self._asking = None
                elif query.answer:
                    bounded.put(self._pending, query.broker,
                                _candidates(query.broker, query.answer), MAX_PENDING)
                    bounded.put(self._clusters, query.broker, _cluster(query.answer),
                                MAX_ASKED)
                    bounded.put(self._answered, query.broker, tuple(
                        (broker_id, f"{host}:{port}") for broker_id, (host, port)
                        in islice(query.answer.items(), MAX_ENTRIES)), MAX_ASKED)
            self.walked = self._walk()
            if self._query is None:
                endpoint = next((e for e in endpoints if e not in self._asked), None)
                if endpoint is not None:
                    bounded.put(self._asked, endpoint, None, MAX_ASKED)
                    self._query = BrokerQuery(endpoint)
                elif self._idle_due:
                    self._asking = next(iter(self._idle_due))
                    endpoint, broker_id = self._idle_due.pop(self._asking)
                    self._query = BrokerQuery(endpoint,
                                              ask=partial(ask_idle_limit, broker_id=broker_id))

    def _walk(self) -> int:
        """Look at up to ``MAX_WALKED`` pending entries, answer by answer in turn (lock
        held): an entry naming its asked endpoint confirms it, one whose name is known to
        stand for other endpoints is dropped, one still being looked up waits for a later
        check. The entries looked at."""
        walked = 0
        for endpoint in list(self._pending):
            if walked >= MAX_WALKED:
                break
            entries = self._pending.pop(endpoint)
            waiting: list[tuple[int, str]] = []
            while entries and walked < MAX_WALKED:
                broker_id, address = entries.pop()
                walked += 1
                named = self.resolver.known(address)
                if named is None:
                    waiting.append((broker_id, address))
                elif endpoint in named:
                    bounded.put(self._brokers, endpoint, broker_id, MAX_ASKED)
                    self._limit_due(endpoint, broker_id)
                    entries = waiting = []
            if entries or waiting:  # last in turn: the next check starts at another answer
                self._pending[endpoint] = waiting + entries
        return walked

    def _limit_due(self, endpoint: Endpoint, broker_id: int) -> None:
        """Ask the idle limit of ``endpoint``'s cluster, unless it was (lock held)."""
        cluster = self._clusters.get(endpoint)
        if cluster is not None and cluster not in self._idle:
            bounded.put(self._idle_due, cluster, (endpoint, broker_id), MAX_ASKED)
            bounded.put(self._idle, cluster, None, MAX_ASKED)  # asked: never again


def _cluster(answer: kp.MetadataAnswer) -> tuple[str | None, tuple[str, ...]]:
    """The cluster an answer names: its cluster id, and its first ``MAX_ENTRIES`` brokers'
    host:port, sorted (the same from every broker of one cluster)."""
    return answer.cluster_id, tuple(sorted({f"{host}:{port}" for host, port
                                            in islice(answer.values(), MAX_ENTRIES)}))


def _candidates(endpoint: Endpoint, answer: dict[int, tuple[str, int]]
                ) -> list[tuple[int, str]]:
    """The entries of ``answer`` (its first ``MAX_ENTRIES``) that may name ``endpoint``:
    those on its port, as (broker id, "host:port")."""
    return [(broker_id, f"{host}:{port}")
            for broker_id, (host, port) in islice(answer.items(), MAX_ENTRIES)
            if port == endpoint.port]
