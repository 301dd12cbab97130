"""The ground every support module stands on: the test tree's paths, waits on a condition
with a hang guard, names no other test uses."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

__all__ = ["TESTS", "REPO", "wait_for", "unique"]

TESTS = Path(__file__).parents[1]
REPO = TESTS.parent
T = TypeVar("T")


def wait_for(condition: Callable[[], T], what: str, seconds: float = 60,
             every: float = 0.05) -> T:
    """``condition()``'s first truthy value, asked every ``every`` s; fails the test naming
    ``what`` after ``seconds`` (a hang guard, not a pace)."""
    deadline = time.monotonic() + seconds
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"never within {seconds:g} s: {what}")
        time.sleep(every)


def unique(prefix: str) -> str:
    """A name no other test (or run) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
