"""What ``kmon analyze`` shows and writes: Rich tables, one CSV and one Parquet per
analysis, and charts (PNG and SVG) where a picture reads better. Files are written
into a verified ``kmon.files.OutputDir``: each under a hidden random name, then
renamed over ``NAME.csv`` (a link of that name is replaced, never followed)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from matplotlib import rc_context
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
from matplotlib.figure import Figure
from rich.console import Console
from rich.table import Table
from rich.text import Text

from kmon.analysis.csv_cells import spreadsheet_safe
from kmon.analysis.jobs import total_rows
from kmon.files import OutputDir
from kmon.present.plain_text import WithoutControls, plain

if TYPE_CHECKING:
    from kmon.analysis.jobs import Analysis

IDENTIFIERS = {"pid", "broker_id", "node_id"}  # numbers shown without thousands separators
SIDE_COLOURS = {"client": "tab:blue", "broker": "tab:orange", "unknown": "tab:gray"}
ROLE_COLOURS = {"bootstrap": "tab:orange", "coordinator": "tab:purple", "broker": "tab:blue",
                "unknown": "tab:gray"}


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def _cell(column: str, value) -> Text:
    return plain(_formatted(column, value))  # a recording's strings are no markup


def _formatted(column: str, value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if column.endswith("_ts"):
        return _utc(value).strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, int) and column not in IDENTIFIERS:
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def _close_wait_summary(table: pa.Table) -> str:
    if not table.num_rows:
        return "no connection was seen in CLOSE_WAIT"
    rows = table.to_pylist()
    durations = [r["close_wait_ms"] for r in rows]
    brokers = sorted({r["broker_id"] for r in rows if r["broker_id"] is not None})
    clients = {(r["session_id"], r["host"], r["pid"], r["client"]) for r in rows}
    return (f"{len(rows)} connections of {len(clients)} clients in CLOSE_WAIT for "
            f"{sum(durations) / 1000:,.0f} s in all (longest {max(durations) / 1000:,.0f} s); "
            f"brokers {', '.join(map(str, brokers)) or '-'}")


CAPTIONS: dict[str, Callable[[pa.Table], str]] = {"close_wait": _close_wait_summary}


def renderable(analysis: Analysis, table: pa.Table, top: int) -> Table:
    """The first ``top`` rows of one analysis, with the columns worth a terminal."""
    shown = table.num_rows if top <= 0 else min(top, table.num_rows)
    total = total_rows(table)
    caption = [CAPTIONS[analysis.name](table)] if analysis.name in CAPTIONS else []
    caption.append(f"{shown:,} of {total:,} rows" if shown < total else f"{total:,} rows")
    view = Table(title=analysis.title, caption=plain("; ".join(caption)), title_justify="left")
    for column in analysis.show:
        kind = table.schema.field(column).type
        numeric = pa.types.is_integer(kind) or pa.types.is_floating(kind)
        view.add_column(column, justify="right" if numeric else "left")
    for row in table.slice(0, shown).select(list(analysis.show)).to_pylist():
        view.add_row(*(_cell(column, value) for column, value in row.items()))
    return view


PIPED_WIDTH = 100_000  # piped, a table is as wide as its cells: no header or cell cut


def text_console(file: TextIO | None = None) -> Console:
    """Where the tables go: a terminal's console fits the terminal; piped or to a file,
    nothing is cut (one rule with kmon's other tables: kmon.cli.text_table)."""
    out = Console(file=file)
    return out if out.is_terminal else Console(file=file, width=PIPED_WIDTH)


def show(console: Console, analyses: Iterable[Analysis], tables: dict[str, pa.Table],
         top: int) -> None:
    """Print every analysis as a Rich table."""
    for analysis in analyses:
        # a recording holds what watched processes wrote: no control character is printed
        console.print(WithoutControls(renderable(analysis, tables[analysis.name], top)))
        console.print()


def write_tables(tables: dict[str, pa.Table], out: OutputDir) -> list[Path]:
    """``NAME.csv`` and ``NAME.parquet`` for every analysis."""
    written = []
    for name, table in tables.items():
        with out.replace(f"{name}.parquet") as file:
            pq.write_table(table, file)
        with out.replace(f"{name}.csv") as file:
            pacsv.write_csv(spreadsheet_safe(table), file)
        written += [out.path / f"{name}.csv", out.path / f"{name}.parquet"]
    return written


# -- charts ------------------------------------------------------------------------------------


def connections_over_time_chart(table: pa.Table) -> Figure | None:
    """Distinct connections per role per time bucket, one line per role."""
    if not table.num_rows:
        return None
    rows = table.to_pylist()
    buckets = sorted({r["bucket_ts"] for r in rows})
    counts: dict[str, dict[int, int]] = defaultdict(dict)
    for r in rows:
        counts[r["role"] or "unknown"][r["bucket_ts"]] = r["connections"]
    figure = Figure(figsize=(10, 4.5), layout="constrained")
    axes = figure.subplots()
    times = [_utc(b) for b in buckets]
    for role, per_bucket in sorted(counts.items()):
        # matplotlib's types leave out the datetimes its date units convert
        axes.step(times, [per_bucket.get(b, 0) for b in buckets],  # type: ignore[arg-type]
                  where="post", label=role, color=ROLE_COLOURS.get(role))
    locator = AutoDateLocator()
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    axes.set(title="Connections over time by role",
             xlabel=f"UTC (buckets of {rows[0]['bucket_ms'] / 1000:g} s)",
             ylabel="distinct connections")
    axes.legend()
    return figure


def churn_per_broker_chart(table: pa.Table) -> Figure | None:
    """Idle-churned connections and reap cycles per broker (bootstrap connections per
    cluster address), fleet-wide."""
    if not table.num_rows:
        return None
    churned: dict[tuple[int, int, str], int] = defaultdict(int)  # (kind, broker, label)
    cycles: dict[tuple[int, int, str], int] = defaultdict(int)
    for r in table.to_pylist():
        target = ((0, r["broker_id"], str(r["broker_id"])) if r["broker_id"] is not None
                  else (1, 0, f"bootstrap {r['address']}"))
        churned[target] += r["idle_churned"]
        cycles[target] += r["reap_cycles"]
    brokers = sorted(churned)
    figure = Figure(figsize=(max(6, 0.5 * len(brokers) + 3), 4.5), layout="constrained")
    axes = figure.subplots()
    positions = range(len(brokers))
    axes.bar([p - 0.2 for p in positions], [churned[b] for b in brokers], 0.4,
             label="opened and reaped idle")
    axes.bar([p + 0.2 for p in positions], [cycles[b] for b in brokers], 0.4,
             label="metadata-refresh reap cycles")
    axes.set_xticks(list(positions), [label for _, _, label in brokers])
    axes.set(title="Idle-reap churn per broker", xlabel="broker id (or bootstrap address)",
             ylabel="connections")
    axes.legend()
    return figure


def idle_age_chart(table: pa.Table) -> Figure | None:
    """Snapshot rows by idle age as a share of the idle limit, stacked by role."""
    if not table.num_rows:
        return None
    rows = table.to_pylist()
    widths = [r["to_fraction"] - r["from_fraction"] for r in rows if r["to_fraction"]]
    width = widths[0] if widths else 0.05
    by_role: dict[str, dict[float, int]] = defaultdict(dict)
    for r in rows:
        by_role[r["role"] or "unknown"][r["from_fraction"]] = r["rows"]
    lefts = sorted({r["from_fraction"] for r in rows})
    figure = Figure(figsize=(10, 4.5), layout="constrained")
    axes = figure.subplots()
    bottom = [0] * len(lefts)
    for role, counts in sorted(by_role.items()):
        heights = [counts.get(x, 0) for x in lefts]
        axes.bar(lefts, heights, width, bottom=bottom, align="edge", label=role,
                 color=ROLE_COLOURS.get(role))
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    axes.axvline(1.0, color="tab:red", linestyle="--", label="idle limit (reaped)")
    axes.axvline(0.8, color="tab:red", linestyle=":", label="near reap (80%)")
    axes.set(title="Idle age against the idle limit", xlabel="idle age / idle limit",
             ylabel="snapshot rows (connection-polls)", yscale="log")
    axes.legend()
    return figure


def why_closed_chart(table: pa.Table) -> Figure | None:
    """Closes per reason fleet-wide, split by the side that closed."""
    if not table.num_rows:
        return None
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in table.to_pylist():
        counts[r["reason"]][r["closed_by"]] += r["closes"]
    reasons = sorted(counts, key=lambda reason: -sum(counts[reason].values()))
    figure = Figure(figsize=(10, 0.45 * len(reasons) + 2), layout="constrained")
    axes = figure.subplots()
    left = [0] * len(reasons)
    for side, colour in SIDE_COLOURS.items():
        widths = [counts[reason].get(side, 0) for reason in reasons]
        axes.barh(reasons, widths, left=left, label=f"closed by the {side}"
                  if side != "unknown" else "side unknown", color=colour)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    axes.invert_yaxis()
    axes.set(title="Why connections closed", xlabel="closed connections")
    axes.legend()
    return figure


def churn_chart(table: pa.Table, top: int = 20) -> Figure | None:
    """The processes opening connections fastest, and those raising churn events."""
    rows = [r for r in table.to_pylist() if r["opened"] or r["max_churn_rate"]]
    if not rows:
        return None
    rows.sort(key=lambda r: (-(r["suspect"] or False), -r["opened_per_minute"]))
    rows = rows[:top]
    labels = [f"{r['host']} {r['pid']}" for r in rows]
    figure = Figure(figsize=(10, 0.4 * len(rows) + 2), layout="constrained")
    axes = figure.subplots()
    axes.barh(labels, [r["opened_per_minute"] for r in rows], color="tab:blue",
              label="connections opened a minute (seen by the polls)")
    axes.barh(labels, [r["max_churn_rate"] or 0 for r in rows], height=0.35, color="tab:red",
              label="highest churn-event rate a minute (client instances, cycles, ...)")
    axes.invert_yaxis()
    axes.set(title="Churn per process", xlabel="per minute", xscale="symlog")
    axes.legend()
    return figure


CHARTS: dict[str, tuple[str, Callable[[pa.Table], Figure | None]]] = {
    "connections_over_time": ("connections_over_time", connections_over_time_chart),
    "churn_per_broker": ("idle_churn", churn_per_broker_chart),
    "idle_age": ("idle_age", idle_age_chart),
    "why_closed": ("why_closed", why_closed_chart),
    "churn": ("churn_and_leaks", churn_chart),
}


def write_charts(tables: dict[str, pa.Table], out: OutputDir) -> list[Path]:
    """``NAME.png`` and ``NAME.svg`` for every chart that has data (labels, which name
    hosts and reasons a recording holds, are text: never parsed as mathtext)."""
    written = []
    with rc_context({"text.parse_math": False}):
        for name, (source, draw) in CHARTS.items():
            figure = draw(tables[source])
            if figure is None:
                continue
            for suffix, metadata in ((".png", None), (".svg", {"Date": None})):
                with out.replace(f"{name}{suffix}") as file:
                    figure.savefig(file, format=suffix[1:], dpi=110, metadata=metadata)
                written.append(out.path / f"{name}{suffix}")
    return written
