"""Findings of the security review, each reproduced: what another local user could make
kmon (often root) do, and what a watched process could make it spend."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kmon.agent.autoinstrument import BOOTSTRAP_DIR, run_environment
from kmon.analysis import classes
from kmon.analysis.inputs import discover
from kmon.files import root_only
from kmon.model import Connection, ProcessView, Role, Snapshot
from kmon.record.recorder import Recorder
from kmon.record.schema import SCHEMAS
from kmon.sources.clients import spool
from kmon.sources.clients.librdkafka_stats import parse_record, read_client_stats
from kmon.sources.jvm import jmx
from kmon.sources.processes.child_env import trusted_program

NOBODY = 65534  # a uid that is not root and not us: the "other user" of these tests
as_root = pytest.mark.root(reason="the attack is on kmon running as root")


def owned_by_nobody(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for part in (path, *[p for p in path.parents if str(p).startswith(str(path.parents[1]))]):
        os.chown(part, NOBODY, NOBODY)
    return path


# --- high: root runs only code root alone can change -----------------------------------

@as_root
def test_root_never_takes_the_jmx_helper_from_a_cache_another_user_controls(tmp_path,
                                                                             monkeypatch):
    hostile = owned_by_nobody(tmp_path / "home" / ".cache")
    planted = hostile / "kmon" / "jmx"
    planted.mkdir(parents=True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(hostile))
    monkeypatch.setenv("HOME", str(hostile.parent))
    cache = jmx._cache_dir()
    assert not str(cache).startswith(str(tmp_path))
    assert root_only(cache)


@as_root
def test_root_ignores_a_java_home_or_path_another_user_can_write(tmp_path, monkeypatch):
    fake = owned_by_nobody(tmp_path / "jdk" / "bin")
    for tool in ("java", "javac"):
        (fake / tool).write_text("#!/bin/sh\ntouch /tmp/kmon-pwned\n")
        (fake / tool).chmod(0o755)
        os.chown(fake / tool, NOBODY, NOBODY)
    monkeypatch.setenv("JAVA_HOME", str(fake.parent))
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    for tool in ("java", "javac"):
        found = trusted_program(tool, home="JAVA_HOME")
        assert found is None or not found.startswith(str(tmp_path)), found


@as_root
def test_root_never_maps_spark_classes_from_an_archive_another_user_controls(tmp_path,
                                                                            monkeypatch):
    hostile = owned_by_nobody(tmp_path / "home" / ".cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(hostile))
    monkeypatch.setenv("HOME", str(hostile.parent))
    archive = classes.archive_path()
    assert archive is not None and not str(archive).startswith(str(tmp_path))
    assert root_only(archive.parent)


def test_a_class_archive_another_user_could_have_written_is_never_used(tmp_path,
                                                                       monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    archive = classes.archive_path()
    if os.geteuid() == 0:  # root's archive is in /var/cache: plant a file of our own
        archive = tmp_path / "spark.jsa"
    archive.write_bytes(b"planted")
    archive.chmod(0o666)
    assert classes.java_options(archive) == ("", None)
    archive.chmod(0o600)
    assert "SharedArchiveFile" in classes.java_options(archive)[0]
    archive.unlink()
    archive.symlink_to(tmp_path / "elsewhere.jsa")
    assert classes.java_options(archive) == ("", None)


def test_one_run_at_a_time_writes_the_class_archive(tmp_path):
    """Runs that start while another writes the archive go without one: on two cores, each
    JVM dumping its own costs its run some 30 s of CPU; once the writer lets go (kmon ended,
    or kept its archive), the next run writes it, and a run after that maps it."""
    archive = tmp_path / "spark.jsa"
    options, writer = classes.java_options(archive)
    assert "ArchiveClassesAtExit" in options
    assert classes.java_options(archive) == ("", None)  # another run meanwhile
    assert writer is not None and f"ArchiveClassesAtExit={writer.partial} " in options
    assert writer.partial.parent == tmp_path
    writer.release()
    options, second = classes.java_options(archive)
    assert second is not None and "ArchiveClassesAtExit" in options
    second.partial.write_bytes(b"dumped")
    second.partial.chmod(0o444)
    os.replace(second.partial, archive)
    assert classes.java_options(archive)[0].startswith("-XX:SharedArchiveFile")  # held, kept
    second.release()
    assert classes.java_options(archive)[0].startswith("-XX:SharedArchiveFile")


def test_pyspark_installed_again_at_the_same_path_gets_another_class_archive(tmp_path):
    """The JVM refuses an archive made from other jars ("top archive failed to load") and
    would never rebuild it: a reinstall at the same path names a new archive."""
    (tmp_path / "jars").mkdir()
    before = classes.install_digest(tmp_path)
    assert classes.install_digest(tmp_path) == before
    shutil.rmtree(tmp_path / "jars")
    (tmp_path / "jars").mkdir()
    assert classes.install_digest(tmp_path) != before


def test_the_class_archive_cache_keeps_the_newest_few(tmp_path):
    """Each virtual environment makes its own archive (about 170 MB): the cache keeps the
    KEPT newest, and leaves what is not an archive of this user's alone."""
    for age in range(classes.KEPT + 3):
        path = tmp_path / f"spark-4.0.0-{age:010d}.jsa"
        path.write_bytes(b"x")
        path.chmod(0o600)
        os.utime(path, (1_000_000 - age, 1_000_000 - age))
    other = tmp_path / "notes.txt"
    other.write_text("")
    classes.prune(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"spark-4.0.0-{age:010d}.jsa" for age in range(classes.KEPT)] + ["notes.txt"])


