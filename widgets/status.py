"""The status header and the notice bar every screen shows at its top, fed by ``data_bind``."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from kmon.plain_text import plain
from kmon.widgets import format as fmt


class StatusHeader(Widget):
    """What the screen shows (``heading``), how often, whether it is LIVE, PAUSED or ended
    (``ended``, e.g. "EXITED"), and what follows (``trailer``, e.g. a recording)."""

    DEFAULT_CSS = "StatusHeader { height: auto; padding: 0 1; background: $boost; }"

    heading: reactive[Text] = reactive(Text, repaint=False)
    trailer: reactive[Text] = reactive(Text)
    paused: reactive[bool] = reactive(False)
    interval: reactive[float] = reactive(1.0)
    ended: reactive[str] = reactive("")

    def watch_heading(self, old: Text, new: Text) -> None:
        # a new layout only when the header's height may change
        self.refresh(layout=new.plain.count("\n") != old.plain.count("\n"))

    def render(self) -> Text:
        text = self.heading.copy()
        text.append(f"every {fmt.duration(self.interval * 1000)}  ·  ")
        if self.ended:
            text.append(f"■ {self.ended}", style="bold red")
        elif self.paused:
            text.append("❚❚ PAUSED", style="bold yellow")
        else:
            text.append("● LIVE", style="bold green")
        text.append_text(self.trailer)
        return text


class NoticeBar(Widget):
    """What deserves a look now, one ``! line`` each; hidden when there is none, loud in a
    reconnect storm (``storm``)."""

    DEFAULT_CSS = """
    NoticeBar { display: none; height: auto; padding: 0 1; background: $error 25%;
                color: $text; }
    NoticeBar.shown { display: block; }
    NoticeBar.storm { background: $error; text-style: bold; }
    """

    notices: reactive[tuple[str, ...]] = reactive(tuple, layout=True)
    storm: reactive[bool] = reactive(False)

    def watch_notices(self, notices: tuple[str, ...]) -> None:
        self.set_class(bool(notices), "shown")

    def watch_storm(self, storm: bool) -> None:
        self.set_class(storm, "storm")

    def render(self) -> Text:
        return plain("\n".join(f"! {line}" for line in self.notices))
