"""One of a thing for a whole test run, shared by pytest-xdist's workers through files in a
directory they all see (the run's base temporary directory): the first worker that needs it
makes it under a lock and saves, as JSON, what the others need to use it."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["made_once", "acquire", "release"]

T = TypeVar("T")
LAST_USER_WAIT_S = 1200.0  # a starter waits this long at most for the others to be done


def made_once(directory: Path, name: str, make: Callable[[], Any]) -> Any:
    """What ``make()`` returned (JSON) in the first worker that asked: made there, read by
    the others."""
    with _locked(directory, name):
        saved = directory / f"{name}.json"
        if saved.exists():
            return json.loads(saved.read_text())
        value = make()
        saved.write_text(json.dumps(value))
        return value


def acquire(directory: Path, name: str, start: Callable[[], T], save: Callable[[T], dict],
            attach: Callable[[dict], T]) -> tuple[T, bool]:
    """The run's ``name`` and whether this worker started it: started here when no living
    worker has (``save`` says what the others ``attach`` with), attached to otherwise. This
    worker uses it until its ``release``."""
    with _locked(directory, name):
        state = directory / f"{name}.json"
        saved = json.loads(state.read_text()) if state.exists() else None
        if saved is not None and _alive(saved["starter"]):
            value, started = attach(saved["state"]), False
        else:
            value, started = start(), True
            state.write_text(json.dumps({"starter": os.getpid(), "state": save(value)}))
        users = directory / f"{name}.users"
        users.mkdir(exist_ok=True)
        (users / str(os.getpid())).touch()
    return value, started


def release(directory: Path, name: str, started: bool,
            wait_s: float = LAST_USER_WAIT_S) -> None:
    """This worker is done with ``name``. Its starter returns once every other living user
    is done too (or after ``wait_s``), its state removed: it may stop it then, and a worker
    that needs it later starts its own."""
    deadline = time.monotonic() + wait_s
    users = directory / f"{name}.users"
    while True:
        with _locked(directory, name):
            (users / str(os.getpid())).unlink(missing_ok=True)
            if not started:
                return
            if not any(_alive(int(user.name)) for user in users.iterdir()) \
                    or time.monotonic() > deadline:
                (directory / f"{name}.json").unlink(missing_ok=True)
                return
        time.sleep(0.5)


@contextlib.contextmanager
def _locked(directory: Path, name: str) -> Iterator[None]:
    with open(directory / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed and not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"
