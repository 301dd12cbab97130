"""Values as users type them on the command line, and durations as kmon writes them.

Durations (``500ms``, ``1s``, ``1m30s``, ``10m``, ``2h``, ``7d``), PIDs, counts and
``key=value`` client properties; ``format_duration`` is the one way every screen,
table and event writes a duration.
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


_MINUTE_MS, _HOUR_MS, _DAY_MS = 60_000, 3_600_000, 86_400_000


def format_duration(ms: int | float | None) -> str:
    """``850 ms``, ``4.6 s``, ``44 s``, ``9 m 59 s``, ``10 m``, ``1 h 2 m``, ``3 d 4 h``;
    ``?`` when unknown. Past ten seconds, whole units (rounded down: an idle age is never
    said to be longer than it is) and at most two of them."""
    if ms is None:
        return "?"
    if ms < 0:
        return "-" + format_duration(-ms)
    if ms < 999.5:  # else it would round to "1000 ms"
        return f"{ms:.0f} ms"
    if ms < 10_000:
        return f"{ms / 1000:.1f}".removesuffix(".0") + " s"
    whole = int(ms)
    for unit_ms, unit, smaller_ms, smaller in ((_DAY_MS, "d", _HOUR_MS, "h"),
                                               (_HOUR_MS, "h", _MINUTE_MS, "m"),
                                               (_MINUTE_MS, "m", 1000, "s")):
        if whole >= unit_ms:
            rest = whole % unit_ms // smaller_ms
            return f"{whole // unit_ms} {unit}" + (f" {rest} {smaller}" if rest else "")
    return f"{whole // 1000} s"


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


_SIZE_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
               "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40}


def size_arg(text: str) -> int:
    """A size in bytes for argparse: '2GB', '500MiB', '1048576'."""
    number = text.strip().rstrip("BbIiKkMmGgTt")
    unit = text.strip()[len(number):].upper()
    try:
        value = float(number) * _SIZE_UNITS[unit]
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size, e.g. 2GB or 500MiB") from None
    if not 0 < value < 1 << 60:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size between 1 byte and 1 EiB")
    return int(value)
