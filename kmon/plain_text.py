"""Control characters in what kmon shows never reach the terminal.

A watched process writes much of what kmon shows: its name and command line, its
client ids and names, the brokers its metrics name; recordings carry the same
strings. An escape sequence in one of them, printed as it is, would clear the
screen, recolour it or set the window title. Every line kmon draws has its C0 and
C1 control characters removed, newlines aside (the dashboard through a Textual line filter built
on ``strip_controls``, printed tables through ``WithoutControls``): the rest of such
a string stays visible, as the plain text it is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.segment import Segment

# every C0 and C1 control but the newline, which ends a printed line
_CONTROL_CODES = [*range(0x0A), *range(0x0B, 0x20), *range(0x7F, 0xA0)]
_CONTROLS = dict.fromkeys(_CONTROL_CODES)  # str.translate: delete them
_HAS_CONTROL = re.compile(f"[{re.escape(''.join(map(chr, _CONTROL_CODES)))}]").search


def strip_controls(segments: Iterable[Segment]) -> list[Segment]:
    """``segments`` with the control characters taken out of their text (Rich counts them
    zero cells wide, so a line keeps its width). Rich's own control segments (cursor moves)
    are left alone."""
    clean = []
    for segment in segments:
        text, style, control = segment
        if not control and _HAS_CONTROL(text):
            segment = Segment(text.translate(_CONTROLS), style)
        clean.append(segment)
    return clean


class WithoutControls:
    """A Rich renderable drawn without the control characters of its text."""

    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from strip_controls(console.render(self.renderable, options))
