"""One snapshot of one process: gather what the sources read, run the evidence producers,
resolve one row per socket."""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from itertools import chain
from pathlib import Path

from kmon.classify import BROKER_IDLE_MS
from kmon.engine.directory import MAX_LEARNED, Directory
from kmon.evidence.claims import Claim, Evidence, Gathered, Producer, socket_key
from kmon.evidence.endpoints import EndpointEvidence
from kmon.evidence.infer import CadenceEvidence
from kmon.evidence.jvm import JvmEvidence
from kmon.evidence.logical import (
    bootstrap_entries,
    bootstrap_of,
    broker_ids_by_address,
    classify_broker_entry,
    learned_brokers,
)
from kmon.evidence.resolve import RowResolver
from kmon.evidence.stats_join import stats_evidence
from kmon.evidence.threads import thread_evidence
from kmon.evidence.wire import WireEvidence
from kmon.model import ClientInstance, Connection, Opening, ProcessView
from kmon.sources import bounded
from kmon.sources.clients.librdkafka_stats import ClientStats, read_client_stats, spool_dirs
from kmon.sources.jvm.jmx import is_jvm
from kmon.sources.jvm.jvm_reading import JvmSource
from kmon.sources.kernel.sockets import Endpoint, SocketReader, TcpSocket, socket_facts
from kmon.sources.packets.host_wire import HostWire
from kmon.sources.process_wire import ProcessWire
from kmon.sources.processes.process_exit import ExitWatch
from kmon.sources.processes.process_info import (
    Process,
    ProcessDenied,
    ProcessVanished,
    describe,
    in_other_network_namespace,
    is_kernel_thread,
    loads_kafka_library,
    real_uid,
    running_since,
)
from kmon.sources.processes.rdk_threads import BrokerThreads
from kmon.sources.text import valid


class SampleError(Exception):
    """A problem with the watched process that the user must hear about."""


class ProcessGone(SampleError):
    """The process does not exist (any more)."""


class NoPermission(SampleError):
    """The process exists but its sockets cannot be read by this user."""


class NotAKafkaClient(SampleError):
    """The process shows no sign of being a Kafka client."""


@dataclass(frozen=True)
class SamplerSettings:
    """What the user chose for every process sampler (frozen); what polls learn lives in a
    ``Directory`` apart, shared by the samplers of a session."""

    broker_idle_ms: int = BROKER_IDLE_MS  # the configured limit (see ``Directory.idle_limit_ms``)
    # the user set no limit: a process's confirmed brokers' own word on theirs comes first
    idle_from_cluster: bool = True
    require_kafka: bool = True
    middlebox_idle_ms: int | None = None  # a load balancer's or NAT's idle timeout, if any
    wire: str = "auto"  # "auto": read the Kafka headers on the process's sockets where allowed
    tls: bool = True  # ... and inside its TLS writes (uprobes on OpenSSL's)
    not_kafka_hint: str = "pass --any-process"  # the command's own way past NotAKafkaClient


@dataclass(frozen=True)
class _Made:
    """What a poll's producers made of a silent process (no client statistics, no JVM, no
    forwarder, its sockets' cadence settled, the wire's claims kept: none looked a name up),
    and from what: the next poll takes them as they are while its sockets' kernel facts and
    the brokers known are the same, and its wire heard nothing."""

    sockets: tuple[tuple[object, ...], ...]  # ``socket_facts``
    inputs: tuple[object, ...]  # the brokers known, the idle limit, the groups, the fronts,
    # what the process held when each socket opened
    found: list[Evidence]
    claims: dict[str, list[Claim]]
    brokers: dict[str, int]  # ``advertised``


def _describe(process: Process) -> tuple[str, str, float]:
    try:
        return describe(process)
    except ProcessVanished as err:
        raise ProcessGone(f"no process with PID {process.pid}") from err
    except ProcessDenied as err:
        raise NoPermission(f"no permission to inspect PID {process.pid}; "
                           f"{permission_hint(process.pid)}") from err


def permission_hint(pid: int) -> str:
    """What to do when the OS keeps a process from kmon: as root, it is not root it lacks."""
    if os.geteuid() != 0:
        return "run kmon as the process's user or as root (sudo)"
    return ("even root may not read it here (another user namespace or a security module "
            f"denies it): run kmon inside its container, e.g. nsenter -t {pid} -a kmon ...")


