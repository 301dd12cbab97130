"""Tables that what others send may fill: a bound, and the least recently put dropped first."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


def put(table: dict[K, V], key: K, value: V, bound: int) -> None:
    """``table[key] = value`` as the most recent entry, dropping the oldest beyond ``bound``."""
    table.pop(key, None)
    table[key] = value
    while len(table) > bound:
        del table[next(iter(table))]


def put_all(table: dict[K, V], entries: Mapping[K, V], bound: int) -> None:
    """``put`` every entry of ``entries``, in their order."""
    for key, value in entries.items():
        put(table, key, value, bound)