def test_root_only_sees_a_writable_directory_anywhere_above(tmp_path):
    target = tmp_path / "a" / "b" / "tool"
    target.parent.mkdir(parents=True)
    target.write_text("")
    (tmp_path / "a").chmod(0o777)
    assert not root_only(target)


def test_a_link_put_in_place_of_a_directory_above_a_recording_is_refused(tmp_path):
    """A recording reopens its root at every rotation and for its retention. The owner of a
    directory above it could rename that directory and put a link to anywhere in its place:
    root then made its sessions there, and its retention removed another recording's. The
    links above a root are resolved at its first open only; one put there since is
    refused."""
    from kmon.files import OutputDir, UnsafeFile

    (tmp_path / "data").mkdir()
    (tmp_path / "elsewhere").mkdir()
    root = tmp_path / "data" / "rec"
    OutputDir.open(root).close()
    (tmp_path / "data").rename(tmp_path / "data.old")
    (tmp_path / "data").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafeFile, match="symbolic link"):
        OutputDir.open(root)
    assert not any((tmp_path / "elsewhere").iterdir())


# --- medium: no blinding through the spool, no unbounded spool ---------------------------

def spool_record(**changes) -> dict:
    record = {"format": 1, "proc_start": 1.0, "written_ms": 1, "config": {},
              "stats": {"name": "rdkafka#producer-1", "brokers": {
                  "b1:9092/1": {"nodeid": 1, "nodename": "b1:9092", "source": "learned",
                                "state": "UP", "txbytes": 10, "rxbytes": 10}}}}
    record["stats"]["brokers"]["b1:9092/1"].update(changes)
    return record


@pytest.mark.parametrize(("field", "value"), [
    ("txbytes", 2**70), ("rxbytes", -5), ("nodeid", 2**31), ("connects", 2**63)])
def test_numbers_out_of_range_are_corrupt_not_a_crash_later(tmp_path, field, value):
    with pytest.raises(spool.SpoolError, match="range"):
        parse_record(tmp_path / "1-x.json", spool_record(**{field: value}))


