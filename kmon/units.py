"""Values as users type them on the command line.

Durations (``500ms``, ``1s``, ``1.5``, ``10m``, ``2h``), PIDs, counts and
``key=value`` client properties.
"""

from __future__ import annotations

import argparse
import re

_UNITS = {"ms": 0.001, "s": 1.0, "": 1.0, "m": 60.0, "h": 3600.0}
_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h|)\s*$")


def parse_duration(text: str) -> float:
    """Seconds in ``text``; a bare number is seconds. Raises ValueError unless > 0."""
    match = _PATTERN.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a duration (e.g. 500ms, 1s, 10m)")
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if seconds <= 0:
        raise ValueError(f"{text!r} must be more than zero")
    return seconds


def duration_arg(text: str) -> float:
    """``parse_duration`` for argparse: a bad duration is a usage error."""
    try:
        return parse_duration(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def positive_int_arg(text: str) -> int:
    """A whole number above zero, for argparse."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number above zero")
    return value


def pid_arg(text: str) -> int:
    """A process id, for argparse."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a process id")
    return int(text)


def property_arg(text: str) -> tuple[str, str]:
    """A ``key=value`` client property, for argparse."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not key=value")
    return key.strip(), value
