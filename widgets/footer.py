"""The footer of kmon's screens: its keys in order of priority, as many as fit the width, each
named for what it does now (``p resume`` while paused)."""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Footer

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


class FooterKey(Widget):
    """One key of the footer: the key, what it does, and a click presses it. Textual's own
    is not public, so kmon draws its own, drawn as that one is and named alike, so that
    Footer's styles for its keys apply."""

    ALLOW_SELECT = False
    COMPONENT_CLASSES = {"footer-key--key", "footer-key--description"}
    DEFAULT_CSS = """
    FooterKey {
        width: auto;
        height: 1;
        text-wrap: nowrap;
        background: $footer-item-background;
        .footer-key--key {
            color: $footer-key-foreground;
            background: $footer-key-background;
            text-style: bold;
            padding: 0 1;
        }
        .footer-key--description {
            padding: 0 1 0 0;
            color: $footer-description-foreground;
            background: $footer-description-background;
        }
        &:hover {
            pointer: pointer;
            color: $footer-key-foreground;
            background: $block-hover-background;
        }
        &.-disabled { text-style: dim; }
        &.-compact {
            .footer-key--key { padding: 0; }
            .footer-key--description { padding: 0 0 0 1; }
        }
    }
    """

    compact = reactive(True)

    def __init__(self, key: str, key_display: str, description: str, disabled: bool = False,
                 tooltip: str = "", classes: str = "") -> None:
        super().__init__(classes=classes + (" -disabled" if disabled else ""))
        self.key, self.key_display, self.description = key, key_display, description
        self.unavailable = disabled
        self.set_reactive(Widget.shrink, False)
        if tooltip:
            self.tooltip = tooltip

    def render(self) -> Text:
        key_padding = self.get_component_styles("footer-key--key").padding
        padding = self.get_component_styles("footer-key--description").padding
        text = Text.assemble(
            (" " * key_padding.left + self.key_display + " " * key_padding.right,
             self.get_component_rich_style("footer-key--key")),
            (" " * padding.left + self.description + " " * padding.right,
             self.get_component_rich_style("footer-key--description")))
        text.stylize_before(self.rich_style)
        return text

    def on_mouse_down(self) -> None:
        if self.unavailable:
            self.app.bell()
        else:
            self.app.simulate_key(self.key)

    def watch_compact(self, compact: bool) -> None:
        self.set_class(compact, "-compact")


class PriorityFooter(Footer):
    """Footer that leaves off the keys of least priority (and the palette's) where the width
    is short, so ``q`` and ``?`` always show; ``?`` lists every key."""

    ready = False  # the screen's bindings are known (``bindings_changed``)

    def bindings_changed(self, screen) -> None:
        self.ready = True
        super().bindings_changed(screen)

    def compose(self) -> ComposeResult:
        if not self.ready:
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
            yield FooterKey(binding.key, key, label, disabled=not enabled,
                            tooltip=tooltip).data_bind(compact=Footer.compact)
        if with_palette:
            _, binding, enabled, tooltip = palette
            yield FooterKey(binding.key, self.app.get_key_display(binding), binding.description,
                            classes="-command-palette", disabled=not enabled,
                            tooltip=tooltip or binding.description)

    def on_resize(self, event: events.Resize) -> None:
        if self.ready:
            self.call_after_refresh(self.recompose)
