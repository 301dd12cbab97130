"""Bytes a process chose that are not UTF-8 reach every output of kmon as valid text.

A user's process whose script path holds byte 0xff, and which maps a file named
``librdkafka.so.1`` (so kmon's host view finds it as a Kafka client), once made root's
``kmon serve`` answer 500 and then exit, and ``kmon ps --json`` / ``kmon attach --json``
end in a traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import confluent_kafka
import psutil
import pytest
from helpers import get, kmon, python_as, start_serve, wait_for

from kmon.engine.playback import frame_from_line
from kmon.engine.recording_schema import SchemaError
from kmon.sources.text import decoded, json_value, valid

pytestmark = pytest.mark.integration  # a throwaway user's process, the real kmon commands

HOSTILE = """\
import ctypes, mmap, sys, time
library = open(sys.argv[1], "rb")
mapped = mmap.mmap(library.fileno(), 0, prot=mmap.PROT_READ)
ctypes.CDLL(None).prctl(15, b"kmon\\xffname", 0, 0, 0)  # PR_SET_NAME: its name too
print("ready", flush=True)
time.sleep(600)
"""


def _librdkafka() -> Path:
    """The librdkafka the confluent-kafka wheel ships."""
    libs = Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"
    return next(libs.glob("librdkafka*.so*"))


@pytest.fixture
def hostile_process(throwaway_user):
    """A throwaway user's Python running ``/tmp/…/d\\xff/s\\xff.py``, with a copy of
    librdkafka mapped under the name ``librdkafka.so.1``; its pid."""
    base = Path(tempfile.mkdtemp(prefix="kmon-bytes-"))
    base.chmod(0o755)
    library = base / "librdkafka.so.1"
    shutil.copy(_librdkafka(), library)
    script_dir = os.path.join(os.fsencode(base), b"d\xff")
    os.mkdir(script_dir, 0o755)
    script = os.path.join(script_dir, b"s\xff.py")
    Path(os.fsdecode(script)).write_text(HOSTILE)
    os.chmod(script, 0o644)
    library.chmod(0o644)
    prefix, env = python_as(throwaway_user.pw_name)
    proc = subprocess.Popen([*prefix, script, str(library)], env=env, stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"ready\n"
        (python,) = psutil.Process(proc.pid).children()  # runuser's child
        yield python.pid
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(base)


def test_root_kmon_serve_outlives_a_process_named_with_a_byte_that_is_not_utf8(
        hostile_process):
    child, address = start_serve("--interval", "200ms", "--wire", "off")
    try:
        def seen() -> str | None:
            status, _, body = get(f"http://{address}/metrics")
            assert status == 200, body
            return next((line for line in body.splitlines()
                         if "s\\\\xff.py" in line), None)  # its process label
        line = wait_for(seen, "the process with byte 0xff on /metrics", seconds=60)
        assert 's\\\\xff.py' in line, line  # the byte shown as \xff (escaped once more)
        for _ in range(3):
            status, _, body = get(f"http://{address}/metrics")
            assert status == 200, body
        polls = _polls(address)
        wait_for(lambda: _polls(address) >= polls + 5, "five more polls, each rendered")
        assert child.proc.poll() is None, child.stderr
        assert not any("Traceback" in line for line in child.stderr), child.stderr
    finally:
        child.stop()


def _polls(address: str) -> float:
    """kmon_poll_duration_seconds_count: the polls serve has made."""
    status, _, body = get(f"http://{address}/metrics")
    assert status == 200, body
    return float(next(line.split()[1] for line in body.splitlines()
                      if line.startswith("kmon_poll_duration_seconds_count ")))


def test_ps_and_attach_json_print_the_byte_as_valid_text(hostile_process):
    listed = kmon("ps", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout.encode("utf-8"))["processes"]
    (row,) = [r for r in rows if r["pid"] == hostile_process]
    assert "d\\xff/s\\xff.py" in row["cmdline"], row
    attached = subprocess.run([sys.executable, "-m", "kmon", "attach", str(hostile_process),
                               "--json", "--once"], capture_output=True, timeout=60)
    assert attached.returncode == 0, attached.stderr
    (view,) = json.loads(attached.stdout.decode("utf-8"))["processes"]
    assert view["name"] == "kmon\\xffname", view["name"]
    assert "s\\xff.py" in view["cmdline"], view["cmdline"]


@pytest.mark.parametrize(("raw", "text"), [
    ("s\udcff.py", "s\\xff.py"),  # an undecodable byte, as psutil and os hand it back
    ("\ud800x", "\\ud800x"),  # any other lone surrogate
    ("plain ascii", "plain ascii"),
    ("caf\u00e9 \u2603", "caf\u00e9 \u2603"),
])
def test_valid_text_escapes_lone_surrogates_only(raw, text):
    assert valid(raw) == text
    valid(raw).encode("utf-8")


def test_decoded_bytes_read_as_the_os_strings_do():
    raw = b"d\xff/s\xe2\x82.py \xe2\x98\x83"
    assert decoded(raw) == valid(os.fsdecode(raw)) == "d\\xff/s\\xe2\\x82.py \u2603"


def test_a_spool_json_with_a_lone_surrogate_escape_is_refused():
    assert json.loads('"\\udcff"') == "\udcff"  # what the standard library would take
    with pytest.raises(ValueError):
        json_value(b'{"client_id": "\\udcff"}')


def test_a_recording_with_a_lone_surrogate_escape_is_refused_by_replay():
    line = (Path(__file__).parent / "data" / "consumer.jsonl").read_bytes().splitlines()[0]
    forged = line.replace(b'"name": "python"', b'"name": "py\\udcffthon"', 1)
    assert forged != line
    frame_from_line(line)
    with pytest.raises(SchemaError, match=r"processes\[0\]\.name is no valid text"):
        frame_from_line(forged)
