"""Every text table follows one rule (kmon.cli.text_table): it fits the terminal it is printed
on, and piped (no terminal, no $COLUMNS) nothing is cut."""

import pytest

from kmon.cli.text_table import ELLIPSIS, render
from kmon.present.columns import PROCESS_COLUMNS

pytestmark = pytest.mark.unit

ROW = {"cluster": "Hk3xq0ZgT1ixb3kPqzJ3Zg", "pid": 4242, "user": "orders-service",
       "command": "workload producer", "client_ids": ["orders-writer-with-a-long-name"],
       "bootstrap": 0, "coordinator": 1, "broker": 3, "close_wait": 0, "max_idle_ms": 4000,
       "cmdline": "python -m kmon.devtools.workload producer b1:9092"}


def test_piped_a_table_is_whole(monkeypatch):
    """Under pytest stdout is no terminal, as in `kmon ps | cat`: once, the table was cut
    to 80 columns there while `attach --once | cat` printed everything."""
    monkeypatch.delenv("COLUMNS", raising=False)
    lines = render([ROW], PROCESS_COLUMNS, "table")
    assert ELLIPSIS not in "".join(lines) and "orders-writer-with-a-long-name" in lines[1]


def test_a_terminal_s_width_is_kept(monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    lines = render([ROW], PROCESS_COLUMNS, "table")
    assert all(len(line) <= 60 for line in lines) and ELLIPSIS in lines[1]


@pytest.mark.parametrize("columns", ["²", "٦٠", "-5", "wide"])
def test_a_columns_value_that_is_no_width_is_as_none(monkeypatch, columns):
    """``str.isdigit`` holds for "²" (which int() refuses) and for Arabic-Indic digits: a
    $COLUMNS of no ASCII width counts as none (piped under pytest: nothing is cut)."""
    monkeypatch.setenv("COLUMNS", columns)
    lines = render([ROW], PROCESS_COLUMNS, "table")
    assert ELLIPSIS not in "".join(lines)
