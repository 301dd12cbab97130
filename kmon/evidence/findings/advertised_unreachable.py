"""``advertised_unreachable``: the bootstrap answered, and connects to an address the cluster
advertises fail (refused, timed out, unreachable).

The failed connects are the kernel's (``Look.failed_connects``); the addresses the cluster
advertises and their broker ids are those kmon knows for the process
(``ProcessView.brokers``: its own Metadata answers, kmon's query to the forwarder it
bootstraps through, the cluster given with ``-b``); the bootstrap that answered is its
bootstrap connection. An address it is connected to now is not named: a connect that
failed once and then went through is no misconfiguration.
"""

from __future__ import annotations

from kmon.evidence.findings.look import Look, Raised
from kmon.model import ConnectionLife, ProcessView, Role
from kmon.tcp_state import TcpState

REASON = "advertised_unreachable"
FIX = ("make every broker's advertised.listeners name an address its clients can reach (a "
       "name that resolves, a port open to them): the bootstrap servers only hand out those "
       "addresses. Behind a Kubernetes service or a load balancer, give each broker a route "
       "of its own (a per-broker service or port) and advertise that, or a listener per "
       "network (listener.security.protocol.map, advertised.listeners per listener)")


def find(look: Look) -> list[Raised]:
    """Every advertised address a process with an answering bootstrap failed to reach."""
    out = []
    for view in look.views:
        failed = look.failed_connects.get(view.pid)
        bootstraps = sorted({c.remote for c in view.connections
                             if c.role is Role.BOOTSTRAP and c.remote
                             and c.state == TcpState.ESTABLISHED})
        if not failed or not bootstraps:
            continue
        reached = {c.remote for c in view.connections if c.state == TcpState.ESTABLISHED}
        by_address: dict[str, list[ConnectionLife]] = {}
        for life in failed:
            if life.remote in view.brokers and life.remote not in reached:
                by_address.setdefault(life.remote, []).append(life)
        out += [_raised(view, address, lives, bootstraps)
                for address, lives in by_address.items()]
    return out


def _raised(view: ProcessView, address: str, lives: list[ConnectionLife],
            bootstraps: list[str]) -> Raised:
    broker_id = view.brokers[address]
    refused = sum(life.closed_by == "broker" for life in lives)
    how = (f"{refused} refused" if refused == len(lives) else
           f"{refused} refused, {len(lives) - refused} with no RST seen: timed out or "
           "unreachable")
    span_s = (lives[-1].closed_ms - lives[0].opened_ms) // 1000
    detail = (f"the bootstrap {', '.join(bootstraps)} answered, but broker {broker_id}'s "
              f"advertised address {address} cannot be reached: {len(lives)} "
              f"connect{'s' if len(lives) > 1 else ''} failed in {span_s} s ({how})")
    evidence = {"broker_id": broker_id, "advertised": address, "bootstrap": bootstraps,
                "failed_connects": len(lives), "refused": refused,
                "last_failed_ms": lives[-1].closed_ms}
    return Raised(view.pid, REASON, detail, evidence, FIX, key=address)
