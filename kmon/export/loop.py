"""The headless poll loop ``kmon serve`` and ``kmon record`` share: a step every interval
until a stop signal, SIGHUP reloading where the command can."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
CHECK_S = 0.1  # how quickly a signal ends the wait between steps


class Signals:
    """While active, SIGINT and SIGTERM ask for a clean stop; SIGHUP asks for a reload
    (``reloads``) or, for a command that cannot reload, a stop."""

    def __init__(self, reloads: bool = False) -> None:
        self.reloads = reloads
        self.received: str | None = None  # the stop signal's name
        self.reload_asked = False
        # each signal's handler before: a function, SIG_DFL or SIG_IGN, or None (not Python's)
        self._previous: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}

    def __enter__(self) -> Signals:
        for sig in (*STOP_SIGNALS, signal.SIGHUP):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, _frame: object) -> None:
        if signum == signal.SIGHUP and self.reloads:
            self.reload_asked = True
        else:
            self.received = signal.Signals(signum).name

    def wait(self, seconds: float) -> None:
        """Sleep up to ``seconds``, waking within CHECK_S of any signal (a handler may not
        take locks, so it only sets flags that this reads)."""
        deadline = time.monotonic() + seconds
        while (self.received is None and not self.reload_asked
               and (left := deadline - time.monotonic()) > 0):
            time.sleep(min(left, CHECK_S))


def run_loop(step: Callable[[], str | None], interval_s: float, signals: Signals,
             duration_s: float | None = None,
             reload: Callable[[], None] | None = None) -> str:
    """Call ``step`` every ``interval_s`` (from the start of one to the next) until it
    returns why to stop, a stop signal arrives or ``duration_s`` has passed; SIGHUP
    calls ``reload`` before the next step. Returns why it stopped."""
    started = time.monotonic()
    ends = started + duration_s if duration_s else None
    while True:
        began = time.monotonic()
        why = step()
        if why:
            return why
        wake = began + interval_s
        while True:
            signals.wait(min(wake, ends or wake) - time.monotonic())
            if signals.received:
                return signals.received
            if signals.reload_asked and reload is not None:
                signals.reload_asked = False
                reload()
            if ends is not None and time.monotonic() >= ends:
                return "duration reached"
            if time.monotonic() >= wake:
                break
