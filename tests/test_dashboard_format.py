"""The one duration format every screen, table and event uses."""

from __future__ import annotations

import pytest

from kmon.units import format_duration


@pytest.mark.parametrize(("ms", "written"), [
    (None, "?"), (0, "0 ms"), (850, "850 ms"), (999.6, "1 s"), (4592, "4.6 s"), (5000, "5 s"),
    (44_900, "44 s"), (59_999, "59 s"), (60_000, "1 m"), (599_000, "9 m 59 s"),
    (600_000, "10 m"), (3_720_000, "1 h 2 m"), (7_200_000, "2 h"), (90_000_000, "1 d 1 h"),
    (-1500, "-1.5 s"),
])
def test_durations_are_written_one_way(ms, written):
    assert format_duration(ms) == written
