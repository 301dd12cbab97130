"""What the attach and watch screens share: polling a source in a worker thread on a timer.

One poll runs at a time; its result comes back to the UI thread through
``apply()``, or ``show_failure()`` with one line when the source raised.
The pause, refresh-now, interval and help actions live here too.
"""

from __future__ import annotations

from typing import Protocol

from textual.screen import Screen
from textual.timer import Timer

from kmon.model import Event, Snapshot
from widgets.help import HelpScreen

INTERVAL_STEPS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class SnapshotSource(Protocol):
    """Where refreshes come from: a live Monitor, or a recording replayed."""

    def poll(self) -> tuple[Snapshot, list[Event]]: ...


def next_interval(current: float, faster: bool) -> float:
    """The next refresh interval up or down the steps."""
    if faster:
        return max([s for s in INTERVAL_STEPS if s < current] or [INTERVAL_STEPS[0]])
    return min([s for s in INTERVAL_STEPS if s > current] or [INTERVAL_STEPS[-1]])


class PollingScreen(Screen):
    """A screen refreshed from ``source`` every ``interval`` seconds.

    Subclasses draw in ``apply()``, ``show_failure()`` and ``redraw()``, and may
    stop polling for good by returning False from ``polling_wanted()``.
    """

    def __init__(self, source: SnapshotSource, interval_s: float) -> None:
        super().__init__()
        self.source = source
        self.interval = interval_s
        self.paused = False
        self._busy = False
        self._timer: Timer | None = None

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

    def request_refresh(self) -> None:
        """Poll the source in a worker thread, unless a poll is already running."""
        if self._busy or not self.polling_wanted():
            return
        self._busy = True
        self.run_worker(self._poll, thread=True, group="poll", exit_on_error=False)

    def _poll(self) -> None:
        try:
            snapshot, events = self.source.poll()
        except Exception as err:  # noqa: BLE001 - any source failure is shown in place
            self.app.call_from_thread(self._failed, f"refresh failed: {err}")
            return
        self.app.call_from_thread(self._polled, snapshot, events)

    def _polled(self, snapshot: Snapshot, events: list[Event]) -> None:
        self._busy = False
        self.apply(snapshot, events)

    def _failed(self, message: str) -> None:
        self._busy = False
        self.show_failure(message)

    def apply(self, snapshot: Snapshot, events: list[Event]) -> None:
        raise NotImplementedError

    def show_failure(self, message: str) -> None:
        raise NotImplementedError

    def redraw(self) -> None:
        raise NotImplementedError

    # -- actions ----------------------------------------------------------------------------

    def action_pause(self) -> None:
        self.paused = not self.paused
        if self._timer is not None and self.polling_wanted():
            self._timer.pause() if self.paused else self._timer.resume()
        self.redraw()

    def action_refresh_now(self) -> None:
        self.tick()

    def _set_interval(self, seconds: float) -> None:
        self.interval = seconds
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_interval(seconds, self.tick, pause=self.paused)
        self.redraw()

    def action_faster(self) -> None:
        self._set_interval(next_interval(self.interval, faster=True))

    def action_slower(self) -> None:
        self._set_interval(next_interval(self.interval, faster=False))

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen())
