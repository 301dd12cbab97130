"""The ``?`` screen: every key and the filter syntax."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

from kmon.widgets.timeline import LEGEND

HELP = f"""
# kmon keys

| key | what it does |
|---|---|
| `p` | pause / resume refreshing |
| `space` | refresh now (while paused: one step) |
| `s` | next sort order (role, idle, reaped in, state, broker, traffic, client) |
| `f` or `/` | filter rows |
| `c` | clear the filter |
| `i` | hide idle rows (no traffic for 10 s) and closing sockets |
| `enter` | details of the selected connection (watch: attach to the selected process) |
| `r` | start / stop recording this session to Parquet |
| `+` / `-` | refresh more / less often |
| `escape` | back (from an attached process to the cluster) |
| `q` | quit |

## Filter

`role:coordinator state:CLOSE_WAIT broker:1 node:-1 client:orders pid:1234`, and
bare words matched against the address, broker name and client. Terms on one
field are alternatives (`role:boot role:coord`); different fields must all hold.

## Rows

**role**: bootstrap (node id -1, -2, …), coordinator (node id 2147483647 - broker id),
broker (node id = broker id), unknown (a socket kmon could not explain).
**idle / limit**: time since the last byte either way, with a bar against the
idle limit that will reap it (`connections.max.idle.ms` of the client, else of
the broker); it turns yellow past the warning threshold. **evidence**: where the
role came from (stats = the client's metrics, inferred = cluster metadata) and
how sure kmon is of the socket pairing.

## Timeline

{LEGEND}
"""


class HelpScreen(ModalScreen):
    """Keys and filter syntax."""

    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen VerticalScroll { width: 80%; height: 90%; border: thick $accent;
                                background: $surface; }
    """

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Markdown(HELP)
