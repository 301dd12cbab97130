"""The ``?`` screen: the keys the screen it was opened from binds, then that screen's notes."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Markdown

from kmon.widgets.timeline import LEGEND

CONNECTION_NOTES = f"""
## Filter

`role:coordinator state:CLOSE_WAIT broker:1 node:-1 client:orders-reader-a pid:1234`,
and bare words matched anywhere in the address, broker name and client. A field's
value is matched whole (`broker:2` is broker 2, or `broker:HOST:PORT` the broker at
that address; `client:` a whole client id or instance name); a role or state may be
shortened (`role:coord`). Terms on one field are alternatives (`role:boot
role:coord`); different fields must all hold.

## Rows

Where the terminal is narrow, the columns of least use are left out (the client,
the address, the rates, rtt, evidence, in that order); `enter` shows every field.

**role**: bootstrap (node id -1, -2, …), coordinator (node id 2147483647 - broker id,
shown as `coord→3` beside it), broker (node id = broker id), unknown (a socket kmon
could not explain).
**idle / limit**: time since the last byte either way, against the idle limit that
will reap it (`connections.max.idle.ms` of the client, else of the broker), with a
bar that turns yellow past the warning threshold. **rtt**: the client's request
round trip; `poll` marks a fetch connection's, which is the broker's long-poll wait,
not the network; `tcp` marks the kernel's smoothed TCP round trip.
**evidence**: where the role came from (stats = the client's metrics, thread = the
librdkafka broker thread polling the socket, inferred =
cluster metadata) and how sure kmon is of the socket pairing (`conf`).

## Timeline

{LEGEND}
"""

PROCESS_NOTES = """
## Filter

Words matched against each process's pid, command, client ids and cluster; every
word must match.

## Rows

One row per Kafka client process: its longest idle connection, its connections by
role, how many sit in CLOSE_WAIT, connections opened and closed in the last minute and
its churn pattern. `enter` attaches to it; `escape` or `q` there comes back here.
"""


MOVING = """
## Moving

`up`/`down` or `k`/`j` move the cursor a row, `g`/`G` (or `home`/`end`) to the first or
last row, `pageup`/`pagedown` a page. `<` and `>` sort by the column left or right of
the one the rows are sorted by (its heading is marked ▲ or ▼). Keys of least use are
left out of the footer where it is narrow; this help lists them all.
"""


def key_rows(screen: Screen) -> list[tuple[str, str]]:
    """(keys, what they do) of every binding in ``screen``'s BINDINGS that it shows and may
    use now, then the app's on keys the screen leaves free: one row per action, its keys
    joined with " / "."""
    rows: dict[tuple[int, str], tuple[list[str], str]] = {}
    app, taken = screen.app, set()
    for node in (screen, app):
        bound = set()
        for binding in Binding.make_bindings(type(node).BINDINGS):
            if (not binding.show or binding.key in taken
                    or node.check_action(binding.action, ()) is False):
                continue
            bound.add(binding.key)
            keys, _ = rows.setdefault((id(node), binding.action),
                                      ([], binding.tooltip or binding.description))
            keys.append(app.get_key_display(binding))
        taken |= bound
    return [(" / ".join(keys), what) for keys, what in rows.values()]


def help_markdown(rows: list[tuple[str, str]], notes: str) -> str:
    """The help as Markdown: a table of ``rows`` (key_rows), then ``notes``."""
    table = "\n".join(f"| `{keys}` | {what} |" for keys, what in rows)
    return (f"# kmon keys\n\n| key | what it does |\n|---|---|\n{table}\n\n{MOVING}\n"
            f"{notes}")


class HelpScreen(ModalScreen):
    """The keys of the screen it was opened from, and its notes."""

    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen VerticalScroll { width: 80%; height: 90%; border: thick $accent;
                                background: $surface; }
    """

    def __init__(self, rows: list[tuple[str, str]], notes: str = "") -> None:
        super().__init__()
        self.rows, self.notes = rows, notes

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Markdown(help_markdown(self.rows, self.notes))
