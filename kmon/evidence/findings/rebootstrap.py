"""``rebootstrap``: a client that lost every broker and went back to its bootstrap servers
(KIP-899; librdkafka 2.10 and later), raised while it recovers and for ``HOLD_MS`` after,
with the time it took: from the first poll that saw no broker connection to the first that
saw one again.

A bootstrap connection is one a poll named so, or one the kernel saw the process open to
one of its bootstrap servers and close itself within ``VISIT_MS`` (``Look.short_closes``):
librdkafka takes the metadata and drops its bootstrap broker a second after it connects,
often between two polls, and a poll that catches it may still take it for the broker
behind that address. The first poll with a broker after such a visit closed is the
recovery."""

from __future__ import annotations

from collections.abc import Sequence

from kmon.evidence.findings.look import Look, Raised
from kmon.evidence.findings.marks import Mark
from kmon.model import ConnectionLife, ProcessView

REASON = "rebootstrap"
HOLD_MS = 300_000  # a recovered rebootstrap is named for this long after
VISIT_MS = 1_500  # librdkafka drops a bootstrap broker about 1 s after it is up
FIX = ("find why every broker connection went at once: the brokers' listeners and "
       "advertised.listeners, a network or DNS change, a rolling restart with every broker "
       "down at once; keep bootstrap.servers listing several brokers that still exist (or a "
       "DNS name for the cluster); librdkafka's metadata.recovery.strategy and "
       "metadata.recovery.rebootstrap.trigger.ms, the Java client's metadata.recovery.strategy "
       "and metadata.recovery.rebootstrap.trigger.ms, decide when it re-bootstraps")


def find(look: Look) -> list[Raised]:
    """Each process whose latest loss of every broker sent it back to its bootstrap servers,
    while it recovers and for HOLD_MS after."""
    out = []
    for view in look.views:
        marks = list(look.marks.get(view.pid, ()))
        episode = last_episode(marks, visits(view, marks, look.short_closes.get(view.pid, ())))
        if episode is None:
            continue
        before, lost, bootstraps, back = episode
        if back is not None and look.ts_ms - back.ts_ms > HOLD_MS:
            continue
        out.append(_raised(view.pid, before, lost, bootstraps, back, look.ts_ms))
    return out


def visits(view: ProcessView, marks: Sequence[Mark],
           short_closes: Sequence[ConnectionLife]) -> list[ConnectionLife]:
    """The connections the kernel saw the process open to one of its bootstrap servers (as
    its clients were given them, or as a poll named them) and close itself within
    VISIT_MS."""
    servers = {s.strip() for c in view.clients
               for s in c.config.get("bootstrap.servers", "").split(",")}
    servers.update(*(m.bootstraps for m in marks))
    return [life for life in short_closes if life.remote in servers
            and life.closed_by == "client" and life.closed_ms - life.opened_ms <= VISIT_MS]


def last_episode(marks: Sequence[Mark], visited: Sequence[ConnectionLife] = ()
                 ) -> tuple[Mark, Mark, frozenset[str], Mark | None] | None:
    """The last time every broker went and a bootstrap connection was made before one came
    back (a later loss without one, an ordinary reconnect, leaves it named):
    (the last mark with brokers, the first without, the bootstrap servers it went back to,
    the first mark with a broker again or None while it recovers); None without one. A
    bootstrap ``visited`` after the loss puts the recovery after its close."""
    for i in range(len(marks) - 1, 0, -1):
        if marks[i].brokers or not marks[i - 1].brokers:
            continue
        after = marks[i:]
        seen = [life for life in visited
                if marks[i - 1].ts_ms <= life.opened_ms < _next_loss(marks, i)]
        closed_ms = max((life.closed_ms for life in seen), default=marks[i].ts_ms)
        back = next((m for m in after if m.brokers and m.ts_ms >= closed_ms), None)
        during = after[:after.index(back) + 1] if back is not None else after
        bootstraps = frozenset[str]().union(*(m.bootstraps for m in during),
                                            (life.remote for life in seen if life.remote))
        if bootstraps:
            return marks[i - 1], marks[i], bootstraps, back
    return None


def _next_loss(marks: Sequence[Mark], i: int) -> int:
    """When the loss after the one at ``marks[i]`` began (a broker held between them); the
    far future without one."""
    held = next((j for j in range(i + 1, len(marks)) if marks[j].brokers), len(marks))
    return next((m.ts_ms for m in marks[held + 1:] if not m.brokers), 1 << 62)


def _raised(pid: int, before: Mark, lost: Mark, bootstraps: frozenset[str],
            back: Mark | None, ts_ms: int) -> Raised:
    brokers = ", ".join(sorted(before.brokers))
    servers = ", ".join(sorted(bootstraps))
    detail = f"lost every broker ({brokers}) and went back to its bootstrap servers ({servers})"
    if back is None:
        detail += f"; no broker connection for {(ts_ms - lost.ts_ms) / 1000:.1f} s yet"
    else:
        detail += (f"; recovered in {(back.ts_ms - lost.ts_ms) / 1000:.1f} s "
                   f"(brokers {', '.join(sorted(back.brokers))})")
    evidence = {"lost_ms": lost.ts_ms, "brokers_lost": sorted(before.brokers),
                "bootstraps": sorted(bootstraps),
                "recovered_ms": None if back is None else back.ts_ms,
                "recovery_ms": None if back is None else back.ts_ms - lost.ts_ms,
                "brokers_after": [] if back is None else sorted(back.brokers)}
    return Raised(pid, REASON, detail, evidence, FIX, key=str(lost.ts_ms))