@pytest.mark.parametrize("limit", ["9" * 20, "9" * 400, "-5", "9" * 5000])
def test_an_idle_limit_out_of_range_in_a_spool_is_no_limit(tmp_path, limit):
    """A client's spool is its own user's to write: a ``connections.max.idle.ms`` past int64
    went into the rows' limits, where ``--json`` could not write it (a 20-digit one) and
    the close rules' arithmetic overflowed outside any one process's guard (400 digits)."""
    record = spool_record()
    record["config"] = {"connections.max.idle.ms": limit, "statistics.interval.ms": limit}
    stats = parse_record(tmp_path / "1-x.json", record)
    assert stats.config_ms("connections.max.idle.ms") is None
    assert stats.is_stale(1) is False  # the default interval, not the spool's


def test_a_huge_spool_file_is_refused_before_it_is_read(tmp_path):
    tmp_path.chmod(0o700)
    path = tmp_path / f"{os.getpid()}-rdkafka_producer-1.json"
    path.write_text("[" * (2 * spool.MAX_RECORD_BYTES))
    with pytest.raises(spool.SpoolError, match="too large"):
        spool.read_records(tmp_path, os.getpid(), os.getuid())


def test_a_spool_listing_kept_for_the_next_process_still_sees_every_write(tmp_path):
    """The spool's listing is kept while the directory is unchanged (a poll reads it for
    each process); a file the agent renames into it, or one removed, shows at once."""
    tmp_path.chmod(0o700)
    first = tmp_path / f"{os.getpid()}-rdkafka_producer-1.json"
    first.write_text(json.dumps(spool_record()))
    settled = time.time() - 1  # the directory unchanged long before it is listed
    os.utime(tmp_path, (settled, settled))

    def names() -> list[str]:
        return [path.name for path, _ in spool.read_records(tmp_path, os.getpid(),
                                                             os.getuid()).records]

    assert names() == [first.name]
    assert tmp_path in spool._LISTINGS and names() == [first.name]  # kept, and right
    second = tmp_path / f"{os.getpid()}-rdkafka_producer-2.json"
    written = tmp_path / "tmp-write"
    written.write_text(json.dumps(spool_record()))
    written.rename(second)  # as the agent writes
    assert sorted(names()) == sorted([first.name, second.name])
    first.unlink()
    assert names() == [second.name]


def test_a_changing_spool_is_listed_once_a_poll(tmp_path):
    """A spool hundreds of clients write to changes all the time: one poll lists it once for
    all its processes (``since_ns``: the poll's start), each process's names as of that
    listing; the next poll lists it again and sees what was written since."""
    tmp_path.chmod(0o700)
    first = tmp_path / f"{os.getpid()}-rdkafka_producer-1.json"
    first.write_text(json.dumps(spool_record()))  # the directory changed just now

    def names(since_ns: int) -> list[str]:
        return sorted(path.name for path, _ in spool.read_records(
            tmp_path, os.getpid(), os.getuid(), since_ns).records)

    poll = time.time_ns()
    assert names(poll) == [first.name]
    second = tmp_path / f"{os.getpid()}-rdkafka_producer-2.json"
    written = tmp_path / "tmp-write"
    written.write_text(json.dumps(spool_record()))
    written.rename(second)  # as the agent writes, while the poll reads other processes
    assert names(poll) == [first.name]  # this poll's listing
    assert names(time.time_ns()) == sorted([first.name, second.name])  # the next poll's


def test_a_spool_file_with_a_second_link_is_refused(tmp_path):
    tmp_path.chmod(0o700)
    path = tmp_path / f"{os.getpid()}-rdkafka_producer-1.json"
    path.write_text(json.dumps(spool_record()))
    os.link(path, tmp_path / "elsewhere")
    with pytest.raises(spool.SpoolError, match="links"):
        spool.read_records(tmp_path, os.getpid(), os.getuid())


