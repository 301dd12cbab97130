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
            if data != spark.data:  # a redraw only for what changed
                spark.data = data
            label = f"{name[:12]:<12} {current:>4}"
            if label != self._labels.get(name):
                self._labels[name] = label
                self.query_one(f"#label-{kind}-{name}", Label).update(label)
