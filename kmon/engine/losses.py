"""What a process held when each of its sockets opened, from the kernel's connect and close
times: the same in every view that watched the process then, whenever each one polled.

A client that lost every broker connection re-bootstraps (KIP-899, librdkafka >= 2.10: it
connects to its bootstrap servers again, takes the metadata and closes that connection), to
an address that may be a broker's. A socket is opened after a loss (``LOST``) when, at its
connect, the process held no other connection the kernel followed or had shown at kmon's
first look, and the last of them to close before it was closed by the broker first. Where that
last one was refused at its connect (a connect that never became a connection, or one the
broker closed at once: a per-IP limit), the client may retry that very connection as well
as re-bootstrap, to the same address where a bootstrap server is a broker: ``REFUSED``,
which kmon cannot place (seen in the ground-truth harness's per-ip-limit scenario:
librdkafka's broker 1 connection refused just after its bootstrap one closed, then broker 1
again). One opened while the process held another is
``HELD``, and so is one opened once the client closed its bootstrap connection (its first,
or a re-bootstrap) to move on to the brokers, with no loss since that one opened (librdkafka
bootstraps again when its first connect to a broker it moved on to is refused). One opened
with nothing before it is ``FIRST``; one opened after the client closed its last connection
itself (a client ended or its idle connections reaped: a new client in the same process
bootstraps then, a client reconnects to a broker) is ``ALONE``. A view cannot tell for a
socket opened before its first look at the process (what the process held then is unknown to
it): it says so, where another view may know. A connect whose later steps the events never
gave (its local port unknown: they were lost while the kernel filter changed, or a duplicate
of its connect took its place) is no connection held: it would be held for ever. Nor is one
whose close the events never gave, from the first poll whose sockets lacked it on (it had
closed by then).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from kmon.engine.connection_lives import REJECTED_WITHIN_MS, KernelLife
from kmon.model import Opening

Pair = tuple[tuple[str, int], tuple[str, int]]  # (local, remote) as the kernel gives them
MAX_CLOSED = 64  # a process's latest closed connections kept
# how a connection that is a bootstrap one opens: a client's first, or a re-bootstrap
MOVED_FROM = frozenset({Opening.FIRST, Opening.LOST})


class LossHistory:
    """The connections of each watched process, as the kernel's events told them."""

    def __init__(self) -> None:
        self.lives: dict[int, list[KernelLife]] = {}  # open, then the latest closed
        # the sockets each process held at kmon's first look that no life follows
        self.before: dict[int, frozenset[Pair]] = {}
        self.first_look: dict[int, float] = {}  # when (UTC epoch ms)
        # of those, the ones gone from its sockets with no close step seen: when first missed
        self.gone: dict[int, dict[Pair, float]] = {}

    def opened(self, lives: Iterable[KernelLife]) -> None:
        """Follow newly opened ``lives``; keep each process's latest closed ones only."""
        for life in lives:
            kept = self.lives.setdefault(life.pid, [])
            kept.append(life)
            closed = [i for i, old in enumerate(kept) if old.closed_ms is not None]
            for i in reversed(closed[:-MAX_CLOSED] if len(closed) > MAX_CLOSED else []):
                del kept[i]

    def forget(self, pids: Iterable[int]) -> None:
        """Drop the processes no longer watched."""
        for pid in set(self.lives) - set(pids):
            del self.lives[pid]
        for pid in set(self.before) - set(pids):
            del self.before[pid]
            del self.first_look[pid]
            self.gone.pop(pid, None)

    def openings(self, pid: int, pairs: Iterable[Pair],
                 unfollowed: Mapping[Pair, tuple[float, str]],
                 now_ms: float, complete_ms: float = math.inf) -> dict[Pair, Opening | None]:
        """Of the process's sockets ``pairs`` (read at ``now_ms``, UTC epoch) that the kernel
        followed: what the process held when each opened (None: opened before this view's
        first look, it cannot tell; or at ``complete_ms`` or later, not yet: the events
        before then are all fed, those after may not be); ``unfollowed``: the first close
        steps of connections no life follows."""
        pairs = frozenset(pairs)
        lives = self.lives.get(pid, [])
        followed = {(life.local, life.remote) for life in lives}
        if pid not in self.before:  # its first look: what has no life was open before
            self.before[pid], self.first_look[pid] = pairs, now_ms
        # a life whose local port came after the first look was no socket from before
        before = self.before[pid] = self.before[pid] - followed
        self._missed(pid, pairs, before, lives, unfollowed, now_ms)
        found: dict[Pair, Opening | None] = {}
        for life in lives:  # oldest first: a pair's latest life is the socket read
            pair = (life.local, life.remote)
            if pair not in pairs:
                continue  # (one closed since the sockets were read is still told: alike
                # whether the events of its close came before this view's feed or after)
            found[pair] = self._opening(pid, life, unfollowed, complete_ms)
        return found

    def _missed(self, pid: int, pairs: frozenset[Pair], before: frozenset[Pair],
                lives: list[KernelLife], unfollowed: Mapping[Pair, tuple[float, str]],
                now_ms: float) -> None:
        """Note when the connections the events never saw close were first gone from the
        sockets read (``pairs``, at ``now_ms``): they closed before then."""
        gone = self.gone.setdefault(pid, {})
        for pair in before - pairs:
            if pair not in unfollowed:
                gone.setdefault(pair, now_ms)
        for pair in set(gone) - before:
            del gone[pair]
        for life in lives:
            if (life.closed_ms is None and life.gone_ms is None and life.local is not None
                    and life.opened_ms < now_ms and (life.local, life.remote) not in pairs):
                life.gone_ms = now_ms

    def _opening(self, pid: int, life: KernelLife,
                 unfollowed: Mapping[Pair, tuple[float, str]],
                 complete_ms: float) -> Opening | None:
        """What the process held when ``life`` opened, decided once every event before its
        open is fed (None: before the first look, or not yet). The kernel's rings are read
        in turn: a connect in one read late in a read may come after a close in another read
        early, which the next read gives; decided without it, the socket would be told held
        where a view reading a moment later tells it opened after a loss."""
        if life.opened_ms < self.first_look[pid]:
            return None
        if life.opening is None:
            if life.opened_ms >= complete_ms:
                return None
            life.opening = self._decide(pid, life, unfollowed, complete_ms)
        return life.opening

    def _decide(self, pid: int, life: KernelLife,
                unfollowed: Mapping[Pair, tuple[float, str]], complete_ms: float) -> Opening:
        """What the process held when ``life`` opened (the module's docstring says each)."""
        at = life.opened_ms
        # the latest close before: when, the loss it was (None: the client's own), its life
        last: tuple[float, Opening | None, KernelLife | None] | None = None
        unseen = (-math.inf, None, None)  # a close the events never gave: when, unknown
        lost_at = -math.inf  # the latest loss before it
        for other in self.lives[pid]:
            if other is life or other.opened_ms > at:
                continue
            if other.closed_ms is None and other.gone_ms is not None and other.gone_ms <= at:
                last = last or unseen
                continue
            if other.closed_ms is None or other.closed_ms > at:
                if not other.never_established and other.local is not None:
                    return Opening.HELD  # held when it opened
                continue  # (no connection; or a connect whose later steps never came)
            loss = _loss(other)
            if loss is not None:
                lost_at = max(lost_at, other.closed_ms)
            if last is None or other.closed_ms >= last[0]:
                last = (other.closed_ms, loss, other)
        gone = self.gone[pid]
        for pair in self.before[pid]:
            end = unfollowed.get(pair)
            if end is None and gone.get(pair, math.inf) <= at:
                last = last or unseen
                continue
            if end is None or end[0] > at:
                return Opening.HELD  # held when it opened (or its close was not seen yet)
            if last is None or end[0] >= last[0]:
                last = (end[0], Opening.LOST if end[1] == "broker" else None, None)
        if last is None:
            return Opening.FIRST
        if last[1] is not None:
            return last[1]
        before = last[2]
        if (before is not None and lost_at < before.opened_ms
                and self._opening(pid, before, unfollowed, complete_ms) in MOVED_FROM):
            return Opening.HELD  # the client moved on from its bootstrap connection
        # (where a connect was lost meanwhile, a client may bootstrap again instead)
        return Opening.ALONE


def _loss(life: KernelLife) -> Opening | None:
    """The loss a closed connection was: ``REFUSED`` at its connect (never established, or
    closed by the broker within REJECTED_WITHIN_MS of it: a per-IP limit, whose client
    retries that connection or re-bootstraps), ``LOST`` closed by the broker later, None
    closed by the client."""
    if life.never_established or (life.closed_by == "broker" and life.lifetime_ms is not None
                                  and life.lifetime_ms <= REJECTED_WITHIN_MS):
        return Opening.REFUSED
    return Opening.LOST if life.closed_by == "broker" else None