def test_a_spool_file_the_agent_replaces_while_kmon_opens_it_is_read_anew(tmp_path,
                                                                          monkeypatch):
    """The agent renames each record over the last (kmon.agent.spool_writer): a file kmon
    opened just before has no link left when it is checked. That is no hard link to refuse
    (the stream once dropped a watched process for it): kmon reads the path again. The
    rename is made to fall between kmon's open and its check by a hook on ``os.fstat``,
    the one way to time it on demand; the writer, the rename and the checks are real."""
    from kmon.agent.spool_writer import write_record

    tmp_path.chmod(0o700)
    written = write_record(tmp_path, os.getpid(), "rdkafka#producer-1",
                           json.dumps(spool_record()))
    real_fstat, renamed = os.fstat, []

    def fstat_after_a_rename(fd: int):
        if not renamed:
            renamed.append(write_record(tmp_path, os.getpid(), "rdkafka#producer-1",
                                        json.dumps(spool_record())))
        return real_fstat(fd)

    monkeypatch.setattr(spool.os, "fstat", fstat_after_a_rename)
    taken = spool.read_records(tmp_path, os.getpid(), os.getuid()).records
    assert renamed == [written] and [path for path, _ in taken] == [written]


@as_root
def test_a_squatted_spool_directory_is_a_notice_not_a_failure(tmp_path):
    import psutil

    squatted = owned_by_nobody(tmp_path / "kmon-squatted")
    reading = read_client_stats(psutil.Process(), psutil.Process().create_time(), 0, [squatted])
    assert reading.stats == [] and len(reading.notices) == 1
    assert "not a private directory" in reading.notices[0]


# --- medium: kmon run adds only its bootstrap directory ---------------------------------

