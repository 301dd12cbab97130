"""The status header, the notice bar and the findings bar every screen shows at its top, fed
by ``data_bind``."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from kmon.present import format as fmt
from kmon.present.plain_text import one_line, plain


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
        # a new layout only when the header's height may change: its count of lines, or the
        # length of its last (which may wrap)
        self.refresh(layout=new.plain.count("\n") != old.plain.count("\n")
                     or len(new.plain) - new.plain.rfind("\n")
                     != len(old.plain) - old.plain.rfind("\n"))

    def render(self) -> Text:
        # every line of the heading but its last on one line, cut to the width: a short
        # terminal keeps its rows for the tables; the last line, with the state, may wrap
        *whole, last = self.heading.split("\n", allow_blank=True)
        width = max(1, self.content_size.width)
        text = Text()
        for line in whole:
            line.truncate(width, overflow="ellipsis")
            text.append_text(line)
            text.append("\n")
        text.append_text(last)
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


class FindingsBar(Widget):
    """The findings (kmon.evidence.findings) of the processes shown, newest first, each with
    what to change, one ``▲ line`` each; hidden when there is none, a few lines at most on a
    short terminal (the style sheet's -short)."""

    DEFAULT_CSS = """
    FindingsBar { display: none; height: auto; max-height: 6; padding: 0 1;
                  background: $warning 20%; color: $text; }
    FindingsBar.shown { display: block; }
    """

    lines: reactive[tuple[str, ...]] = reactive(tuple, layout=True)

    def watch_lines(self, lines: tuple[str, ...]) -> None:
        self.set_class(bool(lines), "shown")

    def render(self) -> Text:
        return plain("\n".join(f"▲ {one_line(line)}" for line in self.lines))