class ProcessSampler:
    """Takes snapshots of one process. Raises SampleError subclasses for user problems.

    The gather step owns the sources of the process (its sockets, the agent's spool, a
    JVM's JMX helper and client log, its packet tap, or its part of ``host_wire``, the
    host's one capture, and kmon's own broker query); the
    producers are pure functions of what was gathered. ``close`` releases the sources.
    """

    def __init__(self, pid: int, reader: SocketReader, settings: SamplerSettings,
                 client_log: Path | None = None, host_wire: HostWire | None = None,
                 directory: Directory | None = None) -> None:
        if pid <= 0 or is_kernel_thread(pid):
            raise ProcessGone(f"no process with PID {pid}" + (
                " (it is a kernel thread)" if pid > 0 else ""))
        try:
            self.process = Process(pid)
        except ProcessVanished as err:
            raise ProcessGone(f"no process with PID {pid}") from err
        self.pid = pid
        self.name, self.cmdline, self.start_time = _describe(self.process)
        self.started = running_since(pid)  # the same process while this stays the same
        try:
            self.uid = real_uid(self.process)
            self.spool_dirs = spool_dirs(self.process)
        except ProcessVanished as err:
            raise ProcessGone(f"no process with PID {pid}") from err
        self.reader = reader
        self.settings = settings
        # what the session's polls learn, shared by its samplers (this one's own if alone)
        self.directory = directory = directory or Directory()
        self.learned: dict[Endpoint, int] = {}  # brokers this process's own evidence named
        self._kafka_checked = not settings.require_kafka
        self.standing_notices: list[str] = []
        if in_other_network_namespace(pid):
            self.standing_notices.append(
                f"PID {pid} is in another network namespace: its sockets are invisible from "
                f"here; run kmon inside it (nsenter --net=/proc/{pid}/ns/net kmon attach {pid})")
        jvm = is_jvm(pid)
        self.jvm_source = (JvmSource(pid, client_log, jmx=jvm, reader=reader)
                           if jvm or client_log else None)
        self.wire_source = (ProcessWire(host_wire, pid if settings.tls else None)
                            if settings.wire == "auto" else None)
        args = shlex.split(self.cmdline)
        self.cadence = CadenceEvidence(lambda: directory.groups, args)
        self.jvm = JvmEvidence(pid, self.start_time) if self.jvm_source else None
        self.bootstrap = bootstrap_argument(args)  # as its command line gives it, if it does
        self.endpoints = EndpointEvidence(self.bootstrap)
        self.wire = WireEvidence(self.bootstrap) if self.wire_source else None
        self.rows = RowResolver()
        self.threads = BrokerThreads(pid)  # librdkafka's broker threads and their sockets
        # what the process held when each socket opened (after a loss of its cluster, alone,
        # beside another: the kernel's events, kmon.engine.losses), where the monitor reads them
        self.losses: Callable[[int, list[TcpSocket], int],
                              dict[tuple[Endpoint, Endpoint], Opening | None]] | None = None
        self.made: _Made | None = None  # the last poll's claims, while they may be carried
        self.exit = ExitWatch(pid, self.started)  # last: a pidfd, released by close()

    def close(self) -> None:
        """Release what the sampler's sources hold (the JMX helper of a JVM, the packet
        socket, the pidfd); idempotent."""
        self.exit.close()
        if self.jvm_source is not None:
            self.jvm_source.close()
        if self.wire_source is not None:
            self.wire_source.close()

    def sample(self, now_ms: int) -> ProcessView:
        """The process as it is now."""
        if self.exit.exited():
            raise ProcessGone(f"PID {self.pid} ({self.name}) has exited")
        jvm = None
        if self.jvm_source is not None:
            started = time.monotonic()
            jvm = self.jvm_source.read()  # the first waits for JMX: the sockets' idle times
            now_ms += int((time.monotonic() - started) * 1000)  # are as of after it
        try:
            sockets = self.reader.sockets_of(self.pid)
        except ProcessVanished as err:
            raise ProcessGone(f"PID {self.pid} ({self.name}) has exited") from err
        except ProcessDenied as err:
            raise NoPermission(f"no permission to read the sockets of PID {self.pid} "
                               f"({self.name}); {permission_hint(self.pid)}") from err
        if jvm is not None and self.jvm_source is not None:  # after the sockets: kmon's JMX
            jvm = replace(jvm, helper_locals=self.jvm_source.helper_locals())  # helpers' found
        try:
            spooled = read_client_stats(self.process, self.start_time, self.uid,
                                        self.spool_dirs, now_ms)
        except ProcessVanished as err:
            raise ProcessGone(f"PID {self.pid} ({self.name}) has exited") from err
        all_stats = spooled.stats
        fresh = [c for c in all_stats if not c.is_stale(now_ms)]
        resolver = self.directory.resolver
        self._learn(learned_brokers(fresh, resolver))
        remotes = {s.remote for s in sockets}
        directory = self.directory
        told = {e for entry in bootstrap_entries(bootstrap_of(fresh, self.bootstrap))
                for e in resolver.endpoints(entry)}  # asked too: brokers by its own word
        directory.confirmed.check(e for e in chain(self.learned, told) if e in remotes)
        idle_limit_ms = (self.settings.idle_from_cluster
                         and directory.confirmed.idle_limit(remotes)) or directory.idle_limit_ms(
                             self.settings.broker_idle_ms)
        known = {**directory.confirmed.brokers, **self.learned}
        cluster = directory.cluster
        if cluster is not None:
            known.update(cluster.endpoints(resolver))
        fronts = {e: brokers for e, brokers in directory.confirmed.fronts().items()
                  if e in remotes}
        # what the producers make of the process follows from these (and its quiet wire)
        openings = (self.losses(self.pid, sockets, now_ms)
                    if self.losses and self.wire_source is not None else {})
        threads = self.threads.nodes(sockets)
        made = self.made
        inputs = (dict(known), idle_limit_ms, directory.groups, fronts, openings, threads)
        if (made is not None and not all_stats and made.inputs == inputs
                and made.sockets == socket_facts(sockets)
                and (self.wire_source is None or self.wire_source.quiet())):
            found, claims, brokers = made.found, made.claims, made.brokers  # carried forward
            closes = {}  # (none closed: its sockets are the last poll's)
        else:
            wire = None if self.wire_source is None else self.wire_source.read(sockets, now_ms)
            gathered = Gathered(now_ms=now_ms, sockets=sockets, known=known, resolver=resolver,
                                broker_idle_ms=idle_limit_ms, stats=fresh, wire=wire, jvm=jvm,
                                fronts=fronts, openings=openings,
                                threads=threads)
            found, claims = self._claims(gathered)
            brokers = advertised(gathered)
            closes = {(local.text, remote.text): close for e in found
                      for (local, remote), close in e.closes.items()}
            # what a silent process's next polls would make again, while nothing changes
            self.made = _Made(socket_facts(sockets), inputs, found, claims, brokers) if (
                not all_stats and jvm is None and not fronts and self.cadence.settled
                and (wire is None or wire.view is None or self.wire is None
                     or self.wire.steady is not None)) else None  # (the wire's kept, too)
        if self.wire_source is not None:  # peers no evidence named: kmon asks one itself
            self.wire_source.ask(peer for e in found for peer in e.ask)
        hidden = set().union(*(e.hidden for e in found))
        if hidden:
            sockets = [s for s in sockets if socket_key(s) not in hidden]
        clients = [c for e in found for c in e.clients]
        if not self._kafka_checked:  # (a carried poll's was checked: it raises once)
            self._check_kafka(bool(all_stats or clients), known, sockets)
        connections, disagreements = self.rows.resolve(sockets, claims, idle_limit_ms,
                                                       self.settings.middlebox_idle_ms)
        connections.sort(key=Connection.display_order)
        return ProcessView(
            pid=self.pid, name=self.name, cmdline=self.cmdline,
            clients=[_instance(c, now_ms) for c in all_stats] + clients,
            connections=connections,
            clients_created=spooled.clients_created,
            brokers=dict(brokers),
            wire_closes=closes,
            notices=[valid(notice) for notice in (  # they may name a path of the process's
                self.standing_notices + spooled.notices + [
                    f"client {c.instance}: statistics {c.age_ms(now_ms) // 1000}s old "
                    "(closed, or not serving its callbacks); its sockets show unpaired"
                    for c in all_stats if c.is_stale(now_ms)]
                + [n for e in found for n in e.notices] + disagreements)],
        )

    def producers(self) -> list[Producer]:
        """The evidence producers of this process, in order: each sees the claims before it."""
        producers: list[Producer] = [stats_evidence, thread_evidence]
        if self.jvm is not None:
            producers.append(self.jvm.evidence)
        if self.wire is not None:
            producers.append(self.wire.evidence)
        return [*producers, self.endpoints.evidence, self.cadence.evidence]

    def _claims(self, gathered: Gathered) -> tuple[list[Evidence], dict[str, list[Claim]]]:
        """Every producer's findings, and the claims about each socket (by key)."""
        found: list[Evidence] = []
        claims: dict[str, list[Claim]] = {}
        for producer in self.producers():
            evidence = producer(gathered, claims)
            gathered.known.update(evidence.learned)
            self._learn(evidence.learned)
            for key, claim in evidence.claims.items():
                claims.setdefault(key, []).append(claim)
            found.append(evidence)
        return found, claims

    def _learn(self, brokers: dict[Endpoint, int]) -> None:
        """Brokers this process's own evidence named: they name its sockets only (and, shared,
        help find other clients of them)."""
        if not brokers:  # most producers' word at most polls: the shared table's lock spared
            return
        bounded.put_all(self.learned, brokers, MAX_LEARNED)
        self.directory.share(brokers)

    def _check_kafka(self, has_clients: bool, known: dict[Endpoint, int],
                     sockets: list[TcpSocket]) -> None:
        if has_clients or loads_kafka_library(self.pid) or "kafka" in self.cmdline.lower() or any(
                s.remote in known for s in sockets):
            self._kafka_checked = True
            return
        raise NotAKafkaClient(
            f"PID {self.pid} ({self.name}) shows no sign of being a Kafka client: no kmon "
            "statistics, no Kafka client library loaded, no socket to a known broker "
            f"({self.settings.not_kafka_hint})")


