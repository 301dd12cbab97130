"""Picking the sort column with ``<`` and ``>``: the screens' sort orders in their table's
column order."""

from __future__ import annotations

from collections.abc import Sequence

from textual.binding import Binding

SORT_COLUMN = Binding.Group("sort column")  # the footer shows < and > as one: "< > sort column"


def order_by_column(columns: Sequence[str], sorted_by: Sequence[str], current: int,
                    step: int) -> int:
    """The index of the order ``step`` columns right of order ``current`` (left where
    negative), wrapping round; ``sorted_by``: each order's column (one of ``columns``, or ''
    for an order of no column of its own: those come after the columns)."""
    def place(index: int) -> int:
        column = sorted_by[index]
        return columns.index(column) if column in columns else len(columns)

    ranked = sorted(range(len(sorted_by)), key=place)
    return ranked[(ranked.index(current) + step) % len(ranked)]
