"""The README's key table says what the screens bind: every key it names is bound, every key
a screen shows is in it, and its sort orders are the screens' own, in their order."""

from __future__ import annotations

import re
from pathlib import Path

from textual.binding import Binding

from kmon.widgets.app import KmonApp
from kmon.widgets.attach_screen import AttachScreen
from kmon.widgets.connection_table import SORT_ORDERS
from kmon.widgets.list_screen import ProcessListScreen
from kmon.widgets.process_table import PROCESS_ORDERS

README = Path(__file__).parent.parent / "README.md"
SHOWN_AS = {"question_mark": "?", "slash": "/", "plus": "+", "minus": "-",
            "equals_sign": "=", "space": "space", "enter": "enter", "escape": "escape",
            "less_than_sign": "<", "greater_than_sign": ">"}


def key_table() -> dict[str, list[str]]:
    """The README's key table: each row's keys (as written) -> its cells."""
    text = README.read_text()
    start = text.index("| key | attach screen |")
    rows = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        first, *cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        rows[first] = cells
    return rows


def bound_keys() -> set[str]:
    """The keys the screens and the app bind and show, as the README writes them."""
    bindings = [*AttachScreen.BINDINGS, *ProcessListScreen.BINDINGS, *KmonApp.BINDINGS]
    return {SHOWN_AS.get(b.key, b.key) for b in Binding.make_bindings(bindings) if b.show}


def test_the_readme_names_exactly_the_keys_the_screens_bind():
    named = {key for keys in key_table() for key in re.findall(r"`([^`]+)`", keys)}
    assert named == bound_keys() - {"="}  # "=" is "+" without shift, not worth a row


def test_the_readme_lists_each_screen_s_sort_orders():
    attach, listed = key_table()["`s`"]
    assert attach == "next sort order: " + ", ".join(o.name for o in SORT_ORDERS)
    assert listed == "next sort order: " + ", ".join(o.name for o in PROCESS_ORDERS)
