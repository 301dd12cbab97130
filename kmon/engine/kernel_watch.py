"""The kernel's TCP events for one Monitor: the brokers' ports kept in the kernel filter,
each poll's events folded into connection lives, the connections no poll saw told as
``opened`` (every open counted once: a poll's new row tells its own) and ``closed`` with
their exact story (told from what every view has alike: a view whose poll saw one tells
it so too), and the life of any socket a poll saw close.
"""

from __future__ import annotations

import math
import operator
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import replace

from kmon.engine.closes import IDLE_REASONS, in_words, kernel_story
from kmon.engine.connection_lives import REJECTED_WITHIN_MS, ConnectionLives, KernelLife
from kmon.engine.losses import LossHistory, Pair
from kmon.model import CloseStory, Event, EventKind, Opening, ProcessView, WireClose
from kmon.sources import bounded
from kmon.sources.brokers.dns import parse_endpoint
from kmon.sources.kafka_protocol import SASL_APIS
from kmon.sources.kernel.kernel_events import KernelEvents, KernelEventsUnavailable
from kmon.sources.kernel.sockets import Endpoint, TcpSocket

MAX_LEARNED_PORTS = 48  # remote ports learned from the watched processes' own sockets
UNAVAILABLE = ("kernel TCP events unavailable ({}; they need root, CAP_PERFMON or "
               "CAP_SYS_ADMIN): connections living between two polls, failed connects and "
               "connections the broker refuses are not seen")
MAX_ENDINGS = 4096  # recent closes remembered by 4-tuple, for the story of a poll's close
# a broker going away closes its connections within this of each other; a limit closes none
BROKER_END_WITHIN_MS = 1000
# a per-IP limit refuses every connect past it, again and again while its broker listens on
# (each client retries within its reconnect backoff, 10 s at most); a broker shutting down
# resets the few connects made as its acceptor closed: a refusal at once is a limit's only
# with another refusal by its broker this soon before it (or REFUSAL_HOLD_MS after)
REFUSED_AGAIN_WITHIN_MS = 30_000
REFUSAL_HOLD_MS = 2000  # a refusal at once waits this long for the signs after it
# the latest refusals at once, refused connects and broker closes remembered per remote
MAX_REMEMBERED = 32
MAX_REFUSING = 256  # ... for this many remotes (brokers: a host's clients know a few)


_ENDS = operator.itemgetter(2, 3)  # a TcpSocket's (local, remote)


def epoch_ms() -> float:
    """The clock as the kernel's events are stamped: UTC epoch ms."""
    return time.time() * 1000


def open_kernel_watch(ports: Iterable[int] = ()) -> tuple[KernelWatch | None, str | None]:
    """The kernel's TCP events filtered by the brokers' ``ports``; or None and the notice
    saying what kmon cannot see without them."""
    ports = frozenset(ports)
    try:
        return KernelWatch(KernelEvents(ports), ports), None
    except (KernelEventsUnavailable, OSError) as err:
        return None, UNAVAILABLE.format(err)


