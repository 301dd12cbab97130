"""The Textual application that hosts kmon's screens."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import App
from textual.binding import Binding
from textual.filter import LineFilter
from textual.screen import Screen

from kmon.widgets.controls import ControlCharacterFilter

CONTROL_CHARACTERS = ControlCharacterFilter()


class KmonApp(App):
    """Runs one starting screen (attach or watch); ``q`` quits from anywhere."""

    CSS_PATH = "kmon.tcss"
    TITLE = "kmon"
    # the screens' classes by terminal size: kmon.tcss folds panels by priority on them
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (28, "-medium"), (40, "-tall")]
    BINDINGS = [Binding("q", "quit", "quit"),
                Binding("ctrl+c", "quit", "quit", show=False, priority=True)]

    def __init__(self, first_screen: Screen, theme: str | None = None,
                 exit_after_s: float | None = None) -> None:
        super().__init__()
        self.first_screen = first_screen
        self.exit_after_s = exit_after_s
        if theme:
            self.theme = theme

    def get_line_filters(self) -> Sequence[LineFilter]:
        """Textual's filters, then the one that keeps control characters a watched process
        put in its strings from reaching the terminal."""
        return [*super().get_line_filters(), CONTROL_CHARACTERS]

    def on_mount(self) -> None:
        self.push_screen(self.first_screen)
        if self.exit_after_s is not None:
            self.set_timer(self.exit_after_s, self.exit)
