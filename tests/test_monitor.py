"""Snapshots diffed into events; history stays bounded."""

from __future__ import annotations

from dataclasses import replace

from kmon.engine.monitor import Monitor, diff
from kmon.model import Connection, EventKind, ProcessView, Role


def conn(key: str, state: str = "ESTABLISHED", role: Role = Role.BROKER, node_id: int = 1,
         idle_ms: int = 0, limit: int = 10_000) -> Connection:
    return Connection(key=key, role=role, node_id=node_id, broker_id=node_id, client="c",
                      local="127.0.0.1:1", remote="127.0.0.1:9092", state=state,
                      idle_ms=idle_ms, idle_limit_ms=limit)


def view(*connections: Connection) -> ProcessView:
    return ProcessView(pid=42, name="app", cmdline="app", connections=list(connections))


def kinds(before: ProcessView, after: ProcessView) -> list[EventKind]:
    return [e.kind for e in diff(before, after, ts_ms=1)]


def test_opened_and_closed():
    assert kinds(view(conn("a")), view(conn("b"))) == [EventKind.OPENED, EventKind.CLOSED]


def test_state_change_and_close_wait():
    assert kinds(view(conn("a", "SYN_SENT")), view(conn("a"))) == [EventKind.STATE_CHANGE]
    assert kinds(view(conn("a")), view(conn("a", "CLOSE_WAIT"))) == [EventKind.CLOSE_WAIT]
    assert kinds(view(), view(conn("a", "CLOSE_WAIT"))) == [EventKind.OPENED,
                                                            EventKind.CLOSE_WAIT]


def test_role_change():
    before = view(conn("a", role=Role.UNKNOWN, node_id=None))
    assert kinds(before, view(conn("a"))) == [EventKind.ROLE_CHANGE]


def test_a_role_change_says_no_node_id_where_none_is_known():
    """The event's words, as the dashboards show them: no ``None`` for an unknown node id."""
    [event] = diff(view(conn("a", role=Role.UNKNOWN, node_id=None)), view(conn("a", node_id=2)),
                   ts_ms=1)
    assert event.detail == "unknown -> broker 2"


def test_near_reap_fires_once_when_crossing_80_percent():
    assert kinds(view(conn("a", idle_ms=7_000)), view(conn("a", idle_ms=8_000))) == [
        EventKind.NEAR_REAP]
    assert kinds(view(conn("a", idle_ms=8_000)), view(conn("a", idle_ms=9_000))) == []
    assert kinds(view(conn("a", idle_ms=9_000)), view(conn("a", idle_ms=10))) == []


class FakeSampler:
    """Stands in for a process sampler: ten thousand polls of a real process take too long."""

    pid = 42
    reader = None  # a socket reader is asked to read ahead only when samplers share it
    jvm_source = None  # (a JVM's sampler is not read ahead)

    def __init__(self) -> None:
        self.n = 0

    def sample(self, now_ms: int) -> ProcessView:
        self.n += 1
        return view(conn(f"k{self.n % 50}"), conn("steady"))


def test_history_is_bounded():
    # each poll asks the kernel once for the host's closing sockets: few polls, a small bound
    monitor = Monitor([FakeSampler()], max_events=20)
    told = sum(len(monitor.poll()[1]) for _ in range(60))
    assert told > 100  # five times what is kept
    assert len(monitor.events) == 20
    assert len(monitor.lives[FakeSampler.pid]) == 2  # what is open now, nothing older



class ScriptedSampler(FakeSampler):
    """Shows, poll after poll, the rows of ``script`` (a stand-in, as FakeSampler)."""

    def __init__(self, script: list[list[Connection]]) -> None:
        super().__init__()
        self.script = script

    def sample(self, now_ms: int) -> ProcessView:
        self.n += 1
        return view(*self.script[self.n - 1])


