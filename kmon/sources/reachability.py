"""Why a cluster the user named did not answer: each bootstrap address looked up and
connected to once, to tell a refused port from a name that does not resolve from a
timeout from a listener that accepts but does not speak plain Kafka."""

from __future__ import annotations

import socket
from dataclasses import dataclass

MAX_ADDRESSES = 8  # a long bootstrap list: the first few say enough


@dataclass(frozen=True)
class Reach:
    """How one bootstrap address answered: ``refused``, ``no such host``, ``timeout`` or
    ``connects`` (TCP works: the trouble is above it)."""

    address: str
    outcome: str
    detail: str = ""


def reach(bootstrap: str, timeout_s: float) -> list[Reach]:
    """One TCP connect to each of the first addresses of ``bootstrap`` (``host:port,...``,
    a ``PROTOCOL://`` prefix allowed), each given up to ``timeout_s``."""
    out = []
    for address in [a.strip() for a in bootstrap.split(",") if a.strip()][:MAX_ADDRESSES]:
        hostport = address.rpartition("://")[2]
        host, _, port = hostport.rpartition(":")
        host = host.strip("[]")
        try:
            infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError, ValueError) as err:
            out.append(Reach(address, "no such host", str(err)))
            continue
        out.append(_connect(address, infos[0], timeout_s))
    return out


def _connect(address: str, info: tuple, timeout_s: float) -> Reach:
    family, kind, proto, _, sockaddr = info
    with socket.socket(family, kind, proto) as sock:
        sock.settimeout(timeout_s)
        try:
            sock.connect(sockaddr)
        except ConnectionRefusedError:
            return Reach(address, "refused")
        except TimeoutError:
            return Reach(address, "timeout")
        except OSError as err:
            return Reach(address, "unreachable", err.strerror or str(err))
    return Reach(address, "connects")
