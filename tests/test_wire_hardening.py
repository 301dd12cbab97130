"""Hostile peers, packets and spools against kmon's network and spool sources: each defence
reproduced with the attack it stops (a flood, a dripping broker, a forged segment)."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from conftest import Child

from kmon.sources import kafka_protocol as kp
from kmon.sources import spool
from kmon.sources.broker_query import CORRELATION_ID
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


# --- kmon's own Metadata query: one deadline, a small cap, never on the poll path ---------

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the wire needs CAP_NET_RAW (root)")

KAFKA_TALKER = """
import socket, sys, time
from kmon.sources import kafka_protocol as kp
conn = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
print("READY", flush=True)
for correlation in range(10**6):
    conn.sendall(kp.metadata_request(correlation, "talker"))
    time.sleep(0.3)
"""


class DrippingBroker:
    """A fake "broker" (a real one cannot be made to misbehave so): to every connection it
    answers a 1 MiB size and then one byte every 0.9 s, and it notes whether kmon's own
    Metadata request (correlation id "kmon") reached it."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.asked_by_kmon = threading.Event()
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        with conn:
            try:
                first = conn.recv(64)
                if kp.request_header(first) and kp.request_header(first).correlation_id \
                        == CORRELATION_ID:
                    self.asked_by_kmon.set()
                conn.sendall((1 << 20).to_bytes(4, "big"))
                while not self.stopped.wait(0.9):
                    conn.sendall(b"\0")
            except OSError:
                return

    def close(self) -> None:
        self.stopped.set()
        self.server.close()


def _drain(child: Child) -> list[str]:
    """The lines a child printed since the last drain."""
    lines = []
    while not child.lines.empty():
        lines.append(child.lines.get())
    return lines


@as_root
def test_a_dripping_broker_delays_no_snapshot_of_kmon_attach():
    broker = DrippingBroker()
    talker = Child([sys.executable, "-c", KAFKA_TALKER, str(broker.port)])
    stream = None
    try:
        talker.wait_line("READY")
        stream = Child([sys.executable, "-m", "kmon", "attach", str(talker.pid), "--json",
                        "--interval", "500ms", "--any-process"])
        assert broker.asked_by_kmon.wait(30), "kmon never asked the peer for its brokers"
        time.sleep(6)
        _drain(stream)  # from here, kmon's query of the dripping peer is under way
        time.sleep(6)
        count = sum(line.startswith("{") for line in _drain(stream))
    finally:
        for child in (stream, talker):
            if child is not None:
                child.stop()
        broker.close()
    assert count >= 8, f"{count} snapshots in 6 s at an interval of 500 ms"
