"""Rows as text for pipes and terminals (``-o``): a table that fits the terminal (whole when
piped: no terminal to fit), wide columns that never truncate, or tsv for awk; no box
drawing, headers from kmon.present.columns."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from rich.cells import cell_len, set_cell_size

from kmon.present.columns import Column
from kmon.present.plain_text import one_line
from kmon.units import format_duration as duration

GAP = "  "
ELLIPSIS = "…"


def terminal_width() -> int | None:
    """``$COLUMNS``, else the width of the terminal stdout is; None when stdout is a pipe or a
    file (what reads it is no terminal of a known width: nothing is cut)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isascii() and columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        return os.get_terminal_size(1).columns
    except OSError:
        return None


def cell_value(column: Column, value: object) -> object:
    """What a cell shows of ``value``: a list of findings by their reasons."""
    if column.kind == "findings" and isinstance(value, list):
        return [f.get("reason", "?") for f in value if isinstance(f, dict)]
    return value


def text_cell(column: Column, value: object) -> str:
    """How a person reads ``value``: durations as ``44s``, unknowns as ``-``."""
    value = cell_value(column, value)
    if value is None or value == "":
        return "-"
    if column.kind == "ms" and isinstance(value, (int, float)):
        return duration(value)
    if column.kind == "fraction":
        return f"{value:.2f}"
    if isinstance(value, (list, tuple)):
        return one_line(", ".join(map(str, value))) or "-"
    return one_line(value)


def tsv_cell(value: object) -> str:
    """How awk reads ``value``: as JSON has it (ms, bytes), empty when unknown, no tabs."""
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        value = ",".join(map(str, value))
    return one_line(value).replace("\t", " ")


def render(rows: Iterable[dict], columns: Sequence[Column], fmt: str,
           width: int | None = None, header: bool = True) -> list[str]:
    """The lines of ``rows`` (dicts by column key) in ``fmt``: table, wide or tsv."""
    if fmt == "tsv":
        lines = ["\t".join(c.key for c in columns)] if header else []
        return lines + ["\t".join(tsv_cell(cell_value(c, row.get(c.key))) for c in columns)
                        for row in rows]
    shown = [c for c in columns if fmt == "wide" or not c.wide]
    texts = [[text_cell(c, row.get(c.key)) for c in shown] for row in rows]
    widths = [max([cell_len(c.header)] + [cell_len(t[i]) for t in texts])
              for i, c in enumerate(shown)]
    width = width or terminal_width()
    if fmt == "table" and width is not None:
        widths = _fitted(shown, widths, width)
        shown, texts = shown[:len(widths)], [cells[:len(widths)] for cells in texts]
    heads = [[c.header for c in shown]] if header else []
    return [_line(cells, shown, widths) for cells in heads + texts]


def _fitted(columns: Sequence[Column], widths: list[int], width: int) -> list[int]:
    """``widths`` with the widest text column narrowed, one cell at a time, until the line
    fits ``width`` (no column narrower than its header, numbers never cut), then the last
    columns left out until it does."""
    widths = list(widths)
    floor = [w if c.numeric or c.whole else cell_len(c.header)
             for c, w in zip(columns, widths, strict=True)]
    excess = sum(widths) + len(GAP) * (len(widths) - 1) - width
    while excess > 0:
        i = max(range(len(widths)), key=lambda k: (widths[k] > floor[k], widths[k]))
        if widths[i] <= floor[i]:
            break
        widths[i] -= 1
        excess -= 1
    while excess > 0 and len(widths) > 2:
        excess -= widths.pop() + len(GAP)
    return widths


def _line(cells: Sequence[str], columns: Sequence[Column], widths: Sequence[int]) -> str:
    out = []
    for text, column, width in zip(cells, columns, widths, strict=True):
        if cell_len(text) > width:
            text = set_cell_size(text, width - 1) + ELLIPSIS
        pad = " " * (width - cell_len(text))
        out.append(pad + text if column.numeric else text + pad)
    return GAP.join(out).rstrip()
