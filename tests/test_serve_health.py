"""``kmon serve``'s /healthz: 200 while its polls succeed, 503 once the last good poll is
older than ``--stale-after`` (default: three intervals and 10 s); a failed poll, fold or
render is counted and told, never the end of serve."""

from __future__ import annotations

import errno
import gc
import os
import signal
import threading
import urllib.error

from helpers import free_port, get, wait_for

from kmon.cli import main
from kmon.engine.facade import HostSession
from kmon.engine.heap import YOUNG_THRESHOLD
from kmon.export.http import Exposition
from kmon.export.metrics import HostMetrics


def test_healthz_answers_503_once_the_polls_stop_succeeding(monkeypatch, capsys):
    """A real ``kmon serve`` in this process (its signal handlers need the main thread),
    probed over HTTP from another thread, which stops it with SIGTERM."""
    good_poll, failing = HostSession.poll, threading.Event()

    def poll(session: HostSession):
        """A fake failure, as the kernel's (a full socket buffer, say): a real host poll
        cannot be made to fail on demand."""
        if failing.is_set():
            raise OSError(errno.ENOBUFS, "No buffer space available")
        return good_poll(session)

    monkeypatch.setattr(HostSession, "poll", poll)
    address = f"http://127.0.0.1:{free_port()}"
    answers: dict[str, tuple[int, str, str]] = {}

    def health() -> tuple[int, str, str] | None:
        try:
            return get(f"{address}/healthz")
        except urllib.error.URLError:  # not listening yet
            return None

    def probe() -> None:
        answers["good"] = wait_for(lambda: (h := health()) and h[0] == 200
                                   and h[2].startswith("last poll") and h,
                                   "healthy after a good poll")
        try:  # from here kmon serve is in its loop, with its SIGTERM handler
            failing.set()
            answers["stalled"] = wait_for(lambda: (h := health()) and h[0] == 503 and h,
                                          "503 once the last good poll is 2 s old")
            answers["metrics"] = get(f"{address}/metrics")
        finally:
            os.kill(os.getpid(), signal.SIGTERM)

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    code = main(["serve", "--listen", address.removeprefix("http://"), "--interval", "100ms",
                 "--stale-after", "2s", "--wire", "off", "--duration", "120s"])
    prober.join(10)
    assert code == 0
    assert "stalled" in answers, answers
    assert answers["stalled"][2].rstrip().endswith("ago (stalled)"), answers
    errors = next(line for line in answers["metrics"][2].splitlines()
                  if line.startswith("kmon_poll_errors_total "))
    assert float(errors.split()[1]) >= 1, errors
    stderr = capsys.readouterr().err
    assert stderr.count("kmon serve: poll failed: ") == 1, stderr  # told once, not every poll
    assert "kmon serve: stopped (SIGTERM)" in stderr, stderr


def test_a_poll_that_cannot_be_folded_or_rendered_is_counted_and_serve_goes_on(
        monkeypatch, capsys):
    """One poll's fold into the metrics and one render fail (fakes: since kmon's text door,
    no real process makes them fail, and the defence must hold for the next surprise);
    serve counts both, says each once and keeps polling and answering."""
    good_update, good_prepare = HostMetrics.update, Exposition.prepare
    failed: set[str] = set()

    def update(metrics, *args, **kwargs):
        if "update" not in failed:
            failed.add("update")
            raise UnicodeEncodeError("utf-8", "\udcff", 0, 1, "surrogates not allowed")
        return good_update(metrics, *args, **kwargs)

    def prepare(exposition):
        if "prepare" not in failed and exposition._last_asked is not None:
            failed.add("prepare")
            raise ValueError("a render that failed")
        return good_prepare(exposition)

    monkeypatch.setattr(HostMetrics, "update", update)
    monkeypatch.setattr(Exposition, "prepare", prepare)
    address = f"http://127.0.0.1:{free_port()}"
    answers: dict[str, str] = {}
    ended = threading.Event()  # main returned (or raised): no SIGTERM for pytest itself

    def errors() -> float | None:
        try:
            text = get(f"{address}/metrics")[2]
        except urllib.error.URLError:  # not listening yet
            return None
        return float(next(line.split()[1] for line in text.splitlines()
                          if line.startswith("kmon_poll_errors_total ")))

    def probe() -> None:
        try:
            wait_for(lambda: (errors() or 0) >= 2, "both failures counted")
            answers["health"] = wait_for(lambda: (h := get(f"{address}/healthz"))[0] == 200
                                         and h[2].startswith("last poll") and h[2],
                                         "healthy again after them")
        finally:
            if not ended.is_set():
                os.kill(os.getpid(), signal.SIGTERM)

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    try:
        code = main(["serve", "--listen", address.removeprefix("http://"), "--interval",
                     "100ms", "--wire", "off", "--duration", "120s"])
    finally:
        ended.set()
    prober.join(10)
    assert code == 0
    assert answers["health"].startswith("last poll"), answers
    stderr = capsys.readouterr().err
    assert "kmon serve: poll failed: " in stderr and "metrics not rendered: " in stderr, stderr
    assert "kmon serve: stopped (SIGTERM)" in stderr, stderr


def test_serve_settles_the_heap_as_the_host_view_does():
    """A poll makes and drops a row per socket: with Python's default collector, young
    collections ran every few hundred objects and full ones walked the whole heap (at 50
    processes x 100 connections, 0.4% of a core of serve's 5-6%). ``kmon serve`` settles the
    heap before its loop, as the host view, ``kmon record`` and the text view do."""
    thresholds = gc.get_threshold()
    try:
        code = main(["serve", "--listen", f"127.0.0.1:{free_port()}", "--interval", "100ms",
                     "--wire", "off", "--duration", "1s"])
        settled = gc.get_threshold()[0], gc.get_freeze_count()
    finally:  # give pytest its own collector back
        gc.unfreeze()
        gc.set_threshold(*thresholds)
    assert code == 0
    assert settled[0] == YOUNG_THRESHOLD and settled[1] > 0, settled
