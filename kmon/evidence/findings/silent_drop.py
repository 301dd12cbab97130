"""``silent_drop``: an established connection whose peer has stopped answering — what the
client sends is retransmitted or probed into nothing, no ack comes back — named while it
lasts, from the kernel's tcp_info (``Connection.tcp_stall``)."""

from __future__ import annotations

from typing import Any

from kmon.evidence.findings.look import Look, Raised
from kmon.model import Connection
from kmon.tcp_state import TcpState

REASON = "silent_drop"
# RTO expiries (or unanswered zero-window probes) in a row: the kernel's own tcp_retries1,
# from which it doubts the route; an answering peer, however slow to reply, acks at once
UNANSWERED_TRIES = 3
KEEPALIVE_PROBES = 2  # keepalive probes unanswered: a whole keepalive interval without a word
MIN_UNANSWERED_MS = 1000  # no ack for less than this is a blip, not a drop
FIX = ("a firewall, NAT gateway or load balancer between the client and the broker drops "
       "this flow (often one that forgot it after an idle timeout, e.g. Azure's 4 min): keep "
       "idle connections shorter than the middlebox's timeout (connections.max.idle.ms on "
       "the client and broker), enable TCP keepalive (socket.keepalive.enable=true, "
       "net.ipv4.tcp_keepalive_time below the timeout), and check the path to the broker")


def find(look: Look) -> list[Raised]:
    """Each established connection whose peer has not acknowledged anything for
    MIN_UNANSWERED_MS while the kernel retried UNANSWERED_TRIES times (or sent
    KEEPALIVE_PROBES keepalive probes)."""
    out = []
    for view in look.views:
        for conn in view.connections:
            stall = conn.tcp_stall
            if stall is not None and conn.state == TcpState.ESTABLISHED and unanswered(stall):
                out.append(_raised(view.pid, conn, stall))
    return out


def unanswered(stall: dict[str, Any]) -> bool:
    """Whether a socket's ``tcp_stall`` figures say its peer has gone silent."""
    tries = KEEPALIVE_PROBES if stall["timer"] == "keepalive" else UNANSWERED_TRIES
    return ((stall["last_ack_ms"] or 0) >= MIN_UNANSWERED_MS
            and max(stall["retransmits"], stall["probes"]) >= tries)


def _raised(pid: int, conn: Connection, stall: dict[str, Any]) -> Raised:
    silent_s = stall["last_ack_ms"] / 1000
    to = f"broker {conn.broker_id} ({conn.remote})" if conn.broker_id is not None else conn.remote
    if stall["timer"] == "keepalive":
        how = f"{stall['probes']} keepalive probes unanswered"
    elif stall["retransmits"]:
        how = (f"{stall['unacked']} segment(s) retransmitted {stall['retransmits']} times, "
               f"retransmission timeout now {stall['rto_ms'] / 1000:g} s")
    else:
        how = f"{stall['probes']} probes unanswered, its data stuck in the send queue"
    detail = f"nothing acknowledged by {to} for {silent_s:.1f} s: {how}"
    evidence = {"remote": conn.remote, "broker_id": conn.broker_id, "role": conn.role.value,
                "unanswered_ms": stall["last_ack_ms"], **stall}
    return Raised(pid, REASON, detail, evidence, FIX, key=conn.key)
