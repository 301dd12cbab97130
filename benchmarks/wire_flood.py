"""What hostile peers and spools make kmon spend: its memory under a FindCoordinator flood,
its snapshot rate beside a dripping "broker", and its poll time over a flood of spool files.

    sudo python -m benchmarks wire_flood [--seconds 60]

1. Flood: a plain client asks a fake broker (kmon.devtools.hostile_broker, mode
   ``coordinators``) for its coordinator as fast as it answers, every answer naming a
   coordinator never named before, so kmon's brokers stay unknown and every answer is
   read. ``kmon attach PID --json`` runs beside it for --seconds; its RSS is read
   every second. The baseline, in the same run: the same client and the same rate of
   answers, all naming one coordinator (mode ``quiet``). Printed: kmon's RSS at the
   end and at its peak, each against the baseline's.
2. Drip: a fake broker answers a 1 MiB size and then a byte every 0.9 s; a client sends
   it Metadata requests. kmon attach --json --interval 500ms runs beside it for 10 s:
   the snapshots printed, against a client of a quiet broker over the same time.
3. Spool: 50 records of 1 MiB of one process in a private spool; the time of one
   ``read_client_stats`` (what each poll does), against the same read without the caps
   (as kmon read before them).
4. Frame boundaries: the time ``PacketCapture.read`` takes over 20,000 request headers of
   one socket (one segment each), with the sequence check and with it switched off.
Needs root (CAP_NET_RAW) for the wire.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from benchmarks.api import BenchmarkError, Result
from kmon.devtools.hostile_broker import HostileBroker, find_coordinator_request
from kmon.sources.clients import spool
from kmon.sources.clients.librdkafka_stats import read_client_stats

MB = 1 << 20


def _attached(broker: HostileBroker, api: str, seconds: float, interval: str = "1s",
              ) -> tuple[list[int], int]:
    """kmon attached for ``seconds`` to a client of ``broker``: (its RSS each second, the
    snapshots it printed)."""
    talker = subprocess.Popen([sys.executable, "-m", "kmon.devtools.hostile_broker",
                               str(broker.port), api], stdout=subprocess.PIPE, text=True)
    kmon = None
    try:
        assert talker.stdout is not None and talker.stdout.readline().startswith("READY")
        with tempfile.TemporaryFile("w+") as out:
            kmon = subprocess.Popen([sys.executable, "-m", "kmon", "attach", str(talker.pid),
                                     "--json", "--interval", interval, "--any-process"],
                                    stdout=out, stderr=subprocess.DEVNULL)
            rss, process = [], psutil.Process(kmon.pid)
            ends = time.monotonic() + seconds
            while time.monotonic() < ends and kmon.poll() is None:
                time.sleep(1)
                rss.append(process.memory_info().rss)
            out.seek(0)
            snapshots = sum(line.startswith("{") for line in out)
        return rss, snapshots
    finally:
        for proc in (kmon, talker):
            if proc is not None:
                proc.terminate()
                proc.wait()
        broker.close()


def flood(seconds: float, result: Result) -> None:
    quiet_rss, _ = _attached(HostileBroker("quiet"), "find_coordinator", seconds)
    broker = HostileBroker("coordinators")
    flood_rss, _ = _attached(broker, "find_coordinator", seconds)
    print(f"flood: {broker.answers:,} coordinator answers in {seconds:.0f} s; kmon RSS at the "
          f"end {flood_rss[-1] / MB:.0f} MB (peak {max(flood_rss) / MB:.0f} MB), baseline "
          f"(one coordinator named) {quiet_rss[-1] / MB:.0f} MB (peak "
          f"{max(quiet_rss) / MB:.0f} MB): {flood_rss[-1] / quiet_rss[-1]:.2f}x")
    result.figure("flood: kmon RSS at the end", flood_rss[-1] / MB, "MB")
    result.figure("quiet: kmon RSS at the end", quiet_rss[-1] / MB, "MB")
    result.ratio("flood / quiet RSS", "flood: kmon RSS at the end", "quiet: kmon RSS at the end")


def drip(result: Result, seconds: float = 10) -> None:
    _, quiet = _attached(HostileBroker("quiet"), "metadata", seconds, "500ms")
    _, dripped = _attached(HostileBroker("drip"), "metadata", seconds, "500ms")
    print(f"drip: kmon attach --interval 500ms printed {dripped} snapshots in {seconds:.0f} s "
          f"beside a dripping broker, {quiet} beside a quiet one: {dripped / quiet:.2f}x")
    result.figure("drip: snapshots", dripped)
    result.figure("quiet: snapshots", quiet)
    result.ratio("drip / quiet snapshots", "drip: snapshots", "quiet: snapshots")


def _spool_of(directory: Path, files: int, size: int) -> None:
    """``files`` records of this process, each of some ``size`` bytes of valid brokers."""
    directory.mkdir(mode=0o700)
    me = psutil.Process()
    broker = {"nodeid": 1, "nodename": "b1:9092", "source": "learned", "state": "UP"}
    brokers = {f"b{n}:9092/{n}": broker for n in range(size // (len(json.dumps(broker)) + 24))}
    for i in range(files):
        record = {"format": 1, "proc_start": me.create_time(), "written_ms": 1, "config": {},
                  "stats": {"name": f"rdkafka#producer-{i}", "type": "producer",
                            "brokers": brokers}}
        (directory / f"{me.pid}-rdkafka#producer-{i}.json").write_text(json.dumps(record))


def _read_time(directory: Path, rounds: int = 5) -> tuple[float, int]:
    """(seconds of one read, best of ``rounds``; the records it took)."""
    me, best, taken = psutil.Process(), float("inf"), 0
    for _ in range(rounds):
        started = time.perf_counter()
        taken = len(read_client_stats(me, me.create_time(), os.getuid(), [directory]).stats)
        best = min(best, time.perf_counter() - started)
    return best, taken


def spool_flood(result: Result) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _spool_of(Path(tmp) / "flood", 50, spool.MAX_RECORD_BYTES - 4096)
        capped, taken = _read_time(Path(tmp) / "flood")
        caps = spool.MAX_FILES_PER_READ, spool.MAX_BYTES_PER_READ
        spool.MAX_FILES_PER_READ, spool.MAX_BYTES_PER_READ = 1 << 30, 1 << 60  # as before
        try:
            whole, _ = _read_time(Path(tmp) / "flood")
        finally:
            spool.MAX_FILES_PER_READ, spool.MAX_BYTES_PER_READ = caps
        print(f"spool: one poll's read of 50 files of 1 MiB took {capped * 1000:.0f} ms "
              f"({taken} files read), {whole * 1000:.0f} ms without the caps: "
              f"{capped / whole:.3f}x")
        result.figure("spool read, capped", capped * 1000, "ms")
        result.figure("spool read, uncapped", whole * 1000, "ms")
        result.ratio("spool capped / uncapped", "spool read, capped", "spool read, uncapped")


def _read_headers(headers: int = 20_000, rounds: int = 5) -> float:
    """Seconds ``PacketCapture.read`` takes over ``headers`` one-segment requests (the best
    of ``rounds``; the ring holds some 10,000 at a time: read as they come)."""
    from kmon.sources.packets.packet_capture import PacketCapture

    request = find_coordinator_request(0)
    best = float("inf")
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer, _ = server.accept()
        capture = PacketCapture({client.getsockname()[1]}, set())
        capture.set_ports({client.getsockname()[1]}, set(), responses=False)
        try:
            for _ in range(rounds):
                spent = 0.0
                for _ in range(headers // 2_000):
                    for _ in range(2_000):
                        client.sendall(request)
                        peer.recv(1 << 16)
                    time.sleep(0.1)  # the ring hands its blocks over
                    started = time.perf_counter()
                    capture.read()
                    spent += time.perf_counter() - started
                best = min(best, spent)
        finally:
            capture.close()
            client.close()
            peer.close()
    return best


def frame_boundaries(result: Result) -> None:
    from kmon.sources.packets import frame_boundaries as fb

    checked = _read_headers()
    follows = fb.FrameBoundaries.follows
    fb.FrameBoundaries.follows = lambda *_: True  # type: ignore[method-assign]
    try:
        unchecked = _read_headers()
    finally:
        fb.FrameBoundaries.follows = follows  # type: ignore[method-assign]
    print(f"frame boundaries: reading 20,000 request headers took {checked * 1000:.1f} ms "
          f"with the sequence check, {unchecked * 1000:.1f} ms without: "
          f"{checked / unchecked:.2f}x")
    result.figure("headers read, checked", checked * 1000, "ms")
    result.figure("headers read, unchecked", unchecked * 1000, "ms")
    result.ratio("sequence check on / off", "headers read, checked", "headers read, unchecked")


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=60.0)


def run(args: argparse.Namespace) -> Result:
    if os.geteuid() != 0:
        raise BenchmarkError("run as root: the wire needs CAP_NET_RAW")
    result = Result()
    spool_flood(result)
    frame_boundaries(result)
    drip(result)
    flood(args.seconds, result)
    return result
