"""Why a cluster the user named did not answer: each bootstrap address looked up and
connected to once, to tell a refused port from a name that does not resolve from a
timeout from a listener that accepts but does not speak plain Kafka."""

from __future__ import annotations

import socket
from collections.abc import Mapping
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


PROBE_TIMEOUT_S = 2.0  # the diagnosis's own connect, after the cluster's timeout ran out


def why_unreachable(name: str, bootstrap: str, properties: Mapping[str, str],
                    timeout_s: float, told: str = "") -> str:
    """Which of refused / no such host / timeout happened at cluster ``name``'s bootstrap
    addresses, with the next step for it; ``told``, what the metadata request said."""
    reached = reach(bootstrap, min(timeout_s, PROBE_TIMEOUT_S))
    by: dict[str, list[str]] = {}
    for one in reached:
        by.setdefault(one.outcome, []).append(one.address)
    said = "; ".join(f"{', '.join(addresses)}: {outcome}" for outcome, addresses in by.items())
    protocol = properties.get("security.protocol", "PLAINTEXT")
    if "connects" in by:
        step = (f"the port accepts connections but gave no Kafka answer with "
                f"security.protocol={protocol}: if the listener is TLS or SASL, set "
                "-X security.protocol=SSL (or SASL_SSL, SASL_PLAINTEXT) with its credentials, "
                "or -F client.properties; if it is only slow, raise --cluster-timeout")
    elif "timeout" in by or "unreachable" in by:
        step = ("no answer at all: check the address and any firewall between here and "
                "the broker, or wait longer with --cluster-timeout 30s")
    elif "refused" in by:
        step = "nothing listens on that port: check the port of the broker's listener"
    else:
        step = "the name does not resolve here: check it, or give the broker's IP address"
    when = "at once" if "every broker down" in told else f"within {timeout_s:g}s"
    return f"cluster {name} did not answer {when} ({said}); {step}"
