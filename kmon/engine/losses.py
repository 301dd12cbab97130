"""Which sockets a process opened after it had lost every connection to its cluster, from the
kernel's connect and close times: the same in every view that watched the process then,
whenever each one polled.

A client that lost every broker connection re-bootstraps (KIP-899, librdkafka >= 2.10: it
connects to its bootstrap servers again, takes the metadata and closes that connection), to
an address that may be a broker's. A socket is opened after a loss when, at its connect, the
process held no other connection the kernel followed or had shown at kmon's first look, and
the last of them to close before it was closed by the broker first (or was a connect that
never became a connection). A client's reconnect after it closed an idle connection itself,
or after closing its bootstrap connection to move on to the brokers, is not. A view cannot
tell for a socket opened before its first look at the process (what the process held then
is unknown to it): it says so, where another view may know.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kmon.engine.connection_lives import KernelLife

Pair = tuple[tuple[str, int], tuple[str, int]]  # (local, remote) as the kernel gives them
MAX_CLOSED = 64  # a process's latest closed connections kept


class LossHistory:
    """The connections of each watched process, as the kernel's events told them."""

    def __init__(self) -> None:
        self.lives: dict[int, list[KernelLife]] = {}  # open, then the latest closed
        # the sockets each process held at kmon's first look that no life follows
        self.before: dict[int, frozenset[Pair]] = {}
        self.first_look: dict[int, float] = {}  # when (UTC epoch ms)

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

    def after_loss(self, pid: int, pairs: Iterable[Pair],
                   unfollowed: Mapping[Pair, tuple[float, str]],
                   now_ms: float) -> dict[Pair, bool | None]:
        """Of the process's sockets ``pairs`` (read at ``now_ms``, UTC epoch) that the kernel
        followed: whether each was opened after a loss (None: opened before this view's first
        look, it cannot tell); ``unfollowed``: the first close steps of connections no life
        follows. A process no life of which the kernel followed since the first look has
        nothing to tell: its ``pairs`` are not read then."""
        lives = self.lives.get(pid, [])
        if not lives and pid in self.before:
            return {}
        pairs = frozenset(pairs)
        followed = {(life.local, life.remote) for life in lives}
        if pid not in self.before:  # its first look: what has no life was open before
            self.before[pid], self.first_look[pid] = pairs, now_ms
        # a life whose local port came after the first look was no socket from before
        before = self.before[pid] = self.before[pid] - followed
        found: dict[Pair, bool | None] = {}
        for life in lives:  # oldest first: a pair's latest life is the socket read
            pair = (life.local, life.remote)
            if pair not in pairs:
                continue  # (one closed since the sockets were read is still told: alike
                # whether the events of its close came before this view's feed or after)
            if life.opened_ms < self.first_look[pid]:
                found[pair] = None
                continue
            if life.after_loss is None:
                life.after_loss = self._decide(life, lives, before, unfollowed)
            found[pair] = life.after_loss
        return found

    @staticmethod
    def _decide(life: KernelLife, lives: list[KernelLife], before: frozenset[Pair],
                unfollowed: Mapping[Pair, tuple[float, str]]) -> bool:
        """Whether ``life`` was opened while every other connection of its process was gone,
        the last one lost."""
        at = life.opened_ms
        last: tuple[float, bool] | None = None  # the latest close before: (when, lost)
        for other in lives:
            if other is life or other.opened_ms > at:
                continue
            if other.closed_ms is None or other.closed_ms > at:
                if not other.never_established:
                    return False  # held when it opened
                continue
            lost = other.never_established or other.closed_by == "broker"
            if last is None or other.closed_ms >= last[0]:
                last = (other.closed_ms, lost)
        for pair in before:
            end = unfollowed.get(pair)
            if end is None or end[0] > at:
                return False  # held when it opened (or its close was not seen)
            if last is None or end[0] >= last[0]:
                last = (end[0], end[1] == "broker")
        return last is not None and last[1]
