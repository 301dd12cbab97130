"""``fd_near_limit``: a process holding 80% or more of the soft limit on its open files,
named a leak when the count keeps rising."""

from __future__ import annotations

from kmon.evidence.findings.look import Look, Raised
from kmon.model import ProcessView

REASON = "fd_near_limit"
NEAR = 0.8  # of the soft RLIMIT_NOFILE
RISING_SAMPLES = 3  # a count that never fell over this many counts, and grew, is rising
RISING_WINDOW_MS = 120_000  # counts older than this are not looked at
FIX = ("raise the soft limit on open files (ulimit -n, systemd LimitNOFILE=, the container's "
       "nofile ulimit), and look for clients made per request and never closed: make one "
       "producer per process and reuse it, close() every consumer and admin client made")


def find(look: Look) -> list[Raised]:
    """A process whose latest open-fd count is at least NEAR of its soft limit."""
    out = []
    for view in look.views:
        samples, limit = look.fds.get(view.pid), look.fd_limits.get(view.pid)
        if not samples or not limit or samples[-1][1] < NEAR * limit:
            continue
        out.append(_raised(view, list(samples), limit, look.ts_ms))
    return out


def _raised(view: ProcessView, samples: list[tuple[int, int]], limit: int,
            ts_ms: int) -> Raised:
    count = samples[-1][1]
    kafka = len({c.fd for c in view.connections if c.fd is not None})
    growth, span_ms = rising(samples, ts_ms)
    detail = (f"{count} of {limit} file descriptors open ({100 * count // limit}% of the soft "
              f"limit), {kafka} of them Kafka sockets")
    if growth:
        detail += f"; rising, {growth} more in {span_ms // 1000} s: a descriptor leak"
    evidence = {"open_fds": count, "limit": limit, "kafka_sockets": kafka,
                "rising_by": growth, "rising_over_ms": span_ms if growth else None}
    return Raised(view.pid, REASON, detail, evidence, FIX)


def rising(samples: list[tuple[int, int]], ts_ms: int) -> tuple[int, int]:
    """(how much the count grew, over how long) when the recent counts never fell and
    grew; (0, 0) otherwise."""
    recent = [(t, c) for t, c in samples if ts_ms - t <= RISING_WINDOW_MS]
    counts = [c for _, c in recent]
    if (len(recent) < RISING_SAMPLES or counts[-1] <= counts[0]
            or any(b < a for a, b in zip(counts, counts[1:], strict=False))):
        return 0, 0
    return counts[-1] - counts[0], recent[-1][0] - recent[0][0]
