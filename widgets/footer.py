"""The footer of kmon's screens: its keys in order of priority, as many as fit the width, each
named for what it does now (``p resume`` while paused)."""

from __future__ import annotations

from rich.cells import cell_len
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

FIRST = ("quit", "back", "help")  # shown before any other key, whatever the width
KEY_PADDING = 3  # a FooterKey's cells besides its key and description: a space, a side each


def footer_label(screen: object, binding: Binding) -> str:
    """What ``binding`` (or its group) does now on ``screen``: the screen's ``key_label``
    where it has one."""
    description = binding.group.description if binding.group else binding.description
    label = getattr(screen, "key_label", None)
    return label(binding.action, description) if label else description


def ranked(bindings: list[tuple[Binding, bool, str]]) -> list[tuple[Binding, bool, str]]:
    """One entry per action (per group, for the bindings of a ``Binding.Group``),
    ``FIRST``'s actions first, the others in the screen's order."""
    by_action: dict[object, tuple[Binding, bool, str]] = {}
    for entry in bindings:
        by_action.setdefault(entry[0].group or entry[0].action, entry)
    return sorted(by_action.values(),
                  key=lambda e: FIRST.index(e[0].action) if e[0].action in FIRST else len(FIRST))


def key_display(app, binding: Binding, bindings: list[Binding]) -> str:
    """The keys of ``binding`` as the footer shows them: with those of its group (``< >``)."""
    if binding.group is None:
        return app.get_key_display(binding)
    return " ".join(app.get_key_display(b) for b in bindings if b.group == binding.group)


def fitting(widths: list[int], room: int) -> int:
    """How many of the keys (``widths`` in order of priority) fit in ``room`` cells."""
    used = 0
    for count, width in enumerate(widths):
        used += width
        if used > room:
            return count
    return len(widths)


class PriorityFooter(Footer):
    """Footer that leaves off the keys of least priority (and the palette's) where the width
    is short, so ``q`` and ``?`` always show; ``?`` lists every key."""

    def compose(self) -> ComposeResult:
        if not self._bindings_ready:
            return
        active = self.screen.active_bindings
        bindings = [(b, enabled, tip) for _, b, enabled, tip in active.values() if b.show]
        entries = ranked(bindings)
        labels = [footer_label(self.screen, b) for b, _, _ in entries]
        every = [binding for binding, _, _ in bindings]
        keys = [key_display(self.app, b, every) for b, _, _ in entries]
        widths = [cell_len(key) + cell_len(label) + KEY_PADDING
                  for key, label in zip(keys, labels, strict=True)]
        room = self.size.width or self.app.size.width
        shown = fitting(widths, room)
        palette = active.get(self.app.COMMAND_PALETTE_BINDING)
        with_palette = (shown == len(entries) and palette is not None
                        and self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE
                        and sum(widths) + 14 <= room)  # "▏^p palette " and its border
        self.styles.grid_size_columns = shown
        for (binding, enabled, tooltip), key, label in list(
                zip(entries, keys, labels, strict=True))[:shown]:
            yield FooterKey(binding.key, key, label, binding.action, disabled=not enabled,
                            tooltip=tooltip).data_bind(compact=Footer.compact)
        if with_palette:
            _, binding, enabled, tooltip = palette
            yield FooterKey(binding.key, self.app.get_key_display(binding), binding.description,
                            binding.action, classes="-command-palette", disabled=not enabled,
                            tooltip=tooltip or binding.description)

    def on_resize(self, event: events.Resize) -> None:
        if self._bindings_ready:
            self.call_after_refresh(self.recompose)
