"""``kmon analyze``'s findings table: a recording's findings once each, with how long they
held, from the Parquet a real Recorder wrote; an older recording (no findings table) is
read as having none."""

from __future__ import annotations

import json
import shutil

import pytest

from kmon.analysis import inputs, jobs
from kmon.model import Finding, ProcessView, Snapshot
from kmon.record.recorder import Recorder, new_session_id

pytestmark = pytest.mark.integration  # a local Spark session

T0 = 1_790_000_000_000


def poll(ts_ms: int, *findings: Finding) -> Snapshot:
    return Snapshot(ts_ms, "h", [ProcessView(7, "python", "python app.py",
                                             findings=list(findings))])


def near(since_ms: int, count: int) -> Finding:
    return Finding("fd_near_limit", since_ms, f"{count} of 256 file descriptors open",
                   {"open_fds": count, "limit": 256}, "raise LimitNOFILE")


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    root = tmp_path_factory.mktemp("findings") / "rec"
    recorder = Recorder(root, "h", new_session_id("h"), 1000)
    for i in range(4):  # raised at T0, held 3 s, its count rising
        recorder.add(poll(T0 + 1000 * i, near(T0, 220 + i)), [])
    recorder.add(poll(T0 + 4000), [])  # gone ...
    recorder.add(poll(T0 + 5000, near(T0 + 5000, 230)), [])  # ... and back: another
    recorder.close()
    return root


def test_each_finding_once_with_how_long_it_held(recording, spark_session):
    frames = inputs.load(spark_session, inputs.discover(recording))
    rows = sorted(jobs.findings(frames.findings).collect(), key=lambda r: -r["since_ts"])
    assert [(r["reason"], r["since_ts"], r["last_seen_ts"], r["held_ms"], r["polls"])
            for r in rows] == [("fd_near_limit", T0 + 5000, T0 + 5000, 0, 1),
                               ("fd_near_limit", T0, T0 + 3000, 3000, 4)]
    assert rows[1]["detail"] == "223 of 256 file descriptors open"  # its last word
    assert json.loads(rows[1]["evidence_json"]) == {"open_fds": 223, "limit": 256}
    assert rows[1]["process_name"] == "python" and rows[1]["fix"] == "raise LimitNOFILE"


def test_a_recording_without_findings_is_read_as_having_none(recording, spark_session,
                                                             tmp_path):
    shutil.copytree(recording, tmp_path / "v3")
    shutil.rmtree(tmp_path / "v3" / "findings")
    found = inputs.discover(tmp_path / "v3")
    assert found.skipped == [] and found.files["findings"] == []
    frames = inputs.load(spark_session, found)
    assert jobs.findings(frames.findings).count() == 0
