"""Local processes connected to a set of broker endpoints, from the host's TCP sockets."""

from __future__ import annotations

import os
from collections.abc import Collection

import psutil

from kmon.sources.resolve import normalize_ip
from kmon.sources.sockets import Endpoint

WILDCARD_IPS = ("0.0.0.0", "::")


def client_pids(brokers: Collection[Endpoint]) -> set[int]:
    """PIDs holding a TCP connection whose remote endpoint is one of ``brokers``.

    A process listening on a broker endpoint is a broker itself (or the
    embedded mock cluster, whose own client talks to its brokers) and is left
    out, as is kmon. Sockets of other users' processes are only visible to root.
    Raises PermissionError where the OS hides the host's sockets from this user.
    """
    ports = {b.port for b in brokers}
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
            if local in brokers or (local.ip in WILDCARD_IPS and local.port in ports):
                servers.add(sock.pid)
        elif sock.raddr and Endpoint(normalize_ip(sock.raddr.ip), sock.raddr.port) in brokers:
            clients.add(sock.pid)
    return clients - servers - {os.getpid()}
