"""Sparklines of connection counts over time, by role and by TCP state."""

from __future__ import annotations

from rich.segment import Segment
from textual.geometry import Size
from textual.renderables.sparkline import Sparkline
from textual.strip import Strip

from kmon.present.history import History
from kmon.tcp_state import TcpState
from kmon.widgets.line_view import ChangedLinesView

SERIES = (("role", "bootstrap"), ("role", "coordinator"), ("role", "broker"),
          ("role", "unknown"), ("state", TcpState.ESTABLISHED.value),
          ("state", TcpState.CLOSE_WAIT.value),
          ("state", "other"))
LABEL_WIDTH = 18
FLAT = "flat"  # a flat line looks the same at any value and length


class CountSparklines(ChangedLinesView):
    """One line per role and per state: its name, the current count and a sparkline of
    the counts the history remembers (as many as fit, newest on the right).

    One widget draws all seven lines (seven labels and seven sparkline widgets in rows
    cost the compositor every frame), and only a line whose count or curve changed is
    drawn again."""

    DEFAULT_CSS = """
    CountSparklines { height: auto; overflow: hidden; }
    CountSparklines > .count-sparklines--max-color { color: $primary; }
    CountSparklines > .count-sparklines--min-color { color: $primary 30%; }
    """
    COMPONENT_CLASSES = {"count-sparklines--max-color", "count-sparklines--min-color"}

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._lines: list[tuple[str, object]] = [(_label(name, 0), []) for _, name in SERIES]

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(SERIES)

    def show(self, history: History) -> None:
        """Draw the counts ``history`` holds."""
        width = max(1, self.size.width - LABEL_WIDTH)
        lines = []
        for kind, name in SERIES:
            series = history.by_role[name] if kind == "role" else history.by_state[name]
            data = list(series)[-width:]
            curve = FLAT if len(data) >= 2 and min(data) == max(data) else data
            lines.append((_label(name, series[-1] if series else 0), curve))
        self._lines = lines
        self.virtual_size = Size(self.size.width, len(SERIES))
        self.refresh_changed({y: (line, self.size.width) for y, line in enumerate(lines)})

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if y >= len(self._lines):
            return Strip.blank(width, self.rich_style)
        label, curve = self.drawn(y, (self._lines[y], width))[0]
        data = [0, 0] if curve == FLAT else curve
        base = self.background_colors[1]
        colors = [(base + self.get_component_styles(f"count-sparklines--{end}-color").color)
                  .rich_color for end in ("min", "max")]
        spark_width = max(0, width - LABEL_WIDTH)
        segments = [Segment(label, self.rich_style)]
        if spark_width:
            segments.extend(self.app.console.render(
                Sparkline(data, width=spark_width, min_color=colors[0], max_color=colors[1]),
                self.app.console.options.update_width(spark_width)))
        return Strip(Segment.apply_style(segments, self.rich_style)).adjust_cell_length(
            width, self.rich_style)


def _label(name: str, count: int) -> str:
    return f"{name[:12]:<12} {count:>4}".ljust(LABEL_WIDTH)
