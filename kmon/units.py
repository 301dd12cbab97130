"""Values as users type them on the command line.

Durations (``500ms``, ``1s``, ``1m30s``, ``10m``, ``2h``, ``7d``), PIDs, counts and
``key=value`` client properties.
"""

from __future__ import annotations

import argparse
import re

from kmon.files import read_bounded

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?|\.[0-9]+)(ms|s|m|h|d)")
_WHOLE = re.compile(rf"^(?:{_PART.pattern})+$")
DURATION_FORMS = "500ms, 5s, 1m30s, 10m, 2h or 7d"


def parse_duration(text: str) -> float:
    """Seconds in ``text``: numbers each with a unit (``ms s m h d``), summed (``1m30s``).

    A bare number is an error (it was once read as seconds); so is zero.
    """
    compact = text.strip()
    if not _WHOLE.match(compact):
        why = "has no unit" if re.fullmatch(r"[0-9]*\.?[0-9]+", compact) else "is not a duration"
        raise ValueError(f"{text!r} {why}; write a duration such as {DURATION_FORMS}")
    seconds = sum(float(number) * _UNITS[unit] for number, unit in _PART.findall(compact))
    if seconds <= 0:
        raise ValueError(f"{text!r} must be more than zero")
    return seconds


MAX_DURATION_S = 366 * 24 * 3600.0  # a year: beyond it, timers and sleeps overflow
MIN_INTERVAL_S, MAX_INTERVAL_S = 0.01, 3600.0
MAX_INT_ARG = 2**31 - 1


def duration_arg(text: str) -> float:
    """``parse_duration`` for argparse, at most a year: a bad duration is a usage error."""
    try:
        seconds = parse_duration(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err
    if seconds > MAX_DURATION_S:
        raise argparse.ArgumentTypeError(f"{text!r} is longer than a year")
    return seconds


def duration_ms_arg(text: str) -> int:
    """``duration_arg`` in whole milliseconds (at least 1)."""
    return max(1, round(duration_arg(text) * 1000))


def interval_arg(text: str) -> float:
    """A refresh interval for argparse: 10 ms to 1 h."""
    seconds = duration_arg(text)
    if not MIN_INTERVAL_S <= seconds <= MAX_INTERVAL_S:
        raise argparse.ArgumentTypeError(f"{text!r} is not an interval between 10ms and 1h")
    return seconds


def positive_int_arg(text: str) -> int:
    """A whole number from 1 to 2^31 - 1 in ASCII digits, for argparse."""
    value = int(text) if text.isascii() and text.isdigit() else 0
    if not 0 < value <= MAX_INT_ARG:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1 to "
                                         f"{MAX_INT_ARG}")
    return value


MAX_PID = 1 << 22  # the kernel's largest pid_max


def pid_arg(text: str) -> int:
    """A process id, for argparse."""
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) <= MAX_PID:
        raise argparse.ArgumentTypeError(f"{text!r} is not a process id")
    return int(text)


MAX_VALUE_FILE_BYTES = 64 * 1024


def property_arg(text: str) -> tuple[str, str]:
    """A ``key=value`` client property, for argparse; ``key=@FILE`` reads the value from FILE
    (a regular file of at most 64 KiB, trailing newline dropped), so that no secret needs to
    stand on kmon's own command line, where ``ps`` shows it."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not key=value")
    if value.startswith("@"):
        value = _value_file(key.strip(), value[1:])
    return key.strip(), value


def _value_file(key: str, path: str) -> str:
    try:
        raw = read_bounded(path, MAX_VALUE_FILE_BYTES, f"{key}=@")
    except OSError as err:
        raise argparse.ArgumentTypeError(str(err)) from err
    try:
        return raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as err:
        raise argparse.ArgumentTypeError(f"{key}=@{path}: not UTF-8 text") from err
