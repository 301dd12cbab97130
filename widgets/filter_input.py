"""The filter line at the bottom of a screen: opened by ``f`` or ``/``, closed by ``escape`` or
by an ``enter`` the screen accepts."""

from __future__ import annotations

from textual.binding import Binding
from textual.widget import Widget
from textual.widgets import Input


class FilterInput(Input):
    """An Input that gives the focus back to ``return_to`` when it closes."""

    BINDINGS = [Binding("escape", "close", "close", show=False)]

    def __init__(self, placeholder: str, **kwargs) -> None:
        super().__init__(placeholder=placeholder, **kwargs)
        self.return_to: Widget | None = None

    def open(self, text: str, return_to: Widget) -> None:
        """Show the line holding ``text``, focused."""
        self.value, self.return_to = text, return_to
        self.add_class("shown")
        self.focus()

    def action_close(self) -> None:
        self.remove_class("shown")
        if self.return_to is not None:
            self.return_to.focus()