def test_each_socket_s_life_kept_in_place_is_the_one_its_polls_make_from_scratch():
    """The lives the monitor keeps in place, poll after poll: those of the rows open now
    only, each first seen at the first poll of its unbroken run of polls, with every state
    of that run and the last row; a key gone and back is a new life."""
    script = [[conn("a", "SYN_SENT"), conn("b")], [conn("a"), conn("b")], [conn("a")],
              [conn("a", "CLOSE_WAIT"), conn("b", "SYN_SENT")], [conn("b")], [conn("b")]]
    monitor = Monitor([ScriptedSampler(script)])
    for poll in range(len(script)):
        monitor.poll()
        lives = monitor.lives[FakeSampler.pid]
        assert lives.keys() == {c.key for c in script[poll]}
        for row in script[poll]:
            run = poll
            while run > 0 and row.key in {c.key for c in script[run - 1]}:
                run -= 1
            life = lives[row.key]
            assert life.last == row and life.states == {
                c.state for rows in script[run:poll + 1] for c in rows if c.key == row.key}
            assert life.first_seen_ms <= life.last_seen_ms
        if poll == 3:  # b's run began again at poll 3, a's at poll 0
            assert lives["b"].states == {"SYN_SENT"}
            assert lives["a"].states == {"SYN_SENT", "ESTABLISHED", "CLOSE_WAIT"}

class FailingSampler(FakeSampler):
    """Shows one connection, then fails as ``failure`` (a stand-in: a real process's spool
    cannot be made to fail, nor the process to exit, at a chosen poll)."""

    def __init__(self, failure: Exception) -> None:
        super().__init__()
        self.failure = failure

    def sample(self, now_ms: int) -> ProcessView:
        self.n += 1
        if self.n > 1:
            raise self.failure
        return view(conn("a"))

    def close(self) -> None:
        pass


def test_a_process_dropped_for_an_error_has_no_made_up_closes_and_one_that_exited_has():
    """A spool kmon refused dropped a process whose connections were open: each was told
    ``closed by the broker``, which no packet showed, where a view that went on watching
    told nothing (issue 33: the recording against the stream)."""
    from kmon.engine.sampler import ProcessGone, SampleError

    for failure, told in ((SampleError("its spool is corrupt"), [EventKind.PROCESS_ERROR]),
                          (ProcessGone("PID 42 has exited"),
                           [EventKind.PROCESS_EXIT, EventKind.CLOSED])):
        monitor = Monitor([FailingSampler(failure)])
        monitor.poll()
        assert [e.kind for e in monitor.poll()[1]] == told


def test_a_fault_reading_one_process_leaves_the_others_watched():
    """kmon failing on what one process gave it (a parser that raised on its command line or
    its log: ``FailingSampler`` plays it, as no real process can make kmon fail on demand
    once such a fault is fixed) shows that process's last view with why, and the others
    refreshed: one process never blinds the whole poll (``kmon serve`` failed every poll)."""
    class Other(FakeSampler):
        pid, reader = 43, object()  # a reader of its own: none is read ahead

        def sample(self, now_ms: int) -> ProcessView:
            return replace(super().sample(now_ms), pid=self.pid)

    failing, other = FailingSampler(ValueError("invalid literal for int(): '²'")), Other()
    monitor = Monitor([failing, other])
    monitor.poll()
    snapshot, events = monitor.poll()
    views = {v.pid: v for v in snapshot.processes}
    assert views.keys() == {42, 43} and other.n == 2
    assert views[42].notices[-1] == ("not refreshed this time: kmon could not read it "
                                     "(ValueError: invalid literal for int(): '²')")
    assert [c.key for c in views[42].connections] == ["a"]
    assert not [e for e in events if e.kind is EventKind.PROCESS_ERROR]


def test_a_fault_at_a_process_s_first_look_drops_it_with_why():
    """With no view yet to show, the process is dropped, its error event saying why."""
    class FailingAtOnce(FailingSampler):
        def sample(self, now_ms: int) -> ProcessView:
            raise self.failure

    monitor = Monitor([FailingAtOnce(KeyError("node"))])
    _, events = monitor.poll()
    assert [(e.kind, e.detail) for e in events] == [
        (EventKind.PROCESS_ERROR, "kmon could not read it (KeyError: 'node')")]
    assert not monitor.samplers
