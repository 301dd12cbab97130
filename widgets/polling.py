"""What every screen shares: polling a source in a worker thread on a timer, its status header
and notice bar, recording it (``r``), and its help.

A poll runs in a thread worker (one at a time: Textual's own worker list says
whether one is under way) and its result comes back as a typed message,
``Polled`` or ``PollFailed``, handled on the UI thread by ``apply()`` or
``show_failure()``. Pause, interval, the header's text and the notices are
reactive attributes the ``StatusHeader`` and ``NoticeBar`` are bound to; ``?``
shows the keys the screen binds (generated from its BINDINGS) and its
``HELP_NOTES``.

Paused means paused: a poll that lands while the screen is paused (one that was
already under way when ``p`` was pressed) is held, not drawn, and applied in
order on resume. ``space`` while paused is one step: the next poll to land is
drawn and the screen stays paused.
"""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.message import Message
from textual.reactive import var
from textual.screen import Screen
from textual.timer import Timer
from textual.worker import WorkerState

from kmon.engine.facade import RecordingFailed, SnapshotSource
from kmon.model import Event, Snapshot
from kmon.widgets.help import HelpScreen, key_rows
from kmon.widgets.status import FindingsBar, NoticeBar, StatusHeader

INTERVAL_STEPS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
POLL_GROUP = "poll"
# action -> (the screen's attribute it toggles, its footer label while that is set)
TOGGLED = {"pause": ("paused", "resume"), "hide_idle": ("hide_idle", "show idle"),
           "record": ("recording", "stop recording")}


def next_interval(current: float, faster: bool) -> float:
    """The next refresh interval up or down the steps."""
    if faster:
        return max([s for s in INTERVAL_STEPS if s < current] or [INTERVAL_STEPS[0]])
    return min([s for s in INTERVAL_STEPS if s > current] or [INTERVAL_STEPS[-1]])


class Polled(Message):
    """A poll finished: the new snapshot and what changed."""

    def __init__(self, snapshot: Snapshot, events: list[Event]) -> None:
        super().__init__()
        self.snapshot, self.events = snapshot, events


class RecordingStopped(Message):
    """The recording was closed (in a worker); ``text`` says what it wrote."""

    def __init__(self, text: str, failed: bool = False) -> None:
        super().__init__()
        self.text, self.failed = text, failed


