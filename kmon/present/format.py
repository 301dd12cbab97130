"""How kmon writes numbers, durations, roles and states on screen."""

from __future__ import annotations

import time
from functools import lru_cache

from rich.text import Text

from kmon.model import Finding, ProcessView
from kmon.tcp_state import TcpState
from kmon.units import format_duration as duration  # the one format, for every screen

ROLE_STYLE = {"bootstrap": "yellow", "coordinator": "magenta", "broker": "green",
              "unknown": "dim"}
STATE_STYLE: dict[str, str] = {TcpState.ESTABLISHED: "", TcpState.CLOSE_WAIT: "bold white on red",
               TcpState.SYN_SENT: "bold yellow"}
BAR_WIDTH = 3


def number(value: int | float | None) -> str:
    return "?" if value is None else f"{value:,}"


def node(value: int | None) -> str:
    return "?" if value is None else str(value)


def node_and_broker(node_id: int | None, broker_id: int | None, is_coordinator: bool) -> Text:
    """``2147483644 coord→3``: the node id, and the broker behind it where that is not the
    node id itself (a coordinator's, a bootstrap address's)."""
    if broker_id is None or broker_id == node_id:
        return styled(node(node_id), "")
    text = Text(f"{node(node_id)} ")
    text.append(f"{'coord' if is_coordinator else ''}→{broker_id}",
                style=ROLE_STYLE["coordinator"] if is_coordinator else "dim")
    return text


def round_trip(rtt_ms: float | None, tcp_rtt_ms: float | None, long_poll: bool) -> Text:
    """The client's request round trip, marked ``poll`` where it is a fetch's long-poll wait
    (not the network); else the kernel's TCP round trip, marked ``tcp``; ``?`` when neither."""
    if rtt_ms is None and tcp_rtt_ms is None:
        return styled("?", "dim")
    value, source = ((rtt_ms, " poll" if long_poll else "") if rtt_ms is not None
                     else (tcp_rtt_ms, " tcp"))
    assert value is not None  # one of the two is known
    text = Text(f"{value:.1f} ms" if value < 100 else duration(value))
    text.append(source, style="dim")
    return text


def clock(ts_ms: int) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts_ms / 1000))


def size(value: float | None) -> str:
    """Bytes in short binary units: ``512B``, ``1.5K``, ``3.2M``."""
    if value is None:
        return "?"
    for unit in ("B", "K", "M", "G"):
        if value < 1024 or unit == "G":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return ""  # not reached


def rate(per_second: float | None) -> str:
    """A per-second rate in short units; blank when nothing moved."""
    if per_second is None:
        return "?"
    return "" if per_second == 0 else f"{size(per_second)}/s"


@lru_cache(maxsize=4096)
def styled(value: str, style: str) -> Text:
    """One shared Text per (text, style): equal cells are the same object, cheap to compare.

    Callers must not modify the Text they get.
    """
    return Text(value, style=style)


def role(value: str) -> Text:
    return styled(value, ROLE_STYLE.get(value, ""))


def state(value: str, alert: bool = False) -> Text:
    style = STATE_STYLE.get(value, "dim")
    return styled(value, "bold white on red blink" if alert else style)


def idle_bar(idle_ms: int | None, limit_ms: int | None, warning: float) -> Text:
    """``▆▆·· 44 s / 10 m``: idle age and the limit that will reap it, with a bar filled to
    its share of the limit: green below ``warning`` of it, yellow above, red in the last 5%.
    """
    if idle_ms is None:
        return styled(f"{'·' * BAR_WIDTH} ?", "dim")
    label = duration(idle_ms)
    if not limit_ms:
        return styled(f"{'·' * BAR_WIDTH} {label}", "dim")
    label = f"{label} / {duration(limit_ms)}"
    share = min(1.0, idle_ms / limit_ms)
    style = "red" if share >= 0.95 else "yellow" if share >= warning else "green"
    return _bar(round(share * BAR_WIDTH), style, label)


@lru_cache(maxsize=4096)
def _bar(filled: int, style: str, label: str) -> Text:
    bar = Text("█" * filled, style=style)
    bar.append("·" * (BAR_WIDTH - filled), style="dim")
    bar.append(f" {label}")
    return bar



def finding_line(finding: Finding, pid: int | None = None) -> str:
    """A finding in one line, since when (and of ``pid`` where more than one process is
    shown); process-controlled text, for ``plain``."""
    who = f"pid {pid} · " if pid is not None else ""
    return f"{who}since {clock(finding.since_ms)} · {finding.words()}"


def finding_lines(views: list[ProcessView], with_pid: bool) -> tuple[str, ...]:
    """The findings of ``views`` in lines, newest first (each of its pid when ``with_pid``)."""
    found = sorted(((f, v.pid) for v in views for f in v.findings),
                   key=lambda fp: (-fp[0].since_ms, fp[1]))
    return tuple(finding_line(f, pid if with_pid else None) for f, pid in found)
