"""The ground-truth harness's fast scenarios (benchmarks/truth/): kmon's verdicts on a real
cluster against a packet capture and the client's own debug log - no confidently wrong
close or role, and ``--once``, ``ps`` and ``kmon serve``'s /metrics agreeing with the live
stream.

The whole matrix: ``python -m benchmarks.truth --out docs/truth-matrix.md``.
"""

from __future__ import annotations

import shutil

import pytest
from helpers import require_java

from benchmarks.truth import report
from benchmarks.truth.scenarios import FAST, SCENARIOS, run

pytestmark = [pytest.mark.integration, pytest.mark.kafka]  # a real cluster, clients, tcpdump


@pytest.mark.parametrize("name", FAST)
def test_no_confident_wrong_verdict_and_every_view_agrees(name, spool_dir):
    require_java()
    if shutil.which("tcpdump") is None:
        pytest.skip("tcpdump is not installed (Debian: apt-get install tcpdump)")
    outcomes = run(SCENARIOS[name])
    table = report.text_table(outcomes)
    assert not [o.not_run for o in outcomes if o.not_run], table
    for o in outcomes:
        wrongs = o.closes.wrongs + o.roles.wrongs
        assert o.closes.confident_wrong == o.roles.confident_wrong == 0, (table, wrongs)
        assert o.closes.told + o.roles.told > 0, table
        assert o.views["once"] == o.views["ps"] == o.views["metrics"] == 0, (table, o.views)