def test_kmon_run_puts_only_the_bootstrap_directory_on_the_path():
    env = run_environment({"PYTHONPATH": "/app/lib"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(BOOTSTRAP_DIR), "/app/lib"]
    assert sorted(os.listdir(BOOTSTRAP_DIR)) in (["sitecustomize.py"],
                                                  ["__pycache__", "sitecustomize.py"])
    assert env["KMON_AGENT_PYTHON"] == f"{sys.version_info[0]}.{sys.version_info[1]}"


@pytest.mark.integration
def test_the_bootstrap_refuses_another_python_version(tmp_path):
    env = run_environment(dict(os.environ))
    env["KMON_AGENT_PYTHON"] = "2.7"
    result = subprocess.run([sys.executable, "-c", "import sys; print('kmon' in sys.modules)"],
                            env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.stdout.strip() == "False"
    assert "not instrumented" in result.stderr


# --- low: recordings ----------------------------------------------------------------------

def test_parts_a_compacted_file_already_holds_are_not_counted_twice(tmp_path):
    directory = tmp_path / "events" / "date=2026-11-22" / "host=h"
    directory.mkdir(parents=True)
    table = pa.Table.from_pylist([], schema=SCHEMAS["events"])
    pq.write_table(table, directory / "s1.parquet")
    pq.write_table(table, directory / "s1-000001.parquet")  # left by a kill before deletion
    pq.write_table(table, directory / "s2-000001.parquet")  # another session's live part
    found = discover(tmp_path)
    assert [p.name for p in found.files["events"]] == ["s1.parquet", "s2-000001.parquet"]
    assert [s.path.name for s in found.skipped] == ["s1-000001.parquet"]


def one_connection_snapshot() -> Snapshot:
    conn = Connection(key="sock:1", role=Role.BROKER, node_id=1, broker_id=1, client=None,
                      local="127.0.0.1:5000", remote="127.0.0.1:9092", state="ESTABLISHED")
    return Snapshot(ts_ms=1, host="h", processes=[ProcessView(1, "p", "", connections=[conn])])


def test_buffered_rows_reach_disk_on_the_timer_while_no_poll_returns(tmp_path):
    """A poll that blocks (a stopped JVM held one for 12 s) must not stretch the loss window:
    nothing calls add() after the first poll here, and the second poll's rows still land."""
    recorder = Recorder(tmp_path, "h", "s1", interval_ms=1000, flush_every_s=0.5)
    snapshot = one_connection_snapshot()
    recorder.add(snapshot, [])  # the first poll flushes at once
    written = len(recorder.parts["snapshots"])
    recorder.add(replace(snapshot, ts_ms=2), [])  # buffered: the next flush is 0.5 s away
    deadline = time.monotonic() + 30
    while len(recorder.parts["snapshots"]) == written and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(recorder.parts["snapshots"]) == written + 1
    recorder.close()


def test_fsynced_parts_and_directories_before_a_rename(tmp_path, monkeypatch):
    """Each part file and its directory are synced before and after the rename that publishes
    it (a spy on os.fsync: a power cut cannot be made on demand)."""
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    recorder = Recorder(tmp_path, "h", "s1", interval_ms=1000)
    recorder.add(one_connection_snapshot(), [])
    part = recorder.parts["snapshots"][0]
    hidden, directory = str(part.parent / f".{part.name}."), str(part.parent)
    temporary = next(p for p in synced if p.startswith(hidden) and p.endswith(".tmp"))
    assert directory in synced[synced.index(temporary):], synced
    recorder.close()


# --- the blinding attack, end to end: a throwaway user, a squatted /tmp/kmon-UID ----------

@as_root
@pytest.mark.integration
@pytest.mark.skipif(not Path("/usr/sbin/useradd").exists(), reason="needs useradd")
def test_a_squatted_spool_cannot_blind_root_to_another_users_client(cluster, throwaway_user,
                                                                    tmp_path):

    from helpers import Child, python_as

    victim = throwaway_user
    squatted = Path(f"/tmp/kmon-{victim.pw_uid}")
    shutil.rmtree(squatted, ignore_errors=True)
    squatted.mkdir()
    os.chown(squatted, NOBODY, NOBODY)  # another user got there first
    python, env = python_as(victim.pw_name)
    env["HOME"] = victim.pw_dir
    client = Child([*python, "-m", "kmon.devtools.workload", "producer", cluster,
                    "--instrument"], env=env)
    try:
        client.wait_line("READY")
        pid = int(subprocess.run(["pgrep", "-u", victim.pw_name, "-f", "kmon.devtools.workload"],
                                 capture_output=True, text=True).stdout.split()[0])
        result = None
        for _ in range(20):  # the agent writes its first statistics within a second or two
            result = subprocess.run([sys.executable, "-m", "kmon", "attach", str(pid), "--once",
                                     "--json"], capture_output=True, text=True, timeout=60,
                                    env={k: v for k, v in os.environ.items()
                                         if k != "KMON_SPOOL_DIR"})
            assert result.returncode == 0, result.stderr
            (process,) = json.loads(result.stdout)["processes"]
            if process["clients"]:
                break
        assert process["clients"], "statistics from the agent's fallback spool"
        assert any("not a private directory" in n for n in process["notices"])
        assert (Path(victim.pw_dir) / ".cache" / "kmon" / "spool").is_dir()
    finally:
        client.stop()
        shutil.rmtree(squatted, ignore_errors=True)


# --- a watched process's command line names its brokers -----------------------------------

@pytest.mark.parametrize("address", ["a:²", "a:٣", "b:99999999999999999999", "c:65536"])
def test_a_bootstrap_port_no_tcp_socket_can_have_is_no_address(address):
    """``isdigit`` holds for "²" (which int() refuses) and for Arabic-Indic digits, and a
    port past 65,535 overflows getaddrinfo in the lookup thread: none is an address."""
    from kmon.sources.brokers.dns import split_host_port

    assert split_host_port(address) is None
    assert split_host_port("a:65535") == ("a", 65535)


@pytest.mark.integration
def test_a_watched_process_naming_impossible_ports_leaves_kmon_attach_running(tmp_path):
    """A process anyone may start puts ports no socket can have in its bootstrap flag: kmon
    attached to it answers, as for any other address it cannot use, with no traceback."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                                "--bootstrap-server", "a:²,b:99999999999999999999", "kafka"])
    try:
        done = subprocess.run([sys.executable, "-m", "kmon", "attach", str(sleeper.pid),
                               "--once", "--json", "--settle", "0"],
                              capture_output=True, text=True, timeout=60)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert [p["pid"] for p in json.loads(done.stdout)["processes"]] == [sleeper.pid]
