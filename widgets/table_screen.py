"""What the attach screen and the process-list screens share: one table of rows in a choice
of sort orders, idle rows hideable, and the keys for it in the footer's order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from textual.binding import Binding
from textual.reactive import var

from kmon.widgets.polling import PollingScreen
from kmon.widgets.sorting import SORT_COLUMN, order_by_column


class Order(Protocol):
    """A sort order as the screens name it: its name and the column it sorts by."""

    @property
    def name(self) -> str: ...

    @property
    def column(self) -> str: ...


def table_keys(enter: Binding, rows: str, orders: Sequence[Order], hide_idle: str,
               record: str, back: Sequence[Binding] = ()) -> list[Binding]:
    """A table screen's keys: ``enter`` (what opens the selected row), then filter, sort,
    hide idle and the polling keys; ``rows`` names what the filter filters, ``hide_idle`` and
    ``record`` say what those keys hide and record, ``back`` comes before help."""
    return [
        enter,
        Binding("p", "pause", "pause", tooltip="pause / resume refreshing"),
        Binding("f,slash", "filter", "filter", tooltip=f"filter the {rows}"),
        Binding("s", "sort", "sort", tooltip="next sort order (" + ", ".join(
            o.name for o in orders) + ")"),
        Binding("less_than_sign", "sort_column(-1)", "sort ◀", group=SORT_COLUMN,
                tooltip="sort by the column left of the sorted one"),
        Binding("greater_than_sign", "sort_column(1)", "sort ▶", group=SORT_COLUMN,
                tooltip="sort by the column right of the sorted one"),
        Binding("i", "hide_idle", "hide idle", tooltip=hide_idle),
        Binding("space", "refresh_now", "refresh",
                tooltip="refresh now (while paused: one step)"),
        Binding("c", "clear_filter", "clear filter", tooltip="clear the filter"),
        Binding("r", "record", "record", tooltip=record),
        Binding("plus,equals_sign", "faster", "faster", tooltip="refresh more often"),
        Binding("minus", "slower", "slower", tooltip="refresh less often"),
        *back,
        Binding("question_mark", "help", "help", tooltip="this help"),
    ]


class TableScreen(PollingScreen):
    """A polling screen around one sorted table: subclasses name its sort orders
    (``ORDERS``) and its columns' keys left to right (``COLUMN_KEYS``), and redraw."""

    ORDERS: Sequence[Order] = ()
    COLUMN_KEYS: Sequence[str] = ()

    sort_index: var[int] = var(0, init=False)
    hide_idle: var[bool] = var(False, init=False)

    def watch_sort_index(self) -> None:
        self.redraw()

    def watch_hide_idle(self) -> None:
        self.refresh_bindings()
        self.redraw()

    def action_sort(self) -> None:
        self.sort_index = (self.sort_index + 1) % len(self.ORDERS)

    def action_sort_column(self, step: int) -> None:
        self.sort_index = order_by_column(self.COLUMN_KEYS, [o.column for o in self.ORDERS],
                                          self.sort_index, step)

    def action_hide_idle(self) -> None:
        self.hide_idle = not self.hide_idle