class KernelWatch:
    """Reads the kernel events each poll and says what they showed."""

    def __init__(self, source: KernelEvents, broker_ports: Iterable[int] = (),
                 clock: Callable[[], float] = epoch_ms) -> None:
        self.source = source
        self.clock = clock  # UTC epoch ms, as the events are stamped
        # every event stamped before this was fed (the last read's start, unless it stopped
        # at MAX_EVENTS_PER_READ): what a socket opened after it held may be unread yet
        self.complete_ms = -math.inf
        self.lives = ConnectionLives()
        self.broker_ports = frozenset(broker_ports)
        self.learned: OrderedDict[int, None] = OrderedDict()  # ports, latest last
        # by (local, remote) as the kernel gave them
        self.endings: OrderedDict[tuple[tuple[str, int], tuple[str, int]], KernelLife] = (
            OrderedDict())
        self.polled: list[ProcessView] = []  # the last poll's views
        self.held: list[KernelLife] = []  # refusals at once, told REFUSAL_HOLD_MS later
        # remote -> its latest refusals at once, refused connects, and closes by the broker
        # of connections it had kept: (when, local), latest last
        self.refusals: dict[tuple[str, int], list[tuple[float, tuple[str, int] | None]]] = {}
        self.refused_at: dict[tuple[str, int], list[tuple[float, tuple[str, int] | None]]] = {}
        self.broker_closes: dict[tuple[str, int], list[tuple[float, tuple[str, int] | None]]] = {}
        self.unheard: list[KernelLife] = []  # closes no poll saw, waiting for the wire's
        # the wire's closes of the last polls, by (local, remote) as the rows write them
        self.wire: OrderedDict[tuple[str, str], WireClose] = OrderedDict()
        self._losses_told = 0  # the followed rings' losses as ``strangers`` last saw them
        self._connect_losses_told = 0  # ... and the connect rings'
        # connects to ports not followed lost before the last ``strangers`` (a connect ring
        # was full): a process's first connect to such a port may be missing from them
        self.connects_missed = False
        self.losses = LossHistory()
        # pid -> its sockets' ends at its last ``openings`` and their (local, remote) pairs
        self.pairs: dict[int, tuple[tuple[tuple[Endpoint, Endpoint], ...], frozenset[Pair]]] = {}
        self.fed: tuple[list[KernelLife], list[KernelLife]] = ([], [])  # since the last poll

    def feed(self, pids: set[int]) -> list[KernelLife]:
        """Fold in the events so far (of the processes ``pids``, watched): a poll's samplers
        feed them before they decide, with every socket they read followed from its open.
        The lives these events closed."""
        began = self.clock()
        events = self.source.read()
        if not self.source.cut_short:  # (else some rings were left for the next)
            self.complete_ms = began
        opened, closed = self.lives.feed(events, pids)
        self.losses.opened(opened)
        self.fed[0].extend(opened)
        self.fed[1].extend(closed)
        return closed

    def openings(self, pid: int, sockets: Iterable[TcpSocket], now_ms: float
                 ) -> dict[tuple[Endpoint, Endpoint], Opening | None]:
        """Of the process's ``sockets`` (read at ``now_ms``) the kernel saw open, by (local,
        remote): what the process held when each opened (None: this view cannot tell;
        kmon.engine.losses)."""
        ends = tuple(map(_ENDS, sockets))
        last = self.pairs.get(pid)
        if last is not None and last[0] == ends:  # (the reader's same endpoints: at a glance)
            pairs = last[1]
        else:
            pairs = frozenset(((local.ip, local.port), (remote.ip, remote.port))
                              for local, remote in ends)
            self.pairs[pid] = (ends, pairs)
        return {(Endpoint(*local), Endpoint(*remote)): opening for (local, remote), opening in
                self.losses.openings(pid, pairs, self.lives.unfollowed, now_ms,
                                     self.complete_ms).items()}

    def poll(self, views: list[ProcessView], now_ms: float | None = None
             ) -> tuple[list[KernelLife], list[KernelLife], list[Event]]:
        """The lives opened and closed since the last poll (at ``now_ms``, the poll's time:
        by default the clock's), and the events of those no poll saw: ``opened`` (a
        connection made) and ``closed`` (failed connects too)."""
        polled, self.polled = self.polled, views
        for port in remote_ports(views):
            self.learned[port] = None
            self.learned.move_to_end(port)
        self._follow_ports()
        pids = {v.pid for v in views}
        self.feed(pids)
        (opened, closed), self.fed = self.fed, ([], [])
        self.losses.forget(pids)
        self.pairs = {pid: held for pid, held in self.pairs.items() if pid in pids}
        for life in opened:  # where the process connects is a broker port to follow
            if life.remote is not None:
                self.learned[life.remote[1]] = None
        self._follow_ports()
        for life in closed:
            self._remember(life)
        self._hear(views, [*self.held, *closed])
        # a socket a poll saw (the last, or this one) has a row: its close is the monitor's
        # to tell, with the row's role, so that every view counts it under one verdict
        seen = seen_pairs(polled + views, [*self.held, *closed])
        self._note_kept_ends(polled + views)
        closed = self._decided(closed, seen,
                               self.clock() if now_ms is None else now_ms)
        # one no poll saw: its open (every open counted once), then its close told from what
        # every view has alike, as a view whose poll saw it tells it (kmon.engine.closes)
        # (an ordinary one whose close the wire has not handed over yet waits a poll for it,
        # as a poll's close waits for its capture to settle)
        events, waited, self.unheard = [], self.unheard, []
        for life in closed:
            if _pair(life) in seen:
                continue
            if life.ending is None and not life.never_established:
                events.append(self._opened_event(life))
                if self._wire_close(life) is None:
                    self.unheard.append(life)
                    continue
            events.append(self._closed_event(life, idle_limits(polled + views, life)))
        events += [self._closed_event(life, idle_limits(polled + views, life))
                   for life in waited]
        if self.lost:  # standing from the first loss on, with the total
            note = (f"the kernel dropped {self.lost} TCP events (a ring buffer was "
                    "full): connection counts may be short")
            for view in views:
                view.notices.append(note)
        return opened, closed, events

    def strangers(self) -> dict[int, set[tuple[str, int]]] | None:
        """The processes not watched that connected since the last call (PID -> the (ip,
        port) they connected to); None when one connected to a followed port may be
        missing (a followed ring or the table was full). Those only a full connect ring
        lost (connects to other ports: a host's flood of them) set ``connects_missed``."""
        strangers, overflowed = self.lives.take_strangers()
        connect_losses = self.source.lost_connects
        self.connects_missed = connect_losses != self._connect_losses_told
        self._connect_losses_told = connect_losses
        if overflowed or self.source.lost != self._losses_told:
            self._losses_told = self.source.lost
            return None
        return strangers

    @property
    def followed(self) -> frozenset[int]:
        """The ports whose connects the followed rings take (the kernel filter's)."""
        return self.source.ports

    @property
    def lost(self) -> int:
        """The events of the followed ports the kernel dropped since the watch began (a ring
        buffer was full)."""
        return self.source.lost

    @property
    def lost_any(self) -> int:
        """The records of every ring the kernel dropped since the watch began: the followed
        ports' and the other connects'."""
        return self.source.lost + self.source.lost_connects

    def _decided(self, closed: list[KernelLife],
                 seen: set[tuple[Endpoint | None, Endpoint | None]],
                 now_ms: float) -> list[KernelLife]:
        """``closed`` with the refusals at once no poll saw held back until
        ``REFUSAL_HOLD_MS`` after them (a time, not a number of polls: every view, whenever it
        polls, decides each from the same events). A per-IP limit accepts and closes while
        its broker listens on, but a broker that just died resets its last connections too,
        and then refuses the next connects to it; one just starting up accepts and closes
        too, after refusing them. A refusal with a refused connect to its remote within
        ``REFUSAL_HOLD_MS`` of it was the broker's end (or start), not a limit; so was one
        within ``BROKER_END_WITHIN_MS`` of the broker closing another connection of a
        watched process it had kept past the limit's window (a limit closes none that it
        accepted before, only new ones, some with a FIN): a broker shutting down closes them
        all, and resets a connect made meanwhile. One with no other refusal by its broker
        from ``REFUSED_AGAIN_WITHIN_MS`` before it to ``REFUSAL_HOLD_MS`` after is left
        ``alone``: unsettled. (One a poll saw is told by its row's close at once, from the
        events so far.)"""
        self._note_broker_closes(closed)
        for life in closed:
            if life.refused and life.remote is not None:
                self._note(self.refused_at, life.remote, (life.closed_ms or 0.0, None))
        waiting, now = list(self.held), []
        for life in closed:
            if life.ending != "per_ip_rejected":
                now.append(life)
                continue
            if life.remote is not None:
                self._note(self.refusals, life.remote, (life.closed_ms or 0.0, life.local))
            (now if _pair(life) in seen else waiting).append(life)
        for life in (*waiting, *now):  # each poll: the signs of its broker's end as they come
            life.listener_gone = life.listener_gone or (
                life.ending == "per_ip_rejected" and (
                    self._near(self.refused_at, life, REFUSAL_HOLD_MS, REFUSAL_HOLD_MS)
                    or self._near(self.broker_closes, life, BROKER_END_WITHIN_MS,
                                  BROKER_END_WITHIN_MS)))
        decided: list[KernelLife] = []
        self.held = []
        for life in waiting:
            (self.held if life.ending == "per_ip_rejected"
             and now_ms < (life.closed_ms or 0.0) + REFUSAL_HOLD_MS else decided).append(life)
        decided += now
        for life in decided:
            life.alone = life.ending == "per_ip_rejected" and not self._near(
                self.refusals, life, REFUSED_AGAIN_WITHIN_MS, REFUSAL_HOLD_MS)
        return decided

    @staticmethod
    def _note(table: dict[tuple[str, int], list[tuple[float, tuple[str, int] | None]]],
              remote: tuple[str, int], mark: tuple[float, tuple[str, int] | None]) -> None:
        """Remember ``mark`` (when, local) of ``remote`` in ``table``, the latest kept."""
        times = table.get(remote, [])
        if mark not in times:
            bounded.put(table, remote, [*times, mark][-MAX_REMEMBERED:], MAX_REFUSING)

    @staticmethod
    def _near(table: dict[tuple[str, int], list[tuple[float, tuple[str, int] | None]]],
              life: KernelLife, before_ms: float, after_ms: float) -> bool:
        """Whether ``table`` holds another mark of ``life``'s remote from ``before_ms`` before
        its close to ``after_ms`` after it."""
        when = life.closed_ms or 0.0
        return life.remote is not None and any(
            when - before_ms <= ms <= when + after_ms and (ms, local) != (when, life.local)
            for ms, local in table.get(life.remote, ()))

    def _note_broker_closes(self, closed: list[KernelLife]) -> None:
        """Remember when the broker closed each connection it had kept past the limit's
        window, by remote."""
        for life in closed:
            closing = life.closed_ms
            if (life.remote is not None and closing is not None and life.ending is None
                    and life.closed_by == "broker"
                    and closing - life.opened_ms > REJECTED_WITHIN_MS):
                self._note(self.broker_closes, life.remote, (closing, life.local))

    def _note_kept_ends(self, views: list[ProcessView]) -> None:
        """Remember when the broker began to close a connection of a watched process the
        events do not follow (open before they ran: kept past the limit's window), by
        remote: a view that began watching after the process connected knows its broker's
        end as one that watched it connect does."""
        when = dict(self.lives.take_broker_ends())
        ends: dict[tuple[Endpoint | None, Endpoint | None], Pair] = {
            (Endpoint(*local), Endpoint(*remote)): (local, remote) for local, remote in when}
        for pair in held_pairs(views, ends) if ends else ():
            local, remote = ends[pair]
            self._note(self.broker_closes, remote, (when[(local, remote)], local))

    def _hear(self, views: list[ProcessView], lives: list[KernelLife]) -> None:
        """Mark the ``lives`` whose close the wire saw end a failed login: the broker answered
        a SASL request with an error, or reset the connection right after one."""
        for view in views:
            self.wire.update(view.wire_closes)
        while len(self.wire) > MAX_ENDINGS:
            self.wire.popitem(last=False)
        for life in lives:
            local, remote = _pair(life)
            close = self.wire.get((local.text, remote.text)) if local and remote else None
            if close is not None and (close.auth_failed or (close.first_by == "broker"
                                                            and close.last_api in SASL_APIS)):
                life.login_failed = True

    def _follow_ports(self) -> None:
        while len(self.learned) > MAX_LEARNED_PORTS:
            self.learned.popitem(last=False)
        # the brokers' ports first, then the latest learned: the filter keeps the first ones
        self.source.watch_ports([*sorted(self.broker_ports), *reversed(self.learned)])

    def _remember(self, life: KernelLife) -> None:
        if life.local and life.remote:
            self.endings[(life.local, life.remote)] = life
            if len(self.endings) > MAX_ENDINGS:
                self.endings.popitem(last=False)

    def _closed_event(self, life: KernelLife, limits: dict[str, int]) -> Event:
        """The ``closed`` event of a life no poll saw (a poll's row tells its own close,
        with the kernel's story: ``life_of``)."""
        local, remote = _pair(life)
        story = self.story(life, limits)
        if life.refused:
            detail = (f"{life.where()}: connect_failed, refused in {story.lifetime_ms} ms (a "
                      "RST answered its SYN: nothing listens there)")
        elif life.alone:
            detail = (f"{life.where()}: reset by the broker {story.lifetime_ms} ms after its "
                      "connect, no FIN first, and no other connect to it refused near it: a "
                      "per-IP limit, or the broker going away (unsettled)")
        elif life.ending is None:
            detail = (f"{life.where()}: {in_words(story, limits)}, {story.lifetime_ms} ms "
                      "after its connect")
        else:
            detail = (f"{life.where()}: {life.ending} after {story.lifetime_ms} ms (first "
                      f"FIN: {life.first_fin or 'none'}, RST: {life.reset or 'none'})")
        return Event(int(life.closed_ms or 0), EventKind.CLOSED, life.pid,
                     f"kernel:{local}>{remote}", remote=str(remote) if remote else None,
                     detail=detail, close=story)

    @staticmethod
    def _opened_event(life: KernelLife) -> Event:
        """The ``opened`` event of a connection that lived and closed between two polls (no
        row of it, no role: the brokers counted it all the same)."""
        local, remote = _pair(life)
        return Event(round(life.opened_ms), EventKind.OPENED, life.pid,
                     f"kernel:{local}>{remote}", remote=str(remote) if remote else None,
                     detail=f"{life.where()}: lived {life.lifetime_ms} ms between two polls")

    def story(self, life: KernelLife, limits: dict[str, int] | None = None) -> CloseStory:
        """The close story of a life no poll saw: the kernel's times, the wire's close (its
        last data's stamp: the idle before it) and the process's idle ``limits``. Where the
        wire never handed its close over (its packets unread: a FIN, a RST or a failed
        login inside TLS alike), the side is the kernel's and why is ``unknown``."""
        wire = self._wire_close(life)
        last_data = wire.last_data_ms if wire is not None and wire.heard else None
        told = kernel_story(life, wire, limits or {}, last_data)
        if wire is None and life.ending is None and told.reason not in IDLE_REASONS:
            return replace(told, reason="unknown")
        return told

    def _wire_close(self, life: KernelLife) -> WireClose | None:
        """The wire's close of ``life``: never an earlier connection's on its 4-tuple (a
        client reuses a port at once after the broker reset its last connection on it: no
        TIME_WAIT on its side), whose close the wire took before this one opened."""
        local, remote = _pair(life)
        close = self.wire.get((local.text, remote.text)) if local and remote else None
        if close is not None and close.closed_ms is not None and close.closed_ms < life.opened_ms:
            return None
        return close

    def life_of(self, pair: tuple[Endpoint, Endpoint] | None) -> KernelLife | None:
        """The kernel's life of a socket a poll saw close (ended at its first FIN or RST);
        None for one opened before the events ran."""
        if pair is None:
            return None
        return self.endings.get(((pair[0].ip, pair[0].port), (pair[1].ip, pair[1].port)))

    def first_close_of(self, pair: tuple[Endpoint, Endpoint] | None
                       ) -> tuple[float, str] | None:
        """When the kernel saw a socket no life follows (opened before the events ran) begin
        to close, and whose FIN or RST that was (client, broker or unknown); None when it
        saw nothing of it."""
        if pair is None:
            return None
        return self.lives.unfollowed.get(((pair[0].ip, pair[0].port),
                                          (pair[1].ip, pair[1].port)))

    def close(self) -> None:
        """Stop the kernel events."""
        self.source.close()


