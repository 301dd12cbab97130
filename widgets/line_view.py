"""A scroll view drawn line by line that draws again only the lines whose content changed."""

from __future__ import annotations

from collections.abc import Mapping

from textual.geometry import Region
from textual.scroll_view import ScrollView


class ChangedLinesView(ScrollView):
    """Remembers what each visible line showed when it was last drawn (``drawn``), and
    ``refresh_changed`` marks dirty only the lines whose content is now different: a refresh
    of thousands of rows, most of them unchanged, redraws only what moved."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._drawn: dict[int, object] = {}  # line y -> its content, as drawn last

    def drawn(self, y: int, content: object) -> object:
        """Note that line ``y`` is being drawn with ``content``; returns ``content``."""
        self._drawn[y] = content
        return content

    def refresh_changed(self, contents: Mapping[int, object]) -> None:
        """Draw again the lines of ``contents`` (line y -> its content now) that differ from
        what was drawn there."""
        drawn = self._drawn
        changed = sorted(y for y, content in contents.items() if content != drawn.get(y))
        if not changed:
            return
        width, runs = self.size.width, []  # runs of adjacent lines: (first line, count)
        for y in changed:
            if runs and runs[-1][0] + runs[-1][1] == y:
                runs[-1][1] += 1
            else:
                runs.append([y, 1])
        self.refresh(*(Region(0, y, width, count) for y, count in runs))