class PollFailed(Message):
    """A poll raised; ``text`` says why in one line."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class PollingScreen(Screen):
    """A screen refreshed from ``source`` every ``interval`` seconds.

    Subclasses draw in ``apply()``, ``show_failure()`` and ``redraw()``, and may
    stop polling for good by returning False from ``polling_wanted()``.
    """

    HELP_NOTES = ""  # Markdown the help shows below the keys

    paused: var[bool] = var(False, init=False)
    interval: var[float] = var(1.0, init=False)
    heading: var[Text] = var(Text, init=False)  # the header's text before "every ..."
    trailer: var[Text] = var(Text, init=False)  # ... and after LIVE / PAUSED
    ended: var[str] = var("", init=False)  # e.g. "EXITED": no longer live
    notices: var[tuple[str, ...]] = var(tuple, init=False)
    storm: var[bool] = var(False, init=False)  # a reconnect storm: the notices are loud
    findings: var[tuple[str, ...]] = var(tuple, init=False)  # in words, newest first
    recording: var[Path | None] = var(None, init=False)  # where r records now

    def __init__(self, source: SnapshotSource, interval_s: float,
                 record_dir: Path | None = None) -> None:
        super().__init__()
        self.source = source
        self.record_dir = record_dir  # where r records the session (None: r is not bound)
        self.recorded_dir: Path | None = None  # where the last recording went
        self.set_reactive(PollingScreen.interval, interval_s)
        self._timer: Timer | None = None
        # polls that landed while paused, oldest first: at most the one under way at the
        # pause, as the timer is paused with the screen
        self._held: list[Polled] = []
        self._step = False  # space while paused: draw the next poll to land

    def status_bars(self) -> tuple[StatusHeader, NoticeBar, FindingsBar]:
        """The header, the notice bar and the findings bar, bound to this screen's state
        (yield from compose)."""
        return (StatusHeader(id="header").data_bind(
                    PollingScreen.heading, PollingScreen.trailer, PollingScreen.paused,
                    PollingScreen.interval, PollingScreen.ended),
                NoticeBar(id="notice").data_bind(PollingScreen.notices, PollingScreen.storm),
                FindingsBar(id="findings").data_bind(lines=PollingScreen.findings))

    def start_polling(self) -> None:
        """Start the timer and poll at once (call from ``on_mount``)."""
        self._timer = self.set_interval(self.interval, self.tick)
        self.tick()

    def stop_polling(self) -> None:
        if self._timer is not None:
            self._timer.stop()

    def polling_wanted(self) -> bool:
        return True

    def tick(self) -> None:
        """One timer tick: a poll, unless one is under way."""
        self.request_refresh()

    @property
    def polling(self) -> bool:
        """True while a poll worker is under way."""
        return any(w.node is self and w.group == POLL_GROUP
                   and w.state in (WorkerState.PENDING, WorkerState.RUNNING)
                   for w in self.workers)

    def request_refresh(self) -> None:
        """Poll the source in a worker thread, unless a poll is already running."""
        if not self.polling and self.polling_wanted():
            self._poll()

    @work(thread=True, group=POLL_GROUP, exit_on_error=False)
    def _poll(self) -> None:
        try:
            snapshot, events = self.source.poll()
        except RecordingFailed as err:  # the recording stopped (the disk full); polls go on
            self.post_message(RecordingStopped(str(err), True))
            return
        except Exception as err:  # noqa: BLE001 - any source failure is shown in place
            self.post_message(PollFailed(f"refresh failed: {err}"))
            return
        self.post_message(Polled(snapshot, events))

    @on(Polled)
    def _polled(self, message: Polled) -> None:
        self._held.append(message)
        if not self.paused or self._step:
            self._step = False
            self._apply_held()

    def _apply_held(self) -> None:
        held, self._held = self._held, []
        for message in held:
            self.apply(message.snapshot, message.events)

    @on(PollFailed)
    def _failed(self, message: PollFailed) -> None:
        self.show_failure(message.text)

    def apply(self, snapshot: Snapshot, events: list[Event]) -> None:
        raise NotImplementedError

    def show_failure(self, message: str) -> None:
        raise NotImplementedError

    def redraw(self) -> None:
        raise NotImplementedError

    # -- reactive state ---------------------------------------------------------------------

    def key_label(self, action: str, description: str) -> str:
        """The footer's word for ``action``: what pressing it does now (``resume`` while
        paused)."""
        attribute, toggled = TOGGLED.get(action, ("", ""))
        return toggled if attribute and getattr(self, attribute, None) else description

    def watch_paused(self, paused: bool) -> None:
        self.refresh_bindings()
        if self._timer is not None and self.polling_wanted():
            self._timer.pause() if paused else self._timer.resume()
        self._step = False
        if not paused and self._held:
            self._apply_held()  # it redraws
        else:
            self.redraw()

    def watch_interval(self, seconds: float) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = self.set_interval(seconds, self.tick, pause=self.paused)
        self.redraw()

    # -- actions ----------------------------------------------------------------------------

    def action_pause(self) -> None:
        self.paused = not self.paused

    def action_refresh_now(self) -> None:
        if self.paused and self._held:  # a poll landed since the pause: that is the step
            self._apply_held()
            return
        self._step = self.paused
        self.tick()

    def action_faster(self) -> None:
        self.interval = next_interval(self.interval, faster=True)

    def action_slower(self) -> None:
        self.interval = next_interval(self.interval, faster=False)

    # -- recording ------------------------------------------------------------------------

    @property
    def recorder(self) -> Path | None:
        """Where the running recording writes (None when not recording)."""
        return self.recording

    def recording_words(self) -> Text:
        """The header's words for the recording: running (where), or where the last went."""
        if self.recording is not None:
            return Text(f"  ·  ● REC {self.recording}", style="bold red")
        if self.recorded_dir is not None:
            return Text(f"  ·  recorded to {self.recorded_dir}", style="dim")
        return Text()

    def watch_recording(self) -> None:
        self.refresh_bindings()
        self.redraw()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "record":
            return self.record_dir is not None and hasattr(self.source, "start_recording")
        return True

    def action_record(self) -> None:
        if self.recording is None:
            try:
                self.source.start_recording(self.record_dir)
            except OSError as err:  # a directory kmon must not write into, said in one line
                self.notify(str(err), title="not recording", severity="error", markup=False)
                return
            self.recording = self.record_dir
            self.notify(f"recording to {self.record_dir}", title="record", markup=False)
        else:
            self.recorded_dir, self.recording = self.recording, None
            self._stop_recording()

    @work(thread=True, group="record", exit_on_error=False)
    def _stop_recording(self) -> None:
        try:
            self.post_message(RecordingStopped(self.source.stop_recording()))
        except OSError as err:
            self.post_message(RecordingStopped(f"cannot write the recording: {err}", True))

    @on(RecordingStopped)
    def _recording_stopped(self, message: RecordingStopped) -> None:
        if message.failed and self.recording is not None:  # (a poll's: r is off now)
            self.recorded_dir, self.recording = self.recording, None
        self.notify(message.text, title="recording stopped",
                    severity="error" if message.failed else "information", markup=False)

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(key_rows(self), self.HELP_NOTES))