def _pair(life: KernelLife) -> tuple[Endpoint | None, Endpoint | None]:
    """A life's (local, remote) as the polls' rows name them."""
    return (Endpoint(*life.local) if life.local else None,
            Endpoint(*life.remote) if life.remote else None)


def remote_ports(views: list[ProcessView]) -> set[int]:
    """The ports the processes' connections reach (their few distinct remotes parsed), and
    those of the brokers they know: a broker that refuses every connect has no row."""
    remotes = set().union(*(view.summary.remotes for view in views),
                          *(view.brokers for view in views))
    return {endpoint.port for remote in remotes if (endpoint := parse_endpoint(remote))}


def seen_pairs(views: list[ProcessView], lives: list[KernelLife]
               ) -> set[tuple[Endpoint | None, Endpoint | None]]:
    """Of the ``lives``' (local, remote) endpoints, those a connection of ``views`` held."""
    return held_pairs(views, map(_pair, lives))


def held_pairs(views: list[ProcessView],
               pairs: Iterable[tuple[Endpoint | None, Endpoint | None]]
               ) -> set[tuple[Endpoint | None, Endpoint | None]]:
    """Of the (local, remote) ``pairs``, those a connection of ``views`` held: the rows' texts
    looked up, none parsed (a poll holds thousands of sockets, a handful ended)."""
    wanted = {(local.text, remote.text): (local, remote) for local, remote in pairs
              if local is not None and remote is not None}
    if not wanted:
        return set()
    return {wanted[key] for view in views for conn in view.connections
            if (key := (conn.local, conn.remote)) in wanted}


def idle_limits(views: list[ProcessView], life: KernelLife) -> dict[str, int]:
    """The idle limits a connection no poll saw is held to: those of its process's row to
    the same remote, else of any of its rows (the cluster's and the client's own)."""
    rows = [conn for view in views if view.pid == life.pid for conn in view.connections
            if conn.idle_limits]
    same = [conn for conn in rows if conn.remote == life.where()]
    return dict((same or rows)[0].idle_limits) if rows else {}
