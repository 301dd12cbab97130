"""Sparklines of connection counts over time, by role and by TCP state."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Label, Sparkline

from kmon.timeline import History

SERIES = (("role", "bootstrap"), ("role", "coordinator"), ("role", "broker"),
          ("role", "unknown"), ("state", "ESTABLISHED"), ("state", "CLOSE_WAIT"),
          ("state", "other"))


class CountSparklines(Vertical):
    """One labelled sparkline per role and per state, with the current count."""

    DEFAULT_CSS = """
    CountSparklines { height: auto; }
    CountSparklines Horizontal { height: 1; }
    CountSparklines Label { width: 18; }
    CountSparklines Sparkline { width: 1fr; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._labels: dict[str, str] = {}

    def compose(self) -> ComposeResult:
        for kind, name in SERIES:
            with Horizontal():
                yield Label(name, id=f"label-{kind}-{name}")
                yield Sparkline([], id=f"spark-{kind}-{name}")

    def show(self, history: History) -> None:
        for kind, name in SERIES:
            series = history.by_role[name] if kind == "role" else history.by_state[name]
            current = series[-1] if series else 0
            spark = self.query_one(f"#spark-{kind}-{name}", Sparkline)
            width = max(1, spark.size.width)
            data = list(series)[-width:]
            # a redraw only for what changed (a flat line looks the same at any value and length)
            if data != spark.data and not (_flat(data) and _flat(spark.data)):
                spark.data = data
            label = f"{name[:12]:<12} {current:>4}"
            if label != self._labels.get(name):
                self._labels[name] = label
                self.query_one(f"#label-{kind}-{name}", Label).update(label)


def _flat(data: list[int] | None) -> bool:
    """A flat line: two values or more, all equal (a single value draws full bars)."""
    return data is not None and len(data) >= 2 and min(data) == max(data)
