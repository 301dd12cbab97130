"""Long recordings: sessions rotated by time and size, retention by age and total size (oldest
first, never the session being written), and kmon serve --record stopped by SIGTERM."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from helpers import get, kmon, start_serve, wait_for

from kmon.engine.facade import EngineSettings, ProcessTarget, SamplerSettings, open_session
from kmon.record.rotation import Limits, RotatingRecorder
from kmon.record.schema import SCHEMAS

pytestmark = pytest.mark.integration  # real client processes
HOST = socket.gethostname()
DAY_S = 86_400


PART = re.compile(r"-[0-9]{6}\.parquet$")  # a part of a session not yet compacted


def sessions_on_disk(root: Path, host: str = HOST) -> dict[str, list[Path]]:
    """session id -> its files, across tables and days, of one host."""
    found: dict[str, list[Path]] = {}
    for path in root.glob(f"*/date=*/host={host}/*.parquet"):
        session = PART.sub("", path.name).removesuffix(".parquet")
        found.setdefault(session, []).append(path)
    return found


def record(pid: int, out: Path, *args: str) -> str:
    result = kmon("record", "--pid", str(pid), "--out", str(out), "--interval", "200ms", *args)
    assert result.returncode == 0, result.stderr
    return result.stderr


def test_kmon_record_rotates_and_keeps_only_what_retention_allows(start_client, tmp_path):
    producer = start_client("producer")
    out = tmp_path / "rec"
    record(producer.pid, out, "--duration", "1s")
    (old,) = sessions_on_disk(out)
    for path in sessions_on_disk(out)[old]:  # a session finished ten days ago
        os.utime(path, (time.time() - 10 * DAY_S,) * 2)
    other = out / "snapshots" / "date=2020-01-01" / "host=elsewhere"  # another host's: untouched
    other.mkdir(parents=True)
    shutil.copy(sessions_on_disk(out)[old][0], other / f"{old}.parquet")
    os.utime(other / f"{old}.parquet", (time.time() - 10 * DAY_S,) * 2)

    record(producer.pid, out, "--duration", "2500ms", "--rotate-every", "1s", "--retain", "7d")
    kept = sessions_on_disk(out)
    assert old not in kept and len(kept) >= 2, sorted(kept)  # rotated; the old one gone
    assert all(len(files) == len(SCHEMAS) and not any(PART.search(f.name) for f in files)
               for files in kept.values()), kept  # each finished: one compacted file a table
    assert (other / f"{old}.parquet").exists()

    record(producer.pid, out, "--duration", "2s", "--rotate-every", "1s", "--max-disk", "1B")
    (last,) = sessions_on_disk(out)  # over the size: every finished session but the last
    assert last not in kept
    rows = ds.dataset(out / "snapshots", format="parquet", partitioning="hive").to_table()
    assert rows.num_rows > 0 and set(rows["pid"].to_pylist()) == {producer.pid}
    assert (other / f"{old}.parquet").exists()


def test_retention_never_touches_the_session_being_written(start_client, tmp_path):
    producer = start_client("producer")
    session = open_session(ProcessTarget((producer.pid,)),
                           EngineSettings(SamplerSettings(require_kafka=False), interval_ms=200))
    # every session over both limits: a millisecond old at most, a byte in all
    recorder = RotatingRecorder(tmp_path, HOST, 200, Limits(None, None, retain_s=0.001,
                                                            max_bytes=1), flush_every_s=0.0)
    try:
        for _ in range(2):
            recorder.add(*session.poll())
        first = recorder.current.session_id
        recorder.rotate()  # the first finished; retention: it is over the size, removed
        assert first not in sessions_on_disk(tmp_path)
        for _ in range(2):
            recorder.add(*session.poll())  # parts of the session being written, on disk
        writing = sessions_on_disk(tmp_path)[recorder.current.session_id]
        assert writing and all(PART.search(path.name) for path in writing)
        wait_for(lambda: all(time.time() - p.stat().st_mtime > 0.01 for p in writing),
                 "its parts older than the age limit")
        recorder.enforce_retention()
        assert all(path.exists() for path in writing)
    finally:
        recorder.close()
        session.close()
    (left,) = sessions_on_disk(tmp_path)
    assert left != first


def test_serve_records_beside_its_metrics_and_sigterm_writes_the_last_part(start_client,
                                                                           tmp_path):
    producer = start_client("producer")
    out = tmp_path / "rec"
    child, address = start_serve("--interval", "200ms", "--record", str(out))
    try:
        wait_for(lambda: 'process="workload producer"' in get(f"http://{address}/metrics")[2],
                 "the producer on /metrics")
        child.proc.send_signal(signal.SIGTERM)
        assert child.proc.wait(60) == 0, child.stderr
    finally:
        child.stop()
    assert "stopped (SIGTERM); recorded" in child.stderr[-1], child.stderr
    (files,) = sessions_on_disk(out).values()
    assert len(files) == len(SCHEMAS)  # compacted: its last rows written, one file a table
    sessions = ds.dataset(out / "sessions", format="parquet", partitioning="hive").to_table()
    assert max(sessions["stopped_ms"].to_pylist(), key=lambda v: v or 0) is not None
    rows = ds.dataset(out / "snapshots", format="parquet", partitioning="hive").to_table()
    assert producer.pid in set(rows["pid"].to_pylist())


def test_serve_refuses_bad_listen_busy_ports_and_bad_sizes_in_one_line():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        for listen, words in ((f"127.0.0.1:{busy.getsockname()[1]}", ("cannot listen", "in use")),
                              ("nonsense", ("--listen", "HOST:PORT"))):
            result = kmon("serve", "--listen", listen, timeout=60)
            lines = result.stderr.strip().splitlines()
            usage = listen == "nonsense"  # a bad value is a usage error, as the README says
            assert result.returncode == (2 if usage else 1), result.stderr
            assert len(lines) == 1, result.stderr
            assert all(word in lines[0] for word in words), lines
    for size in ("2XB", "-1GB", "0"):  # a usage error, before anything is bound or polled
        result = kmon("serve", "--record", "rec", "--max-disk", size, timeout=60)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and "--max-disk" in lines[0], lines
    assert kmon("serve", "--max-disk", "2GB", "--rotate-size", "500MiB", "--retain", "7d",
                "--duration", "10ms", "--listen", "127.0.0.1:0").returncode == 0


def test_sighup_reloads_the_config_and_a_bad_one_keeps_the_running_session(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("[churn]\nreap_cycles = 3\n")
    child, address = start_serve("--interval", "200ms", "--config", str(config))
    try:
        wait_for(lambda: get(f"http://{address}/healthz")[0] == 200, "a first poll")
        child.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "kmon serve: config reloaded" in child.stderr, "the reload")
        config.write_text("[churn\n")
        child.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: any("config not reloaded" in line for line in child.stderr),
                 "the bad config told")
        assert child.proc.poll() is None and get(f"http://{address}/healthz")[0] == 200
    finally:
        child.stop()
    assert not any("Traceback" in line for line in child.stderr), child.stderr
