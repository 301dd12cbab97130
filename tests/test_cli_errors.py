"""Errors that say what happened and what to do next: each a message and an exit code."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess

import pytest
from helpers import assert_one_clear_line, kmon, python_as

from kmon.model import ProcessView, Snapshot

pytestmark = pytest.mark.integration


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_pid_is_checked_before_the_cluster():
    result = kmon("attach", "999999", "--once", "-b", f"127.0.0.1:{closed_port()}",
                  "--cluster-timeout", "1m")
    assert_one_clear_line(result, 1, "no process with PID 999999")


@pytest.mark.parametrize(("address", "when", "words"), [
    ("closed", "at once", ["refused", "check the port"]),  # a RST: no need to wait
    ("nosuch.invalid:9092", "at once", ["no such host", "does not resolve"]),
    ("silent", "within 1s", ["connects", "security.protocol=SSL", "--cluster-timeout"]),
    ("full", "within 1s", ["timeout", "firewall", "--cluster-timeout 30s"]),
])
def test_an_unreachable_cluster_says_why_and_what_next(address, when, words):
    with contextlib.ExitStack() as stack:
        silent = stack.enter_context(socket.socket())  # accepts (the kernel does), says nothing
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        full = stack.enter_context(socket.socket())  # its accept queue full: SYNs go unanswered
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        for _ in range(2):
            waiting = stack.enter_context(socket.socket())
            waiting.setblocking(False)
            waiting.connect_ex(full.getsockname())
        address = {"closed": f"127.0.0.1:{closed_port()}",
                   "silent": f"127.0.0.1:{silent.getsockname()[1]}",
                   "full": f"127.0.0.1:{full.getsockname()[1]}"}.get(address, address)
        result = kmon("attach", str(os.getpid()), "--any-process", "--once", "-b", address,
                      "--cluster-timeout", "1s")
    assert_one_clear_line(result, 1, f"cluster {address} did not answer {when}", *words)


def test_permission_messages_know_who_kmon_runs_as(throwaway_user):
    # a non-root user is told to be the process's user or root
    prefix, env = python_as(throwaway_user.pw_name)
    result = subprocess.run([*prefix, "-m", "kmon", "attach", str(os.getpid()), "--once"],
                            capture_output=True, text=True, env=env, cwd="/")
    assert_one_clear_line(result, 1, "no permission", "or as root")


def test_root_is_never_told_to_run_as_root():
    if os.geteuid() != 0:
        pytest.skip("needs root")
    result = kmon("attach", "1", "--once")
    assert result.returncode == 1 and "as root" not in result.stderr, result.stderr


def test_record_pid_hints_only_at_what_record_has(tmp_path):
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        result = kmon("record", "--pid", str(sleeper.pid), "--out", str(tmp_path / "out"))
    finally:
        sleeper.kill()
        sleeper.wait()
    assert_one_clear_line(result, 1, "no sign of being a Kafka client", "--any-process",
                          "-b CLUSTER instead of --pid")
    assert "--bootstrap-servers" not in result.stderr


def snapshot_line(*pids: int) -> str:
    record = Snapshot(1_700_000_000_000, "h", [ProcessView(pid, "p", "p") for pid in pids]
                      ).to_dict()
    return json.dumps({**record, "events": []}) + "\n"


def test_replay_lists_the_pids_it_holds(tmp_path):
    recording = tmp_path / "r.jsonl"
    recording.write_text(snapshot_line(41, 42))
    assert_one_clear_line(kmon("replay", str(recording), "--pid", "7"), 1,
                          "holds no snapshot of PID 7; it holds PID 41, 42")
    recording.write_text(snapshot_line())
    assert_one_clear_line(kmon("replay", str(recording)), 1, "snapshots of no process")


def test_replay_of_a_record_session_says_to_use_analyze(tmp_path):
    (tmp_path / "session" / "snapshots").mkdir(parents=True)
    for path in (tmp_path / "session", tmp_path / "part-0.parquet"):
        path.touch()
        assert_one_clear_line(kmon("replay", str(path)), 1, "kmon record session (Parquet)",
                              f"kmon analyze {path}", "kmon attach PID --json")


def test_bad_replay_lines_name_the_format(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    assert_one_clear_line(kmon("replay", str(text)), 1, "is not a kmon snapshot",
                          "replay reads JSON lines")
