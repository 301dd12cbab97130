"""The dashboard's line filter that keeps control characters a watched process put in its
strings (its name, command line, client ids, ...) from reaching the terminal."""

from __future__ import annotations

from rich.segment import Segment
from textual.color import Color
from textual.filter import LineFilter

from kmon.present.plain_text import strip_controls


class ControlCharacterFilter(LineFilter):
    """Every line a widget draws, without control characters (``kmon.present.plain_text``)."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        return strip_controls(segments)