BOOTSTRAP_FLAGS = ("-b", "--bootstrap-server", "--bootstrap-servers", "--brokers")


def advertised(gathered: Gathered) -> dict[str, int]:
    """The broker endpoints kmon knows for the process ("ip:port" -> broker id), with those
    the forwarders it talks to advertise."""
    brokers = {endpoint.text: broker_id for endpoint, broker_id in gathered.known.items()}
    for answer in gathered.fronts.values():
        for broker_id, address in answer:
            for endpoint in gathered.resolver.endpoints(address):
                brokers.setdefault(endpoint.text, broker_id)
    return brokers


def read_ahead(samplers: Iterable[ProcessSampler]) -> None:
    """Let each socket reader that samplers share read its processes' sockets together,
    before the samplers ask for them in turn (not a JVM's: its sampler reads them after its
    JMX reading, which may wait)."""
    pids_of: dict[int, tuple[SocketReader, list[int]]] = {}
    for sampler in samplers:
        if sampler.jvm_source is not None:
            continue
        pids_of.setdefault(id(sampler.reader), (sampler.reader, []))[1].append(sampler.pid)
    for reader, pids in pids_of.values():
        if len(pids) > 1:
            reader.read_ahead(pids)


def bootstrap_argument(args: list[str]) -> str:
    """The bootstrap servers a process was given on its command line, if it says so."""
    for i, arg in enumerate(args):
        if arg in BOOTSTRAP_FLAGS and i + 1 < len(args):
            return args[i + 1]
        for prefix in ("bootstrap.servers=", "metadata.broker.list="):
            if prefix in arg:
                return arg.split(prefix, 1)[1]
    return ""


def _instance(stats: ClientStats, now_ms: int) -> ClientInstance:
    group = stats.group
    coordinator = stats.brokers.get("GroupCoordinator")
    coordinator_id = None if coordinator is None else classify_broker_entry(
        "GroupCoordinator", coordinator, broker_ids_by_address(stats.brokers), "")[2]
    return ClientInstance(name=stats.instance, client_id=stats.client_id, type=stats.type,
                          config=dict(stats.config), stats_age_ms=stats.age_ms(now_ms),
                          group_id=stats.config.get("group.id"),
                          group_state=group.state if group else None,
                          group_join_state=group.join_state if group else None,
                          group_assignment_size=group.assignment_size if group else None,
                          group_coordinator_id=coordinator_id)
