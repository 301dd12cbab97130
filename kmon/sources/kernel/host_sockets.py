"""Local processes connected to a set of broker endpoints, from the host's TCP sockets.

``HostClients`` asks the kernel (sock_diag) for the sockets on the brokers' ports
only and keeps the socket inode -> PID map from search to search; ``client_pids``
is psutil's scan of every socket and every fd on the host, where sock_diag is refused.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Collection, Mapping

import psutil

from kmon.sources.kernel.proc_fds import SocketOwners
from kmon.sources.kernel.sockdiag import SockDiagReader, SockDiagUnavailable
from kmon.sources.kernel.sockets import Endpoint, normalize_ip

WILDCARD_IPS = ("0.0.0.0", "::")


def client_pids(brokers: Collection[Endpoint],
                servers_of: Collection[Endpoint] | None = None) -> set[int]:
    """PIDs holding a TCP connection whose remote endpoint is one of ``brokers``.

    A process listening on an endpoint of ``servers_of`` (``brokers`` unless
    given: pass only endpoints no client can forge) is a broker itself (or the
    embedded mock cluster, whose own client talks to its brokers) and is left
    out, as is kmon. Sockets of other users' processes are only visible to root.
    Raises PermissionError where the OS hides the host's sockets from this user.
    """
    if not brokers:
        return set()
    servers_of = brokers if servers_of is None else servers_of
    ports = {b.port for b in servers_of}
    try:
        sockets = psutil.net_connections(kind="tcp")
    except psutil.AccessDenied as err:
        raise PermissionError("no permission to list the host's TCP sockets; "
                              "run kmon as root, or name the processes with --pid") from err
    clients: set[int] = set()
    servers: set[int] = set()
    for sock in sockets:
        if sock.pid is None or not sock.laddr:
            continue
        if sock.status == psutil.CONN_LISTEN:
            local = Endpoint(normalize_ip(sock.laddr.ip), sock.laddr.port)
            if local in servers_of or (local.ip in WILDCARD_IPS and local.port in ports):
                servers.add(sock.pid)
        elif sock.raddr and Endpoint(normalize_ip(sock.raddr.ip), sock.raddr.port) in brokers:
            clients.add(sock.pid)
    return clients - servers - {os.getpid()}


class HostClients:
    """``client_pids`` from a sock_diag dump filtered by the brokers' ports, with the owners
    of the sockets found kept from search to search (kmon.sources.kernel.proc_fds.SocketOwners).
    Falls back to psutil's scan where the kernel refuses sock_diag."""

    def __init__(self) -> None:
        try:
            self._diag: SockDiagReader | None = SockDiagReader()
        except SockDiagUnavailable:
            self._diag = None
        self._owners = SocketOwners()

    def __call__(self, brokers: Collection[Endpoint]) -> set[int]:
        if self._diag is None:
            return client_pids(brokers)
        clients, servers = self.search(brokers)
        return clients - servers - {os.getpid()}

    def search(self, brokers: Collection[Endpoint], servers_of: Collection[Endpoint] | None = None,
               settled: Collection[int] = ()) -> tuple[set[int], set[int]]:
        """(PIDs connected to ``brokers``, PIDs listening on ``servers_of``, ``brokers``
        unless given), kmon included; sock_diag only (SockDiagUnavailable where the kernel
        refused it). The fd tables of ``settled`` (processes found before) are read again
        only when their fd numbers change (``SocketOwners``)."""
        if self._diag is None:
            raise SockDiagUnavailable("netlink sock_diag is not available here")
        if not brokers:
            return set(), set()
        servers_of = brokers if servers_of is None else servers_of
        server_ports = {b.port for b in servers_of}
        sockets = self._diag.host_sockets({b.port for b in brokers} | server_ports)
        clients = {s.inode for s in sockets if not s.listening and s.remote in brokers}
        servers = {s.inode for s in sockets if s.listening and (
            s.local in servers_of or (s.local.ip in WILDCARD_IPS
                                      and s.local.port in server_ports))}
        owners = self._owners.owners(clients | servers, settled=settled)
        return ({owners[i] for i in clients if i in owners},
                {owners[i] for i in servers if i in owners})

    def check(self, strangers: Mapping[int, Collection[Endpoint]],
              brokers: Collection[Endpoint]) -> set[int]:
        """Of the processes that just connected (PID -> the endpoints each connected to, from
        the kernel's events), those that connected to one of ``brokers`` and serve none of
        them (a broker's connections to its peers): clients, found though they may hold no
        connection by the time a search lists the host's sockets (a client made per message,
        which ``kmon record -b`` searched for every 10 s and never found)."""
        connected = {pid for pid, remotes in strangers.items()
                     if any(remote in brokers for remote in remotes)}
        return connected - self.serving(connected, brokers) - {os.getpid()}

    def connected(self, brokers: Collection[Endpoint]) -> dict[int, set[Endpoint]]:
        """The processes connected to ``brokers`` (PID -> those of them), kmon included;
        sock_diag only (SockDiagUnavailable where the kernel refused it)."""
        if self._diag is None:
            raise SockDiagUnavailable("netlink sock_diag is not available here")
        if not brokers:
            return {}
        sockets = [s for s in self._diag.connected_to({b.port for b in brokers})
                   if s.remote in brokers]
        owners = self._owners.owners({s.inode for s in sockets})
        found: dict[int, set[Endpoint]] = {}
        for sock in sockets:
            if sock.inode in owners:
                found.setdefault(owners[sock.inode], set()).add(sock.remote)
        return found

    def serving(self, candidates: Collection[int], servers_of: Collection[Endpoint] = (),
                settled: Collection[int] = ()) -> set[int]:
        """Of ``candidates``, those serving the others: each owns a listening socket that a
        connection of a candidate (its own included) reaches, or one on an endpoint of
        ``servers_of`` (as ``search`` tells them). The kernel's facts, not what any client
        says, whether or not the brokers are known: a broker JVM (it carries the client
        classes) or an embedded cluster is never taken for a client. Sock_diag only (none
        where the kernel refuses it). ``settled`` as ``search`` takes it."""
        if self._diag is None or not candidates:
            return set()
        listeners = self._diag.listeners()
        owners = self._owners.owners({s.inode for s in listeners}, candidates, settled)
        served: dict[Endpoint, int] = {}  # a candidate's listening endpoint -> the candidate
        for sock in listeners:
            if owners.get(sock.inode) in candidates:
                served[_plain(sock.local)] = owners[sock.inode]
        ports = {e.port for e in servers_of}
        named = {pid for local, pid in served.items() if local in servers_of
                 or (local.ip in WILDCARD_IPS and local.port in ports)}
        if not served:
            return set()
        reaching = {}  # a connection's inode -> the candidate it reaches
        for sock in self._diag.connected_to({e.port for e in served}):
            remote = _plain(sock.remote)
            server = served.get(remote) or next(
                (served[e] for ip in WILDCARD_IPS if (e := Endpoint(ip, remote.port)) in served),
                None)
            if server is not None:
                reaching[sock.inode] = server
        clients = self._owners.owners(reaching, candidates, settled)
        return named | {reaching[inode] for inode, pid in clients.items() if pid in candidates}

    def close(self) -> None:
        """Close the netlink socket."""
        if self._diag is not None:
            self._diag.close()


@functools.lru_cache(maxsize=4096)  # a search meets the few brokers' endpoints many times
def _plain(endpoint: Endpoint) -> Endpoint:
    """The endpoint with an IPv4-mapped IPv6 address written as IPv4 (a JVM's listeners)."""
    return Endpoint(normalize_ip(endpoint.ip), endpoint.port)
