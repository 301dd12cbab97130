"""Hostile peers, packets and spools against kmon's network and spool sources: each defence
reproduced with the attack it stops (a flood, a dripping broker, a forged segment)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil

from kmon.sources import spool
from kmon.sources.librdkafka_stats import read_client_stats

# --- spool: a flood of files costs one bounded read a poll --------------------------------


def _spool_record(instance: str, padding: int) -> dict:
    proc = psutil.Process()
    return {"format": 1, "proc_start": proc.create_time(), "written_ms": 1, "config": {},
            "stats": {"name": instance, "type": "producer", "client_id": "c", "brokers": {},
                      "padding": "x" * padding}}


def _flood(directory: Path, files: int, padding: int) -> list[Path]:
    """``files`` spool records of this process, each ``padding`` bytes long, the last written
    the newest."""
    directory.chmod(0o700)
    paths = []
    for i in range(files):
        path = directory / f"{os.getpid()}-rdkafka#producer-{i}.json"
        path.write_text(json.dumps(_spool_record(f"rdkafka#producer-{i}", padding)))
        os.utime(path, ns=(i * 10**9, i * 10**9))
        paths.append(path)
    return paths


def test_a_flood_of_spool_files_is_read_newest_first_up_to_the_caps(tmp_path):
    paths = _flood(tmp_path, 50, spool.MAX_RECORD_BYTES - 4096)
    taken = spool.read_records(tmp_path, os.getpid(), os.getuid())
    read = [path for path, _ in taken.records]
    assert read == paths[::-1][:len(read)]  # the newest
    assert sum(p.stat().st_size for p in read) <= spool.MAX_BYTES_PER_READ
    assert len(read) == spool.MAX_BYTES_PER_READ // paths[0].stat().st_size
    assert f"{50 - len(read)} older statistics files" in taken.skipped


def test_many_small_spool_files_are_capped_by_count_and_the_notice_reaches_the_view(tmp_path):
    _flood(tmp_path, spool.MAX_FILES_PER_READ + 8, 10)
    reading = read_client_stats(psutil.Process(), psutil.Process().create_time(), os.getuid(),
                                [tmp_path])
    assert len(reading.stats) == spool.MAX_FILES_PER_READ
    assert reading.stats[0].instance != "rdkafka#producer-0"  # the oldest are the ones left
    (notice,) = reading.notices
    assert "8 older statistics files" in notice


def test_a_spool_within_the_caps_is_read_whole_without_a_notice(tmp_path):
    _flood(tmp_path, 3, 10)
    taken = spool.read_records(tmp_path, os.getpid(), os.getuid())
    assert len(taken.records) == 3 and taken.skipped is None
