"""Text that others chose reaches the terminal as the plain characters it is.

A watched process writes much of what kmon shows: its name and command line, its
client ids and names, the brokers its metrics name; recordings, brokers and other
users' files carry more. Two things keep such a string from acting on the terminal:

* It reaches Rich and Textual as ``plain(...)`` (a ``Text``), never as a ``str`` they
  would read as markup: ``[@click=...]`` would be a clickable action, ``[link=...]`` a
  hyperlink, and a stray ``[/x]`` a crash.
* Every line kmon draws has its C0 and C1 control characters and bidirectional
  overrides removed, newlines aside (the dashboard through a Textual line filter built
  on ``strip_controls``, printed tables through ``WithoutControls``, stderr lines
  through ``one_line``): an escape sequence would clear the screen, recolour it or
  set the window title, an override reorder what is shown.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.segment import Segment
from rich.text import Text

# bidirectional marks, embeddings, overrides and isolates: they reorder what follows
_BIDI_CODES = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
# every C0 and C1 control but the newline, which ends a printed line, and the bidi codes
CONTROL_CODES = (*range(0x0A), *range(0x0B, 0x20), *range(0x7F, 0xA0), *_BIDI_CODES)
_CONTROLS = dict.fromkeys(CONTROL_CODES)  # str.translate: delete them
_HAS_CONTROL = re.compile(f"[{re.escape(''.join(map(chr, CONTROL_CODES)))}]").search
_NEWLINES = re.compile(r"\s*\n\s*")


def plain(value: object, style: str = "") -> Text:
    """``value`` as Rich text that is never read as markup: what another party chose
    (a process name, a client id, a broker's address, a file name) shows as the
    characters it is."""
    return Text(str(value), style=style)


def one_line(value: object) -> str:
    """``value`` as one printable line: control characters and bidi overrides removed,
    line breaks made spaces (for stderr, where no line filter runs)."""
    return _NEWLINES.sub(" ", str(value)).translate(_CONTROLS)


def visible(value: str) -> str:
    """``value`` with its control characters and bidi codes spelled out (``\\x1b``,
    ``\\u202e``): for text other programs read that a terminal may show (``/metrics``),
    where removing them would make two values one."""
    if not _HAS_CONTROL(value):
        return value
    return "".join(c if ord(c) not in _CONTROLS else f"\\x{ord(c):02x}" if ord(c) < 0x100
                   else f"\\u{ord(c):04x}" for c in value)


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
