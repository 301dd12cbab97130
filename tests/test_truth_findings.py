"""The ground-truth harness's fast findings scenarios (benchmarks/truth/findings.py) on the
session's real cluster: ``fd_near_limit`` against /proc, ``duplicate_client_id`` against
the clients' own logs, and fd_near_limit's negative twin - every answer of kmon the
oracle's.

The whole matrix: ``python -m benchmarks.truth --scenarios silent-drop,...`` (the
findings' scenario names are in ``--help``).
"""

from __future__ import annotations

import pytest

from benchmarks.truth import findings

pytestmark = [pytest.mark.integration, pytest.mark.kafka]  # a real cluster, real clients


def test_every_fast_finding_agrees_with_its_oracle(kafka, spool_dir):
    results = findings.run(list(findings.FAST), cluster=kafka)
    table = findings.text_table(results)
    assert not [r.not_run for r in results if r.not_run], table
    assert len(results) == 4, table  # a process each, two in the duplicate scenario
    for reason, tally in findings.tallies(results).items():
        assert tally.wrong == tally.missed == 0 and tally.right == tally.told, (reason, table)
    assert {r.scenario for r in results if r.truth} == {"fd-near-limit", "duplicate-client-id"}
