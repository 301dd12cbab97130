"""Root writes nothing it does not own: recordings and analysis results go only into
verified directories, never through a link another user planted."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import assert_one_clear_line, attach_app, kmon, table_rows, until

from kmon.analysis import report
from kmon.files import OutputDir, UnsafeFile
from kmon.model import Connection, ProcessView, Role, Snapshot
from kmon.record.recorder import Recorder

pytestmark = pytest.mark.root(reason="the attacks are on a root kmon")

ROOTS_OWN = b"root's own file\n"


def victim(tmp_path: Path) -> Path:
    """A root-owned file that a planted link points at."""
    path = tmp_path / "victim" / "shadow"
    path.parent.mkdir()
    path.write_bytes(ROOTS_OWN)
    return path


def plant(directory: Path, name: str, target: Path, owner: int | None = None) -> Path:
    link = directory / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    if owner is not None:
        os.lchown(link, owner, owner)
    return link


def users_directory(tmp_path: Path, user, target: Path) -> Path:
    """A directory of ``user``, with links planted where kmon writes (a result name, a
    table directory, a part's predictable temporary name)."""
    directory = tmp_path / "kmon-sessions"
    directory.mkdir()
    os.chown(directory, user.pw_uid, user.pw_gid)
    for name in ("connections_over_time.csv", "snapshots", ".x-000001.parquet.tmp"):
        plant(directory, name, target, user.pw_uid)
    return directory


def one_snapshot(ts_ms: int = 1) -> Snapshot:
    conn = Connection(key="sock:1", role=Role.BROKER, node_id=1, broker_id=1, client=None,
                      local="127.0.0.1:5000", remote="127.0.0.1:9092", state="ESTABLISHED")
    return Snapshot(ts_ms=ts_ms, host="h", processes=[ProcessView(1, "p", "",
                                                                  connections=[conn])])


@pytest.mark.integration
def test_root_refuses_to_record_into_another_users_directory(tmp_path, throwaway_user):
    target = victim(tmp_path)
    out = users_directory(tmp_path, throwaway_user, target)
    before = sorted(p.name for p in out.iterdir())
    result = kmon("record", "--pid", str(os.getpid()), "--out", str(out))
    assert_one_clear_line(result, 1, str(out), f"owned by uid {throwaway_user.pw_uid}")
    assert target.read_bytes() == ROOTS_OWN
    assert sorted(p.name for p in out.iterdir()) == before


@pytest.mark.integration
def test_root_refuses_to_write_analysis_results_into_another_users_directory(
        tmp_path, throwaway_user):
    """Refused before any analysis runs (no Spark is started): one line, the linked file
    untouched."""
    recording = tmp_path / "rec"
    recorder = Recorder(recording, "h", "s1", interval_ms=1000)
    recorder.add(one_snapshot(), [])
    recorder.close()
    target = victim(tmp_path)
    out = users_directory(tmp_path, throwaway_user, target)
    result = kmon("analyze", str(recording), "--out", str(out))
    assert_one_clear_line(result, 1, "--out", str(out), "owned by uid")
    assert target.read_bytes() == ROOTS_OWN


@pytest.mark.integration
@pytest.mark.parametrize("mode", [0o775, 0o757, 0o1777], ids=oct)
def test_root_refuses_a_directory_others_may_write(tmp_path, mode):
    out = tmp_path / "shared"
    out.mkdir()
    out.chmod(mode)
    result = kmon("record", "--pid", str(os.getpid()), "--out", str(out))
    assert_one_clear_line(result, 1, str(out), "writable by users other than root")
    assert list(out.iterdir()) == []


@pytest.mark.integration
def test_an_output_directory_that_is_a_link_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = plant(tmp_path, "rec", elsewhere)
    result = kmon("record", "--pid", str(os.getpid()), "--out", str(out))
    assert_one_clear_line(result, 1, str(out), "symbolic link")
    assert list(elsewhere.iterdir()) == []
    with pytest.raises(UnsafeFile, match="symbolic link"):
        OutputDir.open(tmp_path / "rec")


def test_links_at_part_names_are_replaced_never_followed(tmp_path):
    """Links at a part's final name, at its formerly predictable temporary name and at
    the compacted file's name: the recording is written, the linked file untouched."""
    target = victim(tmp_path)
    root = tmp_path / "rec"
    partition = root / "snapshots" / "date=1970-01-01" / "host=h"
    for name in ("s1-000001.parquet", ".s1-000001.parquet.tmp", "s1-000002.parquet",
                 ".s1-000002.parquet.tmp", ".s1.parquet.tmp"):
        plant(partition, name, target)
    recorder = Recorder(root, "h", "s1", interval_ms=1000)
    recorder.add(one_snapshot(1), [])
    recorder.flush()
    recorder.add(one_snapshot(2), [])
    summary = recorder.close()
    assert target.read_bytes() == ROOTS_OWN
    assert summary.rows["snapshots"] == 2
    rows = pq.read_table(partition / "s1.parquet").to_pylist()
    assert [row["ts_ms"] for row in rows] == [1, 2]
    assert not (partition / "s1-000001.parquet").exists()  # the links are gone, not followed


def test_a_link_at_a_result_name_is_replaced_never_followed(tmp_path):
    target = victim(tmp_path)
    out_path = tmp_path / "out"
    out_path.mkdir()
    for name in ("close_wait.csv", "close_wait.parquet"):
        plant(out_path, name, target)
    table = pa.table({"pid": [1], "client": ["c"]})
    with OutputDir.open(out_path) as out:
        written = report.write_tables({"close_wait": table}, out)
    assert target.read_bytes() == ROOTS_OWN
    assert sorted(p.name for p in written) == ["close_wait.csv", "close_wait.parquet"]
    assert not (out_path / "close_wait.csv").is_symlink()
    assert pq.read_table(out_path / "close_wait.parquet").to_pylist() == table.to_pylist()
    assert [p.name for p in out_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.integration
def test_the_r_key_in_another_users_directory_is_a_notice(start_client, tmp_path,
                                                          throwaway_user):

    target = victim(tmp_path)
    out = users_directory(tmp_path, throwaway_user, target)
    client = start_client("consumer")
    app, screen = attach_app(client.pid, record_dir=out)

    async def drive() -> None:
        async with app.run_test(size=(160, 45)) as pilot:
            await until(pilot, lambda: table_rows(screen), "rows")
            await pilot.press("r")
            await pilot.pause()
            assert screen.recorder is None
            notices = [n.message for n in app._notifications]
            assert any(f"owned by uid {throwaway_user.pw_uid}" in n for n in notices), notices
            started = screen.last_ts_ms
            await until(pilot, lambda: screen.last_ts_ms > started, "a refresh after it")
            assert app.is_running

    asyncio.run(drive())
    assert target.read_bytes() == ROOTS_OWN
