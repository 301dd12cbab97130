"""What ``kmon analyze`` writes of a recording's strings is text, in every format.

CSV files: no control character, no cell a spreadsheet runs as a formula (written by
the real writer, ``report.write_tables``, and read back with Python's csv module, as a
spreadsheet would read it). Charts: labels are not matplotlib mathtext.
"""

from __future__ import annotations

import csv

import pyarrow as pa
import pyarrow.parquet as pq

from kmon.analysis import report
from kmon.files import OutputDir

CELLS = {  # what a recording holds -> what the CSV holds
    '=HYPERLINK("http://e.invalid","x")': '\'=HYPERLINK("http://e.invalid","x")',
    "+1+cmd|' /C calc'!A0": "'+1+cmd|' /C calc'!A0",
    "-2+3": "'-2+3",
    "@SUM(A1)": "'@SUM(A1)",
    " =1+1": "' =1+1",
    "\t=1+1": "'=1+1",  # the tab is a control character: taken out, then the = is seen
    "orders\x1b]0;owned\x07-1": "orders]0;owned-1",
    "c1\u009b31m\u0085\x7f.": "c131m.",
    "bidi\u202etxt\u2066.": "biditxt.",
    "svc[/prod] a=b": "svc[/prod] a=b",
    "é-ok": "é-ok",
}


def test_csv_cells_lose_controls_and_formulas_and_parquet_keeps_the_values(tmp_path):
    written = list(CELLS)
    table = pa.table({"client": written, "pid": list(range(-5, len(written) - 5)),
                      "ratio": [-0.5] * len(written)})
    with OutputDir.open(tmp_path) as out:
        report.write_tables({"peak": table}, out)
    with open(tmp_path / "peak.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [r["client"] for r in rows] == list(CELLS.values())
    assert [int(r["pid"]) for r in rows] == list(range(-5, len(written) - 5))  # numbers stay
    assert {r["ratio"] for r in rows} == {"-0.5"}
    assert pq.read_table(tmp_path / "peak.parquet").column("client").to_pylist() == written


def test_charts_draw_a_host_named_like_mathtext_as_text(tmp_path):
    """Chart labels are not parsed as matplotlib's mathtext: a host named ``$\\frac{$`` is
    drawn as those characters, not an error (or a formula)."""
    empty = pa.table({"opened": pa.array([], pa.int64())})
    tables = {source: empty for source, _ in report.CHARTS.values()}
    host = r"$\frac{$ $x^2$"
    tables["churn_and_leaks"] = pa.table({
        "host": [host], "pid": [7], "opened": [100], "opened_per_minute": [50.0],
        "max_churn_rate": [3.0], "suspect": [True]})
    with OutputDir.open(tmp_path) as out:
        (png, svg) = report.write_charts(tables, out)
    assert png.stat().st_size > 0
    assert r"$\frac{$ $x^2$ 7" in svg.read_text()
